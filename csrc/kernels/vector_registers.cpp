#include "kernels/vector_registers.h"

namespace lazyfuse {

const char* VectorTypeFor(int bytes) {
  switch (bytes) {
    case 16:
      return "lf_v16";
    case 8:
      return "lf_v8";
    case 4:
      return "unsigned int";
    case 2:
      return "unsigned short";
    default:
      return "unsigned char";
  }
}

std::string VectorUnion(at::ScalarType dtype, int width, const std::string& name) {
  const int bytes = static_cast<int>(c10::elementSize(dtype)) * width;
  return "union { " + std::string(VectorTypeFor(bytes)) + " v; " + StorageTypeName(dtype) + " e[" +
         std::to_string(width) + "]; } " + name + ";\n";
}

std::string VectorLoads(const KernelWriter& writer,
                        const FusionGroup& group,
                        int width,
                        const std::string& base,
                        const std::string& indent) {
  const Program& program = writer.program();
  std::string lines;
  for (size_t k : writer.vector_inputs()) {
    const at::ScalarType dtype = program.buffers[group.inputs[k]].dtype;
    const int bytes = static_cast<int>(c10::elementSize(dtype)) * width;
    const std::string name = "vi" + std::to_string(k);
    lines += indent + VectorUnion(dtype, width, name);
    lines += indent + name + ".v = lf_vload<" + VectorTypeFor(bytes) + ">(in" + std::to_string(k) +
             " + " + base + ");\n";
  }
  for (size_t k : writer.vector_outputs()) {
    lines += indent +
             VectorUnion(program.buffers[group.outputs[k]].dtype, width, "vo" + std::to_string(k));
  }
  return lines;
}

std::string VectorStores(const KernelWriter& writer,
                         const std::string& base,
                         const std::string& indent) {
  std::string lines;
  for (size_t k : writer.vector_outputs()) {
    lines += indent + "lf_vstore(out" + std::to_string(k) + " + " + base + ", vo" +
             std::to_string(k) + ".v);\n";
  }
  return lines;
}

}  // namespace lazyfuse

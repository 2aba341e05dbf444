"""Generates lazyfuse's lazy-op stubs with torchgen's gen_lazy_tensor.

Runs inside the CMake build. Outputs go to the build tree only:
  LazyIr.h, LazyNonNativeIr.h      IR node classes, each with a Lower() that
                                   emits one ATen step into a lazyfuse Program
  LazyNativeFunctions.h            the kernel class declaration
  LazyNativeFunctions_<k>.cpp      the lazy kernels, split in shards so that a
                                   2-core build compiles them in parallel
  RegisterLazy.cpp                 RegisterLazyFuseLazyNativeFunctions()

step_kinds.py says how each op runs as a Program step; kernel_definitions.py
generates the kernels' bodies.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torchgen.gen_lazy_tensor as gen_lazy_tensor
from kernel_definitions import (
    ARGUMENT_CHECKS,
    SHAPE_OVERRIDES,
    GenLazyFuseNativeFuncDefinition,
    is_tensor_list,
)
from step_kinds import (
    ATEN_PATH,
    CONSTANT_FILLS,
    OUT_VARIANTS,
    OWN_LOOPS_WITH_FUSED_KERNELS,
    OWN_STEPS,
    OWN_STEPS_WRITING_INPUTS,
    PARTIAL_WRITES,
    SCATTER_VIEWS,
    TAGS,
    executed_op,
    load_native_functions,
    load_out_variants,
    load_tags,
    reads_contiguous,
    step_kind,
)
from torchgen.api.lazy import LazyIrSchema, isValueType
from torchgen.api.types import OptionalCType
from torchgen.dest.lazy_ir import (
    GenLazyIR,
)


def dispatcher_arg(type_str: str, expr: str) -> str:
    """Converts a stored node attribute into what at::_ops::<op>::call takes."""
    bool_array = re.fullmatch(r"bool\[(\d+)\]", type_str)
    if bool_array:
        return f"lazyfuse::ToBoolArray<{bool_array.group(1)}>({expr})"
    base = re.sub(r"\[\d*\]", "[]", type_str)
    if base == "SymInt[]":
        return f"c10::fromIntArrayRefSlow({expr})"
    if base == "SymInt":
        return f"c10::SymInt({expr})"
    if base == "SymInt?":
        return f"({expr} ? std::make_optional(c10::SymInt(*{expr})) : std::nullopt)"
    if base == "SymInt[]?":
        return (
            f"({expr} ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*{expr}))"
            " : at::OptionalSymIntArrayRef())"
        )
    if base == "int[]?":
        return f"({expr} ? at::OptionalIntArrayRef(*{expr}) : at::OptionalIntArrayRef())"
    if base == "str?":
        return f"({expr} ? std::make_optional<c10::string_view>(*{expr}) : std::nullopt)"
    return expr


def _is_scalar(cpp_type: str) -> bool:
    """at::Scalar or an optional one (not at::ScalarType)."""
    return re.search(r"\bat::Scalar>?$", cpp_type) is not None


@dataclass(frozen=True)
class GenLazyFuseIR(GenLazyIR):
    """IR nodes whose Lower() emits one ATen step into the lazyfuse Program."""

    def lowering_function(self, schema: LazyIrSchema) -> str:
        signature = "void Lower(lazyfuse::LazyFuseLoweringContext& ctx) const override"
        if schema.properties.LowerDeclOnly:
            return f"{signature};"
        if not schema.properties.Lower:
            return ""
        op_name = str(schema.func.name)
        captures: list[str] = []
        reads: list[str] = []
        call_args: list[str] = []
        # Named attributes the fusion planner and kernel codegen read.
        attrs: list[str] = []
        for arg in schema.filtered_args():
            local = f"a_{arg.name}"
            if arg.is_generator:
                call_args.append("std::nullopt")
                continue
            if isValueType(arg.lazy_type, schema.properties):
                if arg.is_symint_or_list:
                    raise RuntimeError(f"{op_name}: symbolic ints are not supported")
                optional = isinstance(arg.lazy_type, OptionalCType)
                if optional:
                    captures.append(f"const bool has_{local} = has_{arg.name};")
                    attrs.append(f'{{"has_{arg.name}", c10::IValue(has_{local})}}')
                if arg.is_wrapped_scalar:
                    read = f"args.optional_scalar(has_{local})" if optional else "args.scalar()"
                elif optional:
                    read = f"args.optional_tensor(has_{local})"
                elif is_tensor_list(arg):
                    read = "args.tensor_list()"
                else:
                    read = "args.tensor()"
                reads.append(f"auto {local} = {read};")
                call_args.append(local)
            else:
                captures.append(f"const auto {local} = this->{arg.name};")
                call_args.append(dispatcher_arg(str(arg.orig_type), local))
                attrs.append(f'{{"{arg.name}", lazyfuse::ToAttr({local})}}')
        if reads_contiguous(op_name):
            reads.insert(0, "args.ReadContiguous();")
        aten_op = executed_op(op_name, schema.func.name.unambiguous_name())
        into_call = None
        pointwise = step_kind(op_name) == "kPointwise"
        if pointwise and op_name in OUT_VARIANTS:
            into_call = f"{OUT_VARIANTS[op_name]}::call({', '.join(call_args + ['lf_into'])})"
        elif pointwise and op_name in CONSTANT_FILLS:
            into_call = f"{CONSTANT_FILLS[op_name]}::call({', '.join(['lf_into'] + call_args[1:])})"
        if aten_op in ("detach", "alias"):
            # The input itself when nothing else reads it (KernelArgs::PassInput).
            reads.append(
                "if (at::Tensor lf_same = args.PassInput(0); lf_same.defined()) {\n"
                "        return {lf_same};\n"
                "      }"
            )
        if into_call:
            # Written over an input the run no longer needs, as eager's
            # in-place optimizer updates are (KernelArgs::TakeInputFor).
            captures.append("const at::ScalarType lf_dtype = this->shape(0).scalar_type();")
            captures.append("const std::vector<int64_t> lf_sizes = this->shape(0).sizes().vec();")
            reads.append(
                "if (at::Tensor lf_into = args.TakeInputFor(lf_dtype, lf_sizes); "
                "lf_into.defined()) {\n"
                f"        at::_ops::{into_call};\n"
                "        return {lf_into};\n"
                "      }"
            )
        if op_name in SCATTER_VIEWS:
            view_args = ["lf_base", *call_args[2:]]  # the scatter's, without src
            reads.append(
                "if (at::Tensor lf_base = args.InputToWriteInto(0); lf_base.defined()) {\n"
                f"        at::Tensor lf_view = at::_ops::{SCATTER_VIEWS[op_name]}::call("
                f"{', '.join(view_args)});\n"
                f"        if (args.ScatterInto(0, lf_view, {call_args[1]})) {{\n"
                "          return {lf_base};\n"
                "        }\n"
                "      }"
            )
        if op_name in PARTIAL_WRITES:
            wraps = "true" if op_name.startswith("index_fill") else "false"
            reads.append(
                "if (at::Tensor lf_base = lazyfuse::BaseToWriteAlong("
                f"args, {call_args[1]}, {call_args[2]}, /*negative_wraps=*/{wraps}); "
                "lf_base.defined()) {\n"
                f"        at::_ops::{PARTIAL_WRITES[op_name]}::call("
                f"{', '.join(['lf_base', *call_args[1:]])});\n"
                "        return {lf_base};\n"
                "      }"
            )
        runs = OWN_STEPS.get(op_name, f"at::_ops::{aten_op}::call")
        run_args = ["args", *call_args] if op_name in OWN_STEPS_WRITING_INPUTS else list(call_args)
        if op_name in OWN_LOOPS_WITH_FUSED_KERNELS:
            captures.append("const bool lf_own_loop = lazyfuse::FusedKernelsEnabled();")
            run_args.append("lf_own_loop")
        capture_block = "\n    ".join(captures)
        read_block = "\n      ".join(reads)
        return f"""{signature} {{
    {capture_block}
    ctx.EmitStep(this, lazyfuse::StepKind::{step_kind(op_name)},
        [=](lazyfuse::KernelArgs& args) -> std::vector<at::Tensor> {{
      {read_block}
      return lazyfuse::AsTensorList({runs}({", ".join(run_args)}));
    }}, {{{", ".join(attrs)}}}, "{schema.func.name.overload_name}");
  }}"""

    def node_base_ctor_call(self, schema: LazyIrSchema) -> str:
        # torchgen hashes only the scalar attributes, so clamp(x, min=t) and
        # clamp(x, max=t) hashed alike and shared a compiled graph. Which
        # optional operands are present is part of the node's identity.
        # An at::Scalar attribute is hashed by lazyfuse: torch::lazy::Hash of
        # a complex Scalar calls itself until the stack overflows.
        call = super().node_base_ctor_call(schema)
        head, sep, tail = call.rpartition("torch::lazy::MHash(")
        attributes = schema.filtered_args(values=False, scalars=True)
        torchgen_hashed = ", ".join(a.name for a in attributes)
        if not sep or not tail.startswith(torchgen_hashed + ")"):
            raise RuntimeError(f"{schema.name}: unexpected node constructor {call}")
        present = [
            f"{a.name}.has_value()"
            for a in schema.filtered_args(values=True, scalars=False)
            if isinstance(a.lazy_type, OptionalCType)
        ]
        hashed = [
            f"lazyfuse::ScalarHash({a.name})" if _is_scalar(a.lazy_type.cpp_type()) else a.name
            for a in attributes
        ]
        rest = tail[len(torchgen_hashed) :]
        return f"{head}{sep}{', '.join(present + hashed)}{rest}"

    def can_be_reused_function(self, schema: LazyIrSchema, node_ctor_args: str) -> str:
        checks = []
        values = schema.filtered_args(values=True, scalars=False)
        for arg in values:
            if isinstance(arg.lazy_type, OptionalCType):
                # Absent optionals take no operand slot, so presence must match
                # before positions can be compared.
                checks.append(f"this->has_{arg.name} == {arg.name}.has_value()")
                checks.append(f"(!{arg.name} || lazyfuse::SameOperand(operand(i++), *{arg.name}))")
            else:
                checks.append(f"lazyfuse::SameOperand(operand(i++), {arg.name})")
        for arg in schema.filtered_args(values=False, scalars=True):
            if arg.lazy_type.cpp_type() == "at::Scalar":
                checks.append(f"lazyfuse::SameScalar(this->{arg.name}, {arg.name})")
            else:
                checks.append(f"this->{arg.name} == {arg.name}")
        body = " &&\n        ".join(checks) if checks else "true"
        return f"""bool CanBeReused({node_ctor_args}) const {{
    [[maybe_unused]] size_t i = 0;
    return ({body});
  }}"""


def without_parameter_names(decl: str) -> str:
    """A declaration with its parameter names dropped. torchgen checks our
    header line by line, but torch renames parameters between releases
    (_cdist_backward's `grad` became `grad_output`) and C++ does not care:
    the generated stubs pass arguments by position."""
    if "(" not in decl:
        return decl
    head, params = decl.split("(", 1)
    out: list[str] = []
    depth = 0
    token = ""
    for char in params:
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        if char.isalnum() or char == "_":
            token += char
            continue
        if depth == 0 and char in ",)":
            token = ""  # the name of the parameter that ends here
        out.append(token + char)
        token = ""
    return head + "(" + "".join(out) + token


def validate_with_torch_header(extra_hdr: str) -> Callable[[str, list[str]], None]:
    """torchgen reads a single header for compute_shape_* declarations; ours
    only adds to torch's, so validate against both texts joined, comparing
    declarations without their parameter names."""
    original = gen_lazy_tensor.validate_shape_inference_header
    torch_hdr = (
        Path(sys.modules["torch"].__file__).parent
        / "include"
        / ("torch/csrc/lazy/core/shape_inference.h")
    )

    def validate(_hdr: str, expected: list[str]) -> None:
        text = torch_hdr.read_text() + "\n" + Path(extra_hdr).read_text()
        declared = {without_parameter_names(line) for line in text.split("\n")}
        missing = [decl for decl in expected if without_parameter_names(decl) not in declared]
        if not missing:
            return
        with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as joined:
            joined.write(text)
        try:
            original(joined.name, missing)
        except Exception as error:
            raise RuntimeError(str(error).replace(joined.name, extra_hdr)) from None
        finally:
            os.unlink(joined.name)

    return validate


# A check_arguments_<kernel> declaration; main() fills ARGUMENT_CHECKS from them.
ARGUMENT_CHECK_DECL = re.compile(r"^void check_arguments_(\w+)\(", re.MULTILINE)

# The kernels whose torch::lazy::compute_shape_<kernel> is replaced by
# lazyfuse::compute_shape_<kernel>, declared in ops/shape_inference.h's
# lazyfuse namespace: torch's is wrong for arguments eager accepts.
SHAPE_OVERRIDE_DECL = re.compile(
    r"^std::vector<torch::lazy::Shape> compute_shape_(\w+)\(", re.MULTILINE
)


def shape_overrides(header_text: str) -> set[str]:
    """The compute_shape_* functions declared in the header's lazyfuse
    namespace."""
    start = header_text.find("namespace lazyfuse {")
    if start < 0:
        return set()
    end = header_text.find("}  // namespace lazyfuse", start)
    return set(SHAPE_OVERRIDE_DECL.findall(header_text[start : end if end >= 0 else None]))


DEFINITION_START = re.compile(r"^    \S.*\bLazyNativeFunctions::\w+\(")


def split_native_functions(path: Path, shards: int) -> None:
    """Splits LazyNativeFunctions.cpp into shards that share its prologue."""
    lines = path.read_text().splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if DEFINITION_START.match(line)]
    if not starts:
        raise RuntimeError(f"no kernel definitions found in {path}")
    prologue = "".join(lines[: starts[0]])
    epilogue_at = max(i for i, line in enumerate(lines) if line.startswith("} // namespace"))
    epilogue = "".join(lines[epilogue_at:])
    bounds = starts + [epilogue_at]
    bodies = ["".join(lines[bounds[k] : bounds[k + 1]]) for k in range(len(starts))]
    per_shard = -(-len(bodies) // shards)
    for k in range(shards):
        chunk = bodies[k * per_shard : (k + 1) * per_shard]
        out = path.with_name(f"LazyNativeFunctions_{k}.cpp")
        out.write_text(prologue + "".join(chunk) + epilogue)
    path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--yaml", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--shape-inference-hdr", required=True)
    parser.add_argument("--argument-checks-hdr", required=True)
    parser.add_argument("--shards", type=int, default=4)
    options = parser.parse_args()
    ARGUMENT_CHECKS.update(
        ARGUMENT_CHECK_DECL.findall(Path(options.argument_checks_hdr).read_text())
    )
    SHAPE_OVERRIDES.update(shape_overrides(Path(options.shape_inference_hdr).read_text()))

    import torch  # noqa: F401  (validate_with_torch_header finds torch's header)

    functions = load_native_functions()
    TAGS.update(load_tags(functions))
    OUT_VARIANTS.update(load_out_variants(functions))
    gen_lazy_tensor.validate_shape_inference_header = validate_with_torch_header(
        options.shape_inference_hdr
    )
    os.makedirs(options.output_dir, exist_ok=True)
    gen_lazy_tensor.run_gen_lazy_tensor(
        aten_path=ATEN_PATH,
        source_yaml=options.yaml,
        output_dir=options.output_dir,
        dry_run=False,
        impl_path=None,
        node_base="lazyfuse::LazyFuseNode",
        node_base_hdr="ops/codegen_prelude.h",
        tensor_class="torch::lazy::LazyTensor",
        tensor_class_hdr="torch/csrc/lazy/core/tensor.h",
        shape_inference_hdr="ops/shape_inference.h",
        lazy_ir_generator=GenLazyFuseIR,
        native_func_definition_generator=GenLazyFuseNativeFuncDefinition,
        backend_name="LazyFuse",
    )
    output_dir = Path(options.output_dir)
    split_native_functions(output_dir / "LazyNativeFunctions.cpp", options.shards)
    # torchgen leaves unchanged files untouched; bump every output so the
    # build sees them newer than their inputs and does not rerun this step.
    for path in output_dir.iterdir():
        path.touch()


if __name__ == "__main__":
    main()

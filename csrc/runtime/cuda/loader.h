#pragma once

// libnvrtc and libcuda, loaded with dlopen on first use. Nothing links
// either, so a machine without a GPU imports lazyfuse and, when NVRTC is
// found, still compiles kernels. Declarations are written here rather than
// taken from nvrtc.h/cuda.h so the build needs no CUDA toolkit.

#include <string>
#include <vector>

namespace lazyfuse {
namespace cuda {

using nvrtcProgram = void*;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;

struct NvrtcApi {
  std::string path;
  int (*nvrtcVersion)(int*, int*);
  const char* (*nvrtcGetErrorString)(int);
  int (*nvrtcCreateProgram)(
      nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  int (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  int (*nvrtcDestroyProgram)(nvrtcProgram*);
  int (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  int (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  int (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
  int (*nvrtcGetCUBIN)(nvrtcProgram, char*);
  int (*nvrtcGetPTXSize)(nvrtcProgram, size_t*);
  int (*nvrtcGetPTX)(nvrtcProgram, char*);
  int (*nvrtcGetNumSupportedArchs)(int*);
  int (*nvrtcGetSupportedArchs)(int*);
};

struct DriverApi {
  std::string path;
  int (*cuInit)(unsigned int);
  int (*cuGetErrorString)(int, const char**);
  int (*cuDeviceGet)(CUdevice*, int);
  int (*cuDeviceGetAttribute)(int*, int, CUdevice);
  int (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  int (*cuCtxGetCurrent)(CUcontext*);
  int (*cuCtxSetCurrent)(CUcontext);
  int (*cuModuleLoadData)(CUmodule*, const void*);
  int (*cuModuleUnload)(CUmodule);
  int (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  // Optional (nullptr if missing): how many blocks of a size fit an SM.
  int (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
  int (*cuLaunchKernel)(CUfunction,
                        unsigned int,
                        unsigned int,
                        unsigned int,
                        unsigned int,
                        unsigned int,
                        unsigned int,
                        unsigned int,
                        CUstream,
                        void**,
                        void**);
};

// Where libnvrtc is looked for, in order: LAZYFUSE_NVRTC_PATH (a file or a
// directory), the nvidia-cuda-nvrtc wheel installed next to torch,
// $CUDA_HOME/lib64 (default /usr/local/cuda), then the system loader.
std::vector<std::string> NvrtcCandidates();

// nullptr when libnvrtc cannot be loaded; `why` then lists what was tried.
const NvrtcApi* TryNvrtc(std::string* why = nullptr);
// Throws a Python-visible error naming what was tried.
const NvrtcApi& Nvrtc();
// libcuda.so.1, through the system loader; throws when there is no driver.
const DriverApi& Driver();

}  // namespace cuda
}  // namespace lazyfuse

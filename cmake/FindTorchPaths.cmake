# Finds the installed torch from Python, the way torch.utils.cpp_extension
# does, instead of find_package(Torch). Torch's CMake package runs its CUDA
# logic for a CUDA build of torch and then demands a CUDA toolkit with cudart;
# lazyfuse links no CUDA (csrc/runtime/cuda opens libcuda and libnvrtc with
# dlopen), so a pip-installed CUDA wheel must build with no toolkit at all.
#
# Sets TORCH_VERSION, TORCH_INCLUDE_DIRS, TORCH_LIB_DIR, LAZYFUSE_TORCH_FLAGS
# and TORCH_CXX_STANDARD, and stops with a clear error outside the supported
# torch range. Every difference between torch releases that the build sees
# is decided here.

set(LAZYFUSE_TORCH_MIN 2.11)
set(LAZYFUSE_TORCH_MAX 2.15)

execute_process(
  COMMAND ${Python3_EXECUTABLE} -c [=[
import os, torch
root = os.path.dirname(torch.__file__)
print(torch.__version__.split("+")[0])
print(os.path.join(root, "include"))
print(os.path.join(root, "include", "torch", "csrc", "api", "include"))
print(os.path.join(root, "lib"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
]=]
  OUTPUT_VARIABLE _torch_info
  ERROR_VARIABLE _torch_error
  RESULT_VARIABLE _torch_result
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _torch_result EQUAL 0)
  message(FATAL_ERROR
    "lazyfuse: cannot import torch with ${Python3_EXECUTABLE}:\n${_torch_error}")
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 TORCH_VERSION)
list(GET _torch_info 1 _torch_include)
list(GET _torch_info 2 _torch_api_include)
list(GET _torch_info 3 TORCH_LIB_DIR)
list(GET _torch_info 4 _torch_cxx11_abi)

string(REGEX MATCH "^[0-9]+\\.[0-9]+" _torch_minor "${TORCH_VERSION}")
if(_torch_minor VERSION_LESS LAZYFUSE_TORCH_MIN OR _torch_minor VERSION_GREATER LAZYFUSE_TORCH_MAX)
  message(FATAL_ERROR
    "lazyfuse supports torch ${LAZYFUSE_TORCH_MIN} to ${LAZYFUSE_TORCH_MAX}, but "
    "${Python3_EXECUTABLE} has torch ${TORCH_VERSION}. Install a supported torch "
    "(pip install torch==2.13.0 is the CPU build) and build again.")
endif()

# lazyfuse is C++17, but torch 2.15's headers use C++20 (concepts, <=>,
# std::bit_width), so sources are compiled as C++20 against it.
if(_torch_minor VERSION_GREATER_EQUAL 2.15)
  set(TORCH_CXX_STANDARD 20)
else()
  set(TORCH_CXX_STANDARD 17)
endif()

set(TORCH_INCLUDE_DIRS ${_torch_include} ${_torch_api_include})
set(LAZYFUSE_TORCH_FLAGS -D_GLIBCXX_USE_CXX11_ABI=${_torch_cxx11_abi})
foreach(lib torch torch_cpu c10 torch_python)
  string(TOUPPER "${lib}" _upper)
  find_library(TORCH_${_upper}_LIBRARY ${lib} PATHS ${TORCH_LIB_DIR} NO_DEFAULT_PATH REQUIRED)
endforeach()
message(STATUS "lazyfuse: torch ${TORCH_VERSION} at ${TORCH_LIB_DIR}, C++${TORCH_CXX_STANDARD} "
  "(no CUDA toolkit needed)")

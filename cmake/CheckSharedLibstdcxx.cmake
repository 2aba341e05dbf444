# Run after _C links (cmake -P): the module must load the shared libstdc++
# that torch loads. A compiler whose libstdc++ is linked statically (seen on a
# GPU machine: /opt/gcc/bin/g++) gives _C a second copy of the C++ runtime;
# its locale and stream state then mix with torch's, and the first
# std::ostringstream in a graph compile crashes the process.
#   -DMODULE=<path to _C.so> -DREADELF=<readelf> -DCOMPILER=<c++ compiler>
execute_process(COMMAND "${READELF}" -d "${MODULE}" OUTPUT_VARIABLE dynamic RESULT_VARIABLE failed)
if(failed)
  return()
endif()
if(NOT dynamic MATCHES "libstdc\\+\\+\\.so")
  file(REMOVE "${MODULE}")
  message(FATAL_ERROR
    "lazyfuse: ${MODULE} links libstdc++ statically (compiler ${COMPILER}), so it "
    "would carry its own C++ runtime beside torch's and crash. Build with a compiler "
    "that links the shared libstdc++, e.g. CXX=/usr/bin/g++ CC=/usr/bin/gcc.")
endif()

#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what is missing, builds, then
# runs the C++ tests (ctest) and the Python tests (pytest).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh

build_dir=$(ls -d build/cmake-py* | head -n 1)
if [ -x "$build_dir/lazyfuse_cpp_tests" ]; then
  ctest --test-dir "$build_dir" --output-on-failure
else
  echo "C++ tests not built: GoogleTest was not found"
fi
# One pytest process per core (LAZYFUSE_TEST_WORKERS overrides): a test
# spends much of its time waiting on the host compiler, single-threaded, for
# its kernels, and a cold kernel cache is most of a fresh machine's run.
workers=${LAZYFUSE_TEST_WORKERS:-$(nproc)}
exec "${PYTHON:-python3}" -m pytest -q -n "$workers" test/python "$@"

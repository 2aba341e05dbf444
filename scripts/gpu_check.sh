#!/usr/bin/env bash
# Everything a lent GPU machine should do, in one device call (issue "On a
# real GPU"): build lazyfuse from source, run the fused-kernel tests natively
# on CUDA, then the benchmarks. The machine has torch with CUDA, nvcc, cmake
# and ninja but no network and maybe no GoogleTest, so nothing is installed.
#
#   bash scripts/gpu_check.sh               # build, tests, benchmarks
#   bash scripts/gpu_check.sh --tests-only
#   bash scripts/gpu_check.sh --bench-only  # still builds first
#   bash scripts/gpu_check.sh --build-only  # the part a CPU machine can check
#
# Logs, JSON and Markdown go to $OUT (default ./gpu_out), at most 8 files;
# a short summary is printed last. Every step is time-boxed so one device call
# (10 minutes) always returns its logs; the boxes and sizes are settable:
#   GPU_CHECK_TESTS_LIMIT, GPU_CHECK_BENCH_LIMIT (seconds per step),
#   GPU_CHECK_TEST_TIMEOUT (seconds per test), GPU_CHECK_WORKERS (pytest -n),
#   GPU_CHECK_MAX_LOG2 (largest benchmark size), GPU_CHECK_HARNESS=1 (also
#   run python -m bench, minutes long).
# Seen on an H100 (2026-11-23): the build takes 2 minutes on 16 cores.
#
# The GPU image lacks expecttest, which torch's OpInfo database imports, and
# has no network. Bring it as a wheel in an ignored folder carried with the
# call (echo /.gpu/ >> .git/info/exclude), fetched on the CPU machine with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .gpu expecttest
# and start the device command with
#   pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl && export PYTHONPATH=/tmp/site
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=all
case "${1:-}" in
  --tests-only) mode=tests ;;
  --bench-only) mode=bench ;;
  --build-only) mode=build ;;
  "") ;;
  *) echo "usage: $0 [--tests-only|--bench-only|--build-only]" >&2; exit 2 ;;
esac

OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
summary=()
status=0

step() {  # step NAME LOGFILE LIMIT_S COMMAND...: runs, records pass/fail and seconds
  local name=$1 log=$2 limit=$3
  shift 3
  local start=$SECONDS
  echo "== $name: $*" >>"$OUT/$log"
  if timeout --kill-after=10 "$limit" "$@" >>"$OUT/$log" 2>&1; then
    summary+=("PASS $name ($((SECONDS - start)) s)")
  else
    summary+=("FAIL $name ($((SECONDS - start)) s, see $log)")
    status=1
  fi
}

{
  "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
  command -v nvcc >/dev/null && nvcc --version | tail -n 1
  nproc
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
} >"$OUT/build.log" 2>&1
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1

# The image's default g++ (/opt/gcc) links libstdc++ statically, which gives _C
# a second C++ runtime beside torch's (cmake/CheckSharedLibstdcxx.cmake); the
# system compiler links the shared one.
if [ -z "${GPU_CHECK_KEEP_CXX:-}" ] && [ -x /usr/bin/g++ ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++
fi
# GoogleTest may be missing; the Python suite is what this machine is for.
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export LAZYFUSE_BUILD_TESTS=${LAZYFUSE_BUILD_TESTS:-OFF}
step build build.log 420 "$PYTHON" -m pip install --no-build-isolation --no-deps --no-index -e .
for so in python/lazyfuse/_C*.so; do
  echo "$so needs: $(readelf -d "$so" 2>/dev/null | grep -o 'lib[a-z0-9_+-]*\.so[.0-9]*' | tr '\n' ' ')"
done >>"$OUT/build.log" 2>&1
if [ "$mode" = build ] || [[ "${summary[0]}" == FAIL* ]]; then
  printf '%s\n' "${summary[@]}"
  exit $status
fi

if [ "$mode" != bench ]; then
  export LAZYFUSE_DEVICE=cuda
  # Native fused kernels: the suite the CPU runs under emulation, the fuzzer's
  # CI set, then the parity and training tests on the CUDA backing device.
  # No -x: one call must show every failure. A hung kernel costs one test.
  pytest_args=(-q -rfE -p no:cacheprovider)
  if "$PYTHON" -c "import pytest_timeout" 2>/dev/null; then
    pytest_args+=(--timeout "${GPU_CHECK_TEST_TIMEOUT:-120}")
  fi
  # Separate worker processes: a crash fails one test, not the rest of the run.
  if "$PYTHON" -c "import xdist" 2>/dev/null; then
    pytest_args+=(-n "${GPU_CHECK_WORKERS:-8}")
  fi
  step "fused-kernel tests" tests.log "${GPU_CHECK_TESTS_LIMIT:-240}" "$PYTHON" -m pytest \
    "${pytest_args[@]}" test/python/test_cuda_fusion.py test/python/test_fuzz.py
  step "parity and training tests" tests.log "${GPU_CHECK_TESTS_LIMIT:-240}" "$PYTHON" -m pytest \
    "${pytest_args[@]}" test/python/test_ops.py test/python/test_models.py \
    test/python/test_api.py test/python/test_kernel_codegen.py
fi

if [ "$mode" != tests ]; then
  step "fused-kernel benchmark" bench.log "${GPU_CHECK_BENCH_LIMIT:-300}" "$PYTHON" \
    bench/fused_kernels.py --max-log2 "${GPU_CHECK_MAX_LOG2:-28}" --out "$OUT"
  step "training benchmark" bench.log "${GPU_CHECK_BENCH_LIMIT:-300}" "$PYTHON" \
    bench/gpu_training.py --out "$OUT"
  # Kernels per step next to eager's ops, and host µs per launch with real
  # CUDA launches; its table goes to bench.log (the files that come back are few).
  step "host overhead" bench.log "${GPU_CHECK_BENCH_LIMIT:-300}" "$PYTHON" \
    bench/host_overhead.py --out /tmp/lazyfuse_host_overhead
  # What bounds the row reductions (softmax at 2^24): ncu's speed-of-light
  # and memory sections for lazyfuse's kernels, when ncu can read counters.
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  if [ -n "$ncu" ]; then
    step "ncu reading" ncu.txt "${GPU_CHECK_BENCH_LIMIT:-300}" "$ncu" --target-processes all \
      --kernel-name regex:^lf_ --launch-skip 2 --launch-count 3 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
      "$PYTHON" bench/fused_kernels.py --profile-workload softmax --max-log2 24
  fi
  # The host-overhead harness takes minutes on a GPU machine; only on request.
  if [ -n "${GPU_CHECK_HARNESS:-}" ]; then
    step "harness" bench.log "${GPU_CHECK_BENCH_LIMIT:-300}" "$PYTHON" -m bench --quick \
      --cases train-mlp,train-lenet5,train-transformer,markstep-100 --out "$OUT/harness"
    [ -d "$OUT/harness" ] && cp "$OUT/harness/results.md" "$OUT/harness.md" 2>/dev/null
    rm -rf "$OUT/harness"
  fi
fi

echo "== gpu_check summary =="
[ -f "$OUT/tests.log" ] && grep -E "^(FAILED|ERROR)|passed|failed|fuzz:" "$OUT/tests.log" | tail -n 40
[ -f "$OUT/gpu_training.md" ] && cat "$OUT/gpu_training.md"
printf '%s\n' "${summary[@]}"
exit $status

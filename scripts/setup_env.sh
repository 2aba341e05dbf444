#!/usr/bin/env bash
# Installs what lazyfuse needs on a fresh machine, then builds it in place.
# Sourced by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}

# torch: the 2.13.0 CPU build, and only when no torch is installed. A bare
# `pip install torch` would pull several GB of CUDA wheels.
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  "$PYTHON" -m pip install torch==2.13.0
fi
# transformers: the README's "Testing your model" example is a test.
# pytest-xdist: scripts/test.sh runs the tests in one process per core.
"$PYTHON" -m pip install --quiet pytest pytest-xdist pyyaml expecttest hypothesis setuptools \
  wheel matplotlib transformers
command -v cmake >/dev/null || "$PYTHON" -m pip install --quiet cmake
command -v ninja >/dev/null || "$PYTHON" -m pip install --quiet ninja

# NVRTC compiles lazyfuse's fused CUDA kernels, and works without a GPU. The
# CUDA toolkit may ship without it; the nvidia-cuda-nvrtc wheel provides it
# (lazyfuse looks next to torch for it). Optional: without it, CUDA kernels
# cannot be compiled and the tests that compile them skip, saying why.
if ! "$PYTHON" - <<'PY' 2>/dev/null
import glob, os, site, sys
home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
roots = site.getsitepackages() + [site.getusersitepackages()]
found = glob.glob(f"{home}/lib64/libnvrtc.so*") + [
    p for r in roots for p in glob.glob(f"{r}/nvidia/*/lib/libnvrtc.so*")
]
sys.exit(0 if found or os.environ.get("LAZYFUSE_NVRTC_PATH") else 1)
PY
then
  "$PYTHON" -m pip install --quiet nvidia-cuda-nvrtc ||
    echo "warning: could not install nvidia-cuda-nvrtc; CUDA kernels will not compile"
fi

# GoogleTest for the C++ tests, and ccache to keep rebuilds short. Both are
# optional: without GoogleTest the C++ test binary is not built.
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  missing=()
  [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  command -v ccache >/dev/null || missing+=(ccache)
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

# Two cores and 24 GiB: two parallel compile jobs fit.
export MAX_JOBS=${MAX_JOBS:-2}
"$PYTHON" -m pip install --no-build-isolation --no-deps -e . 

#!/usr/bin/env bash
# Builds lazyfuse against one torch release in a venv of its own, the way a
# user with a pip-installed torch would, then tests it.
#
#   bash scripts/check_torch_version.sh 2.11.0     # CI: the oldest supported, PyPI CUDA 13.0 wheel
#   bash scripts/check_torch_version.sh 2.15.0     # CI: the newest, what `pip install torch` brings
#
# - The venv and the build tree are cached under $LAZYFUSE_VERSIONS_CACHE
#   (default ~/.cache/lazyfuse/versions), so a second run downloads nothing and
#   rebuilds only what changed.
# - No CUDA toolkit is visible to the build or the tests: CUDA wheels of torch
#   must build with a compiler and CMake alone.
# - What it runs: `pip wheel` and an install of that wheel; the API tests; an
#   MLP and a LeNet trained next to eager; every float32 sample of every
#   claimed OpInfo op; and a check that the wheel refuses, in a sentence, to
#   load under the torch this machine's main Python has, if that one differs.
set -euo pipefail
version=${1:?usage: check_torch_version.sh TORCH_VERSION}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${LAZYFUSE_VERSIONS_CACHE:-$HOME/.cache/lazyfuse/versions}
venv=$cache/venv-torch-$version
src=$cache/src-torch-$version
python=${PYTHON:-python3}

# Hide every CUDA toolkit: nothing in the build may need one. A PATH folder
# that holds nvcc next to other tools (/usr/local/bin) is replaced by a copy
# of itself, in links, without the CUDA tools.
cuda_tools='^(nvcc|ptxas|nvlink|fatbinary|cudafe\+\+|bin2c|__nvcc_device_query|cuobjdump|nvdisasm)$'
hidden_path=()
IFS=: read -ra path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  if [[ "$dir" == *cuda* ]]; then
    continue
  elif [ -e "$dir/nvcc" ]; then
    shadow=$cache/path$(tr / _ <<<"$dir")
    rm -rf "$shadow" && mkdir -p "$shadow"
    for tool in "$dir"/*; do
      grep -qE "$cuda_tools" <<<"$(basename "$tool")" || ln -s "$tool" "$shadow/"
    done
    hidden_path+=("$shadow")
  else
    hidden_path+=("$dir")
  fi
done
PATH=$(IFS=:; echo "${hidden_path[*]}")
export PATH
unset CUDA_PATH CUDACXX CUDA_TOOLKIT_ROOT_DIR
# lazyfuse's NVRTC loader would look in $CUDA_HOME (default /usr/local/cuda)
# after the nvidia-* wheels that torch brings; point it nowhere.
export CUDA_HOME=/nonexistent-cuda-toolkit
! command -v nvcc >/dev/null || { echo "nvcc is still on PATH" >&2; exit 1; }

# ---- the venv: torch from PyPI, as a user gets it ----
ready=$venv/.lazyfuse-ready
if [ ! -f "$ready" ] || ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  # The machine's pip constraint caps torch below the newest releases; a
  # version check asks for one release exactly, so the cap does not apply.
  PIP_CONSTRAINT=/dev/null "$venv/bin/python" -m pip install --quiet "torch==$version" numpy \
    pytest pytest-xdist pyyaml expecttest hypothesis setuptools wheel
  touch "$ready"
fi
# A venv made before the tests ran in two processes lacks pytest-xdist.
"$venv/bin/python" -c "import xdist" 2>/dev/null ||
  PIP_CONSTRAINT=/dev/null "$venv/bin/python" -m pip install --quiet pytest-xdist
installed=$("$venv/bin/python" -c "import torch; print(torch.__version__)")
echo "== torch $installed in $venv"

# ---- the source: a copy of this checkout, so that its build tree and
# lazyfuse/_build_info.py never touch the checkout's own ----
# Everything but the build tree is replaced; files keep their times, so the
# cached build recompiles only what changed.
mkdir -p "$src"
find "$src" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
  tar --null -T - -cf -) | tar -xf - -C "$src"
export CCACHE_BASEDIR=$src MAX_JOBS=${MAX_JOBS:-2}
export LAZYFUSE_BUILD_DIR=$src/build/cmake
rm -rf "$src/dist"
echo "== building a wheel against torch $installed"
(cd "$src" && "$venv/bin/python" -m pip wheel --quiet --no-build-isolation --no-deps -w dist .)
wheel=$(ls "$src"/dist/lazyfuse-*.whl)
"$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheel"

# ---- the tests, against the installed wheel, not the source tree ----
# One pytest process per core, as scripts/test.sh runs them.
workers=${LAZYFUSE_TEST_WORKERS:-$(nproc)}
cd "$src/test/python"
"$venv/bin/python" -c "import lazyfuse, torch; assert lazyfuse.__file__.startswith('$venv'), lazyfuse.__file__"
"$venv/bin/python" -m pytest -q -n "$workers" -p no:cacheprovider test_api.py test_models.py test_opinfo.py \
  -k "test_api or lenet or mlp or (test_opinfo and float32 and not emulated)"
# Functionalization's internals, which lazyfuse wraps, move between releases.
"$venv/bin/python" -m pytest -q -n "$workers" -p no:cacheprovider test_resizes.py test_opinfo_variants.py \
  -k "test_resizes or (view and float32) or forward_ad"

# ---- a wheel taken to another torch says so ----
host_torch=$("$python" -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || true)
if [ -n "$host_torch" ] && [ "$host_torch" != "${version}" ]; then
  unpacked=$(mktemp -d)
  trap 'rm -rf "$unpacked"' EXIT
  "$python" -m zipfile -e "$wheel" "$unpacked"
  if message=$(cd / && PYTHONPATH=$unpacked "$python" -c "import lazyfuse" 2>&1); then
    echo "the torch $version wheel imported under torch $host_torch" >&2
    exit 1
  fi
  grep -q "lazyfuse was built for torch $version, but torch $host_torch is installed" <<<"$message" || {
    echo "unclear error for a wheel under another torch:" >&2
    echo "$message" >&2
    exit 1
  }
  echo "== the wheel refuses torch $host_torch: $(tail -n 1 <<<"$message")"
fi
echo "== torch $installed: built and tested"

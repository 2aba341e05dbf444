#!/usr/bin/env bash
# Builds lazyfuse._C here for the lent GPU machine, so a device call can skip
# its 2-minute build (15 device minutes a session). That machine runs Python
# 3.12 with torch 2.11.0+cu130; this one builds against the same torch wheel,
# installed by scripts/check_torch_version.sh 2.11.0, and a Python 3.12's
# headers. CMake is given an interpreter that answers its questions about
# Python as 3.12 and runs torch and torchgen from the 2.11.0 venv: the C++
# side of torch is the same for both Pythons. Seen working in round 4
# (docs/performance.md): the module loaded and ran on an H200.
#
#   bash scripts/build_for_gpu_machine.sh
#
# Then carry python/lazyfuse/_C.cpython-312-x86_64-linux-gnu.so with the call
# and run GPU_CHECK_PREBUILT=1 bash scripts/gpu_check.sh there (or set
# PYTHONPATH=$PWD/python yourself).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=${LAZYFUSE_GPU_TORCH_VENV:-$HOME/.cache/lazyfuse/versions/venv-torch-2.11.0}
if [ ! -x "$venv/bin/python" ]; then
  echo "no torch venv at $venv: run scripts/check_torch_version.sh 2.11.0 first" >&2
  exit 1
fi
has_headers='import os, sys, sysconfig
sys.exit(sys.version_info[:2] != (3, 12) or
         not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
python312=
for candidate in ${LAZYFUSE_PYTHON312:-} "$HOME"/.pyenv/versions/3.12*/bin/python3.12 \
  /usr/bin/python3.12 /usr/local/bin/python3.12; do
  if [ -x "$candidate" ] && "$candidate" -c "$has_headers" 2>/dev/null; then
    python312=$candidate
    break
  fi
done
if [ -z "$python312" ]; then
  echo "no Python 3.12 with its headers found; set LAZYFUSE_PYTHON312" >&2
  exit 1
fi

build=build/gpu-py312
mkdir -p "$build"
wrapper=$PWD/$build/python
cat >"$wrapper" <<EOF
#!/usr/bin/env bash
case "\$*" in
  *torch*|*gen_lazyfuse*) exec "$venv/bin/python" "\$@" ;;
  *) exec "$python312" "\$@" ;;
esac
EOF
chmod +x "$wrapper"
cmake -S . -B "$build" -G Ninja -DPython3_EXECUTABLE="$wrapper" -DCMAKE_BUILD_TYPE=Release \
  -DLAZYFUSE_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "${MAX_JOBS:-$(nproc)}" --target _C
cp "$build"/_C.cpython-312-x86_64-linux-gnu.so python/lazyfuse/
echo "built python/lazyfuse/_C.cpython-312-x86_64-linux-gnu.so for torch" \
  "$("$venv/bin/python" -c 'import torch; print(torch.__version__)') and Python 3.12"

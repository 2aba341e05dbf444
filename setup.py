"""Builds lazyfuse against the torch already installed.

    pip install --no-build-isolation .      # or -e . for development

CMake does the build (see CMakeLists.txt); this file finds torch, drives
CMake, and places lazyfuse._C into the package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SUPPORTED_TORCH = ((2, 11), (2, 15))
DEFAULT_TORCH = "torch==2.13.0"


def ensure_torch() -> str:
    """Returns the installed torch version, installing torch==2.13.0 only if
    no torch is present. A bare `torch` requirement would pull GBs of CUDA
    wheels, so none is ever handed to pip."""
    try:
        import torch
    except ImportError:
        print(f"lazyfuse: no torch found, installing {DEFAULT_TORCH}", flush=True)
        subprocess.check_call([sys.executable, "-m", "pip", "install", DEFAULT_TORCH])
        import torch
    version = torch.__version__.split("+")[0]
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    low, high = SUPPORTED_TORCH
    if not low <= major_minor <= high:
        raise RuntimeError(
            f"lazyfuse supports torch {low[0]}.{low[1]} to {high[0]}.{high[1]}, found {version}"
        )
    return version


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        default_dir = ROOT / "build" / f"cmake-py{sys.version_info[0]}{sys.version_info[1]}"
        build_dir = Path(os.environ.get("LAZYFUSE_BUILD_DIR", default_dir)).resolve()
        build_dir.mkdir(parents=True, exist_ok=True)
        configure = [
            "cmake",
            str(ROOT),
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('LAZYFUSE_BUILD_TYPE', 'Release')}",
            f"-DLAZYFUSE_BUILD_TESTS={os.environ.get('LAZYFUSE_BUILD_TESTS', 'ON')}",
        ]
        if shutil.which("ninja") and not (build_dir / "Makefile").exists():
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure, cwd=build_dir)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", ".", "--parallel", jobs], cwd=build_dir)
        built = next(build_dir.glob("_C*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


torch_version = ensure_torch()
# Read by lazyfuse/__init__.py before it loads _C, so that a wheel taken to
# another torch fails with a sentence, not an undefined symbol. Written into
# the source package so that both wheels and editable installs carry it.
(ROOT / "python" / "lazyfuse" / "_build_info.py").write_text(
    f'"""Written by setup.py: the torch lazyfuse._C was built against."""\n\n'
    f'TORCH_VERSION = "{torch_version}"\n'
)

setup(
    name="lazyfuse",
    version="0.1.0",
    description="A lazy-tensor device for PyTorch, built on Lazy Tensor Core",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[Extension("lazyfuse._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    # Pinned to the torch it was built against: satisfied by what is
    # installed, so pip never fetches another torch.
    install_requires=[f"torch=={torch_version}"],
    # Installing lazyfuse installs its pytest plugin, outside the package so
    # that loading it does not import lazyfuse (see pytest_lazyfuse.py).
    py_modules=["pytest_lazyfuse"],
    entry_points={"pytest11": ["lazyfuse = pytest_lazyfuse"]},
    zip_safe=False,
)

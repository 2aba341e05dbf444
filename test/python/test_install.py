"""Building and importing against the wrong torch fails in a sentence.

The supported range itself is built and tested by scripts/check_torch_version.sh
(CI runs it for the torch 2.11.0 CUDA wheel with no CUDA toolkit visible).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNSUPPORTED = "2.10.0"


def _fake_torch(root: Path, version: str) -> Path:
    """A package named torch that only knows its version: enough for the
    build's version checks, which must run before anything else of torch."""
    package = root / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f"__version__ = '{version}'\n\nclass _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n"
    )
    return root


def _env_with(path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(path)}


def test_import_under_another_torch_names_both_versions() -> None:
    # What a wheel built for one torch does when it lands beside another: the
    # recorded build version is replaced before lazyfuse loads _C.
    code = (
        "import sys, types\n"
        "info = types.ModuleType('lazyfuse._build_info')\n"
        "info.TORCH_VERSION = '2.99.0'\n"
        "sys.modules['lazyfuse._build_info'] = info\n"
        "import lazyfuse\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    import torch

    running = torch.__version__.split("+")[0]
    assert (
        f"ImportError: lazyfuse was built for torch 2.99.0, but torch {running} is installed"
        in result.stderr
    )
    assert "undefined symbol" not in result.stderr


def test_installed_build_records_its_torch() -> None:
    import torch

    from lazyfuse._build_info import TORCH_VERSION

    assert TORCH_VERSION == torch.__version__.split("+")[0]


def test_setup_refuses_torch_outside_the_supported_range(tmp_path: Path) -> None:
    fake = _fake_torch(tmp_path / "site", UNSUPPORTED)
    before = (REPO / "python" / "lazyfuse" / "_build_info.py").read_text()
    result = subprocess.run(
        [sys.executable, str(REPO / "setup.py"), "--name"],
        cwd=REPO,
        env=_env_with(fake),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert f"lazyfuse supports torch 2.11 to 2.15, found {UNSUPPORTED}" in result.stderr
    assert (REPO / "python" / "lazyfuse" / "_build_info.py").read_text() == before


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_refuses_torch_outside_the_supported_range(tmp_path: Path) -> None:
    fake = _fake_torch(tmp_path / "site", UNSUPPORTED)
    result = subprocess.run(
        [
            "cmake",
            "-S",
            str(REPO),
            "-B",
            str(tmp_path / "build"),
            f"-DPython3_EXECUTABLE={sys.executable}",
        ],
        env=_env_with(fake),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert f"lazyfuse supports torch 2.11 to 2.15, but {sys.executable} has torch" in output
    assert UNSUPPORTED in output


def test_cmake_never_asks_for_torch_cmake_package() -> None:
    # find_package(Torch) runs torch's CUDA logic for CUDA wheels and then
    # demands a CUDA toolkit (issue #13).
    files = [REPO / "CMakeLists.txt", *(REPO / "cmake").glob("*.cmake")]
    code = [line.split("#")[0] for path in files for line in path.read_text().splitlines()]
    assert not [line for line in code if "find_package(Torch" in line]

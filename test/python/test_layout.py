"""The source layout: one folder per pipeline stage, each including only the
stages before it (docs/architecture.md), and no hand-written file over the
size a reader can hold in mind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
ARCHITECTURE = CSRC.parent / "docs" / "architecture.md"

# What each stage may include besides itself. `generated` is torchgen's
# output, the ops stage's other half. The backend, its runs' results (pending
# or finished) and init in ltc/ wire every stage together and may include any
# of them.
ALLOWED: dict[str, set[str]] = {
    "ltc": set(),
    "program": {"ltc"},
    "ops": {"ltc", "program", "generated"},
    "fusion": {"program"},
    "kernels": {"program", "fusion"},
    "runtime": {"program", "fusion", "kernels"},
    "python": {"ltc", "program", "ops", "fusion", "kernels", "runtime", "generated"},
}
WIRING = {
    "ltc/backend_impl.h",
    "ltc/backend_impl.cpp",
    "ltc/init.h",
    "ltc/init.cpp",
    "ltc/pending_run.h",
    "ltc/pending_run.cpp",
    "ltc/pending_run_failures.h",
    "ltc/pending_run_failures.cpp",
    "ltc/run_results.h",
    "ltc/run_results.cpp",
}
MAX_LINES = 500
INCLUDE = re.compile(r'^#include "([^"]+)"', re.MULTILINE)


def sources() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*") if p.suffix in {".h", ".cpp"})


def stage_of(path: str) -> str:
    return path.split("/", 1)[0]


def test_every_folder_is_a_known_stage() -> None:
    folders = {p.relative_to(CSRC).parts[0] for p in sources()}
    assert folders == set(ALLOWED), folders ^ set(ALLOWED)


@pytest.mark.parametrize("source", sources(), ids=lambda p: str(p.relative_to(CSRC)))
def test_includes_point_down_the_pipeline(source: Path) -> None:
    relative = source.relative_to(CSRC).as_posix()
    if relative in WIRING:
        return
    own = stage_of(relative)
    for included in INCLUDE.findall(source.read_text()):
        other = stage_of(included)
        assert other == own or other in ALLOWED[own], (
            f"{relative} includes {included}: {own}/ may include only "
            f"{sorted(ALLOWED[own] | {own})}"
        )


@pytest.mark.parametrize("source", sources(), ids=lambda p: str(p.relative_to(CSRC)))
def test_no_file_over_the_limit(source: Path) -> None:
    lines = source.read_text().count("\n")
    assert lines <= MAX_LINES, f"{source.relative_to(CSRC)} has {lines} lines"


def test_no_lazyfuse_prefix_inside_folders() -> None:
    prefixed = [str(p.relative_to(CSRC)) for p in sources() if p.name.startswith("lazyfuse_")]
    assert not prefixed, prefixed


def test_architecture_table_names_every_folder() -> None:
    text = ARCHITECTURE.read_text()
    table = text[text.index("| stage |") : text.index("\n\n", text.index("| stage |"))]
    named = set(re.findall(r"`csrc/([a-z_]+(?:/[a-z_]+)?)/`", table))
    folders = {p.relative_to(CSRC).parent.as_posix() for p in sources() if p.parent != CSRC}
    assert named == folders, f"table names {sorted(named)}, csrc has {sorted(folders)}"

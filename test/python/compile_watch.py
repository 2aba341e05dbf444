"""Watching a fresh process's kernel compiles: a host compiler wrapper that
logs when each compile starts and ends, and takes at least 0.3 s, so
compiles that run side by side overlap for sure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lazyfuse

LOGGING_COMPILER = """#!/bin/sh
case "$*" in *--version*) exec {cxx} "$@";; esac
echo "start" >> {log}
sleep 0.3
{cxx} "$@"
status=$?
echo "end" >> {log}
exit $status
"""


def most_compiles_at_once(
    tmp_path: Path, code: str, threads: int, emulate: bool
) -> tuple[int, int]:
    """(the last number `code` prints, most compiles in flight at once) of a
    fresh process running `code` on the CPU backing device, its kernels
    emulated CUDA or CPU kernels, on up to `threads` compile threads."""
    tag = f"{threads}{'e' if emulate else 'c'}"
    log = tmp_path / f"compiles{tag}.log"
    compiler = tmp_path / "logging-c++"
    cxx = lazyfuse.debug.emulation()["host_compiler"].split(" (")[0]
    compiler.write_text(LOGGING_COMPILER.format(cxx=cxx, log=log))
    compiler.chmod(0o755)
    env = dict(
        os.environ,
        LAZYFUSE_CACHE_DIR=str(tmp_path / f"cache{tag}"),
        LAZYFUSE_EMULATE_CUDA="1" if emulate else "0",
        LAZYFUSE_CPU_KERNELS="1",
        LAZYFUSE_EMULATE_CXX=str(compiler),
        LAZYFUSE_COMPILE_THREADS=str(threads),
        LAZYFUSE_DEVICE="cpu",
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    in_flight = most = 0
    for event in log.read_text().split():
        in_flight += 1 if event == "start" else -1
        most = max(most, in_flight)
    return int(out.stdout.split()[-1]), most

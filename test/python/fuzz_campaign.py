"""A fuzz campaign that survives crashes: fuzz_fusion.py's graphs, checked in
worker processes. A worker that dies (a segfault in generated code, an abort)
or hangs costs one graph, reported as a crash with its reproduction; the
campaign goes on from the next graph.

    python test/python/fuzz_campaign.py --seed 7 --graphs 2000
    python test/python/fuzz_campaign.py --seed 7 --graphs 2000 --workers 2

Prints one line per mismatch or crash, then
"fuzz: N graphs, M mismatches, C crashes"; exits 1 if there was either.
"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FUZZ = Path(__file__).resolve().parent / "fuzz_fusion.py"


def reproduction(seed: int, index: int, target: str) -> str:
    return f"python test/python/fuzz_fusion.py --seed {seed} --index {index} --target {target}"


def _lines(stream: object, out: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        out.put(line.rstrip("\n"))
    out.put(None)


def run_range(seed: int, start: int, count: int, timeout: float, target: str) -> dict[int, str]:
    """Checks graphs start..start+count-1 in worker processes; returns each
    graph's problem ("ok" when none)."""
    results: dict[int, str] = {}
    next_index = start
    while next_index < start + count:
        worker = subprocess.Popen(
            [
                sys.executable,
                str(FUZZ),
                "--seed",
                str(seed),
                "--start",
                str(next_index),
                "--graphs",
                str(start + count - next_index),
                "--target",
                target,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONFAULTHANDLER": "0"},
        )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_lines, args=(worker.stdout, lines), daemon=True).start()
        current = None
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                worker.kill()
                results[current if current is not None else next_index] = (
                    f"crash: no progress in {timeout:.0f} s (hung)"
                )
                break
            if line is None:
                break
            kind, _, rest = line.partition(" ")
            if kind == "begin":
                current = int(rest)
            elif kind == "done":
                index, _, problem = rest.partition(" ")
                results[int(index)] = problem
                current = None
        code = worker.wait()
        if current is not None and current not in results:
            results[current] = f"crash: worker exited with {code}"
        if not results:
            raise RuntimeError(f"the fuzz worker failed before its first graph (exit {code})")
        next_index = max(results) + 1
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graphs", type=int, default=300)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600, help="seconds per graph")
    parser.add_argument(
        "--target",
        choices=["emulated", "cpu", "aten"],
        default="emulated",
        help="on the CPU backing device: emulated CUDA kernels, native CPU kernels, or ATen"
        " steps only",
    )
    options = parser.parse_args()
    chunk = -(-options.graphs // options.workers)
    ranges = [
        (begin, min(chunk, options.start + options.graphs - begin))
        for begin in range(options.start, options.start + options.graphs, chunk)
    ]
    results: dict[int, str] = {}
    with ThreadPoolExecutor(options.workers) as pool:
        for part in pool.map(
            lambda r: run_range(options.seed, r[0], r[1], options.timeout, options.target), ranges
        ):
            results.update(part)
    mismatches = crashes = 0
    for index in sorted(results):
        problem = results[index]
        if problem == "ok":
            continue
        crashes += problem.startswith("crash:")
        mismatches += not problem.startswith("crash:")
        print(f"{reproduction(options.seed, index, options.target)}  # {problem}", flush=True)
    print(f"fuzz: {len(results)} graphs, {mismatches} mismatches, {crashes} crashes")
    return 1 if mismatches or crashes else 0


if __name__ == "__main__":
    sys.exit(main())

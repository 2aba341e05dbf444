"""What a write into a KV cache costs a step, in eager and in lazyfuse, one
mark_step (waited for) per write: `cache[:, :, t] = k` (a view's write) and
`cache.index_copy_(2, pos, k)` (HF's static cache's).

    python bench/view_writes.py [--steps 50] [--out DIR]
    python bench/view_writes.py --smoke   # one small cache: checks the script runs

Functionalization records the writes as select_scatter and index_copy,
which return a new base; a step that copies the whole base makes each token
cost the cache's bytes, where eager's costs the token's. Writes ms per write, and lazyfuse ÷
eager, to view_writes.json and view_writes.md. Timings belong here, never in
tests.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ddp_overhead import write_rows  # noqa: E402

# (batch, heads, positions, head size): a cache of 4 MiB to 64 MiB.
CACHES = [(1, 8, 512, 256), (4, 8, 512, 256), (4, 16, 1024, 256)]


def write_view(cache: torch.Tensor, key: torch.Tensor, t: int) -> None:
    cache[:, :, t % cache.shape[2]] = key * 2


def write_index_copy(cache: torch.Tensor, key: torch.Tensor, t: int) -> None:
    position = torch.tensor([t % cache.shape[2]], device=cache.device)
    cache.index_copy_(2, position, key.unsqueeze(2) * 2)


WRITES = {"view": write_view, "index_copy": write_index_copy}


def ms_per_write(device: torch.device, shape: tuple[int, ...], steps: int, kind: str) -> float:
    import lazyfuse

    lazy = device.type == "lazy"
    cache = torch.zeros(shape, device=device)
    key = torch.randn(shape[0], shape[1], shape[3], device=device)

    def write(t: int) -> None:
        WRITES[kind](cache, key, t)
        if lazy:
            lazyfuse.mark_step(wait=True)

    for t in range(3):
        write(t)
    start = time.perf_counter()
    for t in range(steps):
        write(t)
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    import lazyfuse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true", help="one small cache, 3 writes")
    args = parser.parse_args()
    caches, steps = ([(1, 2, 16, 8)], 3) if args.smoke else (CACHES, args.steps)
    rows = []
    for kind, shape in ((kind, shape) for kind in WRITES for shape in caches):
        eager = ms_per_write(torch.device("cpu"), shape, steps, kind)
        ours = ms_per_write(lazyfuse.lazy_device(), shape, steps, kind)
        rows.append(
            {
                "write": kind,
                "cache": "x".join(map(str, shape)),
                "MiB": round(torch.Size(shape).numel() * 4 / 2**20, 1),
                "eager ms/write": round(eager, 4),
                "lazyfuse ms/write": round(ours, 4),
                "lazyfuse ÷ eager": round(ours / eager, 1),
            }
        )
        print(rows[-1], flush=True)
    report = {
        "steps": steps,
        "in-place scatters": lazyfuse.metrics.counter_value("LazyFuseInPlaceScatters"),
        "eager fallbacks": lazyfuse.metrics.counter_value("aten::index_copy"),
        "rows": rows,
    }
    write_rows(args.out, "view_writes", report)


if __name__ == "__main__":
    main()

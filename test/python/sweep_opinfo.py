"""Runs every op_db entry's samples on the lazy device and reports which pass.

    python test/python/sweep_opinfo.py                 # float32, every entry
    python test/python/sweep_opinfo.py --dtype float16 --only-claimed
    python test/python/sweep_opinfo.py --json out.json

An entry passes when every sample (forward, and backward where the entry
supports autograd) matches eager with no eager fallback. This is how entries
are found to claim in test_opinfo.py; the claims themselves are tested there.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import Counter
from pathlib import Path

import torch
from torch.testing._internal.common_methods_invocations import op_db

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lazyfuse  # noqa: E402
from test_opinfo import CLAIMED, SAMPLE_SKIPS, run_sample  # noqa: E402


def sweep_entry(op: object, dtype: torch.dtype, lazy: torch.device) -> tuple[int, str]:
    """Returns (samples passed, first failure or "")."""
    grad = op.supports_autograd and dtype.is_floating_point  # type: ignore[attr-defined]
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))  # type: ignore[attr-defined]
    skip = SAMPLE_SKIPS.get((op.name, op.variant_test_name))  # type: ignore[attr-defined]
    if skip:
        samples = [sample for sample in samples if not skip[0](sample)]
    for index, sample in enumerate(samples):
        torch.manual_seed(index)
        try:
            run_sample(op, sample, lazy)
        except Exception as error:  # noqa: BLE001 - reported
            lazyfuse.mark_step()
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            return index, f"sample {index}: {type(error).__name__}: {first_line[:160]}"
    return len(samples), ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--only-claimed", action="store_true")
    parser.add_argument("--unclaimed", action="store_true", help="only entries not yet claimed")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    lazy = lazyfuse.lazy_device()
    warnings.simplefilter("ignore")
    results: dict[str, dict[str, object]] = {}
    tally: Counter[str] = Counter()
    for op in op_db:
        key = (op.name, op.variant_test_name)
        if args.only_claimed and key not in CLAIMED:
            continue
        if args.unclaimed and key in CLAIMED:
            continue
        if dtype not in op.supported_dtypes("cpu"):
            tally["dtype unsupported"] += 1
            continue
        passed, failure = sweep_entry(op, dtype, lazy)
        name = f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}"
        results[name] = {"passed": passed, "failure": failure}
        tally["fail" if failure else "pass"] += 1
        print(f"{'FAIL' if failure else 'ok  '} {name}: {failure or passed}", flush=True)
    print(dict(tally))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""lazyfuse's performance harness: every workload under every engine.

    python -m bench                      # everything this machine can run
    python -m bench --quick              # a smoke run: few rounds
    python -m bench --cases tracing,markstep-100 --engines eager-cpu,lazyfuse-cpu

Each engine runs in its own worker process. Workers of one case start
together, warm up, then take turns measuring (the order rotates every round),
so slow drifts of the machine hit every engine alike. First-step cases take
one sample per fresh process. Writes results.json, results.md and one PNG per
workload to --out (default bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.engines import EngineSpec, available_engines, engine_spec
from bench.report import write_reports
from bench.worker import PREFIX
from bench.workloads import CASES, CaseSpec, case_spec

ROOT = Path(__file__).resolve().parent.parent


class Worker:
    """One engine's process for one case."""

    def __init__(self, engine: EngineSpec, case: CaseSpec, log: Path) -> None:
        # The caller's PYTHONPATH too: it may name the lazyfuse to measure.
        path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, **engine.env, "PYTHONPATH": os.pathsep.join(path)}
        self.log = log.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", "--engine", engine.name, "--case", case.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.engine = engine.name
        self.status = self.read()

    def read(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PREFIX):
                return json.loads(line[len(PREFIX) :])
            self.log.write(line)
        return {"error": f"worker exited with code {self.proc.wait()} (see {self.log.name})"}

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return {"error": "worker is gone"}
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask("quit")
            finally:
                self.proc.wait(timeout=60)
        self.log.close()


def summarize(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out = {}
    for metric, values in samples.items():
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
        out[metric] = {"median": statistics.median(ordered), "p90": p90, "n": len(ordered)}
    return out


def record(results: dict, worker: Worker, reply: dict) -> None:
    entry = results.setdefault(worker.engine, {"samples": {}})
    if "samples" in reply:
        for metric, values in reply["samples"].items():
            entry["samples"].setdefault(metric, []).extend(values)
    elif "error" in reply:
        entry["error"] = reply["error"]
    elif "na" in reply:
        entry["na"] = reply["na"]


def run_case(case: CaseSpec, engines: list[EngineSpec], rounds: int, log: Path) -> dict:
    results: dict = {}
    if case.fresh_process:
        for rep in range(rounds):
            for spec in engines[rep % len(engines) :] + engines[: rep % len(engines)]:
                worker = Worker(spec, case, log)
                reply = worker.status if "ready" not in worker.status else worker.ask("measure")
                results.setdefault(spec.name, {"samples": {}})["info"] = worker.status.get("ready")
                record(results, worker, reply)
                worker.close()
        return results
    workers = []
    for spec in engines:
        worker = Worker(spec, case, log)
        results[spec.name] = {"samples": {}, "info": worker.status.get("ready")}
        if "ready" in worker.status:
            reply = worker.ask("warmup")
            if "error" not in reply:
                workers.append(worker)
                continue
            worker.status = reply
        record(results, worker, worker.status)
        worker.close()
    for r in range(rounds):
        for worker in workers[r % max(1, len(workers)) :] + workers[: r % max(1, len(workers))]:
            if "error" in results[worker.engine]:
                continue
            record(results, worker, worker.ask("measure"))
    for worker in workers:
        worker.close()
    return results


def git_revision() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--engines", help="comma-separated engine names (default: all available)")
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds per case")
    parser.add_argument(
        "--first-step-rounds", type=int, default=3, help="fresh processes per engine"
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds, 1 first-step sample")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    options = parser.parse_args()
    if options.quick:
        options.rounds, options.first_step_rounds = 3, 1

    has_cuda = torch.cuda.is_available()
    engines = (
        [engine_spec(n) for n in options.engines.split(",")]
        if options.engines
        else available_engines(has_cuda)
    )
    cases = [case_spec(n) for n in options.cases.split(",")] if options.cases else CASES
    options.out.mkdir(parents=True, exist_ok=True)
    log = options.out / "workers.log"
    log.write_text("")
    meta = {
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "gpu": torch.cuda.get_device_name(0) if has_cuda else None,
        "lazyfuse_revision": git_revision(),
        "engines": {e.name: e.note for e in engines},
    }
    report: dict = {"meta": meta, "cases": []}
    for case in cases:
        start = time.time()
        rounds = options.first_step_rounds if case.fresh_process else options.rounds
        results = run_case(case, engines, rounds, log)
        for entry in results.values():
            entry["summary"] = summarize(entry.pop("samples", {}))
        report["cases"].append({"case": case.__dict__, "results": results})
        print(f"{case.name}: {time.time() - start:.0f} s", flush=True)
    write_reports(report, options.out)
    print(f"wrote {options.out}/results.json, results.md and charts")


if __name__ == "__main__":
    main()

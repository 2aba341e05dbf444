"""One engine running one case, driven by the coordinator over stdin/stdout.

    python -m bench.worker --engine lazyfuse-cpu --case tracing

Replies are single lines starting with PREFIX (libraries may print to
stdout too); commands are `warmup`, `measure` and `quit`.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import traceback

PREFIX = "@@bench "


def reply(payload: dict) -> None:
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


def error_text(error: BaseException) -> str:
    first = str(error).strip().splitlines()
    return f"{type(error).__name__}: {first[0] if first else ''}"[:300]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", required=True)
    parser.add_argument("--case", required=True)
    options = parser.parse_args()
    from bench.engines import Engine, NotApplicable, engine_spec
    from bench.workloads import case_spec, make_case

    try:
        engine = Engine(engine_spec(options.engine))
        case = make_case(case_spec(options.case), engine)
    except NotApplicable as why:
        reply({"na": str(why)})
        return
    except Exception as error:  # reported in the table, the run goes on
        traceback.print_exc()
        reply({"error": error_text(error)})
        return
    reply({"ready": engine.info()})
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            break
        try:
            gc.collect()
            if command == "warmup":
                case.warmup()
                reply({"ok": True})
            elif command == "measure":
                reply({"samples": case.measure()})
            else:
                reply({"error": f"unknown command {command!r}"})
        except Exception as error:
            traceback.print_exc()
            reply({"error": error_text(error)})


if __name__ == "__main__":
    main()

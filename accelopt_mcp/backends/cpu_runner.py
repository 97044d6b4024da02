"""The trusted harness of the cpu backend: `python -m accelopt_mcp.backends.cpu_runner JOB RESULT`.

Our code only. It never imports the candidate: the candidate kernel runs in a jailed process
of its own (cpu_candidate.py inside accelopt_mcp.isolation.jail), and the task's reference is
timed in a second jailed process with the same protocol, so neither ever shares an interpreter
with this one or with the other. Nor does it import the task: a third jail (cpu_task.py, whose
jailed side is cpu_task_harness's `serve_task`) runs the task's module for its inputs and
transforms. This process has the inputs drawn (the fixed seeds, then fresh ones from seeds
nobody can predict), writes them into each jail's input file while that jail is frozen, keeps
the clock around each call (less the calibrated round trip of an empty call), freezes the jail
the moment it says it is done and only then reads its outputs, checks every output against the
reference output for its own input, and writes a plain JSON result. A child that dies before
writing RESULT is judged by the parent from how it died and from the last stage recorded in
`progress.json`.

This module is the entry point only: it reads the job, runs one mode (`describe`, or an
evaluation), and writes the result with its nonce. The work is in modules beside it, one job
each: cpu_session (the measurement session), cpu_candidate_parent (the harness's end of the
jailed-runner protocol), cpu_values (comparing outputs), cpu_task_harness (the task's side, run
in the task's jail) and cpu_stages (progress stages, trimmed tracebacks).

Deliberately NumPy-only at import time (no pydantic): interpreter start-up is part of every
evaluation's overhead.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.cpu_outcomes import StageError, Verdict
from accelopt_mcp.backends.cpu_session import evaluate
from accelopt_mcp.backends.cpu_stages import record_stage, short_traceback


def describe(job: dict[str, Any]) -> dict[str, Any]:
    """Shapes and dtypes of an NKIBench task's inputs and outputs (seed 0), learnt in a jail:
    the task is code from outside (cpu_task.py). What comes back is unchecked JSON; the
    caller (tasks/probe.py) validates it."""
    from accelopt_mcp.backends.cpu_task import JailedHarness

    harness = JailedHarness(job, Path.cwd() / "task_jail")
    try:
        record_stage("describe")
        return harness.describe()
    finally:
        harness.close()


def _finite(value: Any) -> Any:
    """JSON has no inf/NaN: send them as strings the parent turns back into floats."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m accelopt_mcp.backends.cpu_runner JOB.json RESULT.json\n")
        return 2
    runner_pid = os.getpid()
    job_path, result_path = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    job = json.loads(job_path.read_text())
    # The nonce proves to the parent that RESULT was written here, not forged by the kernel
    # (which shares this directory); it leaves the job file before any candidate code runs.
    nonce = job.pop("nonce", None)
    job_path.write_text(json.dumps(job))
    result: dict[str, Any] = {"status": None, "flags": [], "error": None}
    try:
        if job.get("mode") == "describe":
            result["describe"] = describe(job)
        else:
            evaluate(job, result)
        result["status"] = "PASSED"
    except Verdict as verdict:
        result["status"] = verdict.status
        result["message"] = verdict.message
        if verdict.correctness is not None:
            result["correctness"] = verdict.correctness
    except StageError as error:
        result["error"] = {"kind": error.kind, "message": error.message, "traceback": error.tb}
    except BaseException as exc:  # anything else is a bug in a harness hook: report, do not die
        result["error"] = {
            "kind": "runtime",
            "message": f"unexpected failure: {exc!r}",
            "traceback": short_traceback(),
        }
    if os.getpid() != runner_pid:
        # A process the kernel forked ran on into our code: only the runner itself reports.
        os._exit(0)
    result["nonce"] = nonce
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_finite(result)))
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

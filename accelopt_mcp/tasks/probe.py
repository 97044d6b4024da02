"""Learning an NKIBench task's shapes and dtypes by running its get_inputs() and forward() once.

The task module is code from outside (a benchmark suite, a user), so it runs in a sandboxed
child, not here: the cpu evaluator's child in its "describe" mode, started as a separate
process by module name, so the task layer does not import the backends that sit above it.
The jailed-evaluator work is expected to move that child's reference side under tasks/.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from accelopt_mcp.isolation.sandbox import run_sandboxed
from accelopt_mcp.pysource import source_imports_any

# The child that runs a task's reference (and, in "evaluate" mode, a candidate).
RUNNER_MODULE = "accelopt_mcp.backends.cpu_runner"
STDERR_TAIL_CHARS = 4_000


def probe_nkibench_task(
    source: str, *, timeout_s: float = 120, memory_limit_mb: int = 8192
) -> dict[str, Any]:
    """Run an NKIBench task module's get_inputs()/forward() once in the sandbox and return the
    shapes and dtypes: {"inputs": [{"shape", "dtype"}...], "outputs": [...]}."""
    with tempfile.TemporaryDirectory(prefix="accelopt-probe-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        (work / "reference.py").write_text(source)
        job = {
            "mode": "describe",
            "style": "nkibench",
            "reference_path": "reference.py",
            "use_torch": source_imports_any(source, ("torch",)),
        }
        (work / "job.json").write_text(json.dumps(job))
        run = run_sandboxed(
            [
                sys.executable,
                "-I",
                "-m",
                RUNNER_MODULE,
                str(work / "job.json"),
                str(work / "result.json"),
            ],
            timeout_s=timeout_s,
            memory_limit_mb=memory_limit_mb,
            cwd=work,
        )
        result_file = work / "result.json"
        if not result_file.exists():
            raise ValueError(
                f"running the task's get_inputs()/forward() failed: {run.describe()}\n"
                f"{run.stderr[-STDERR_TAIL_CHARS:]}"
            )
        data = json.loads(result_file.read_text())
    if data.get("error"):
        error = data["error"]
        raise ValueError(
            f"the task module does not run: {error['message']}\n{error.get('traceback', '')}"
        )
    describe: dict[str, Any] = data["describe"]
    return describe

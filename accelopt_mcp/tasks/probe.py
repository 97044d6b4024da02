"""Learning an NKIBench task's shapes and dtypes by running its get_inputs() and forward() once.

The task module is code from outside (a benchmark suite, a user), so it never runs here: the
cpu evaluator's child in its "describe" mode (started as a separate process by module name, so
the task layer does not import the backends that sit above it) imports it in a jail of its own
(uid 65534, none of the host's files; accelopt_mcp/backends/cpu_task.py). What the jail reports
is hostile JSON and is checked here (sizes, NaN, long strings) before anyone reads it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import tempfile
import threading
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accelopt_mcp.isolation.sandbox import run_sandboxed
from accelopt_mcp.pysource import source_imports_any

# The child that runs a task's reference (and, in "evaluate" mode, a candidate).
RUNNER_MODULE = "accelopt_mcp.backends.cpu_runner"
STDERR_TAIL_CHARS = 4_000
MAX_TENSORS = 256
MAX_NDIM = 8
# Task modules whose description this process keeps: an MCP server or a suite loads the same
# few tasks again and again, and each probe is a jailed harness plus a jailed task (about 0.4 s
# of CPU and 0.5 s of wall time for a small one). The oldest entry goes first past this many.
CACHE_ENTRIES = 256


class _Described(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shape: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, max_length=MAX_NDIM)
    dtype: str = Field(max_length=64)


class _Roofline(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    matmul_flops: float | None = None
    vector_flops: float | None = None
    flops: float | None = None
    bytes_moved: float | None = None
    compute_unit: str | None = Field(default=None, max_length=64)


class TaskDescription(BaseModel):
    """What the jail says of the task: shapes and dtypes of its inputs and outputs."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[_Described] = Field(max_length=MAX_TENSORS)
    outputs: list[_Described] = Field(max_length=MAX_TENSORS)
    has_transforms: bool = False
    roofline: _Roofline | None = None


class _DescriptionCache:
    """What earlier probes in this process found, by the SHA-256 of the task's source.

    A description depends on the source alone (the same interpreter and NumPy run it each
    time), so a second probe of the same text would learn nothing new. Only successes are
    kept: a probe that failed (a timeout under load, say) runs again next time."""

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._found: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.probes_run = 0
        """Probes that ran a jail (not answered from the cache): what the tests count."""

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._found.get(key)
        # A copy: callers build their task from it and may change what they were given.
        return copy.deepcopy(found) if found is not None else None

    def put(self, key: str, found: dict[str, Any]) -> None:
        with self._lock:
            self._found.pop(key, None)
            self._found[key] = copy.deepcopy(found)
            while len(self._found) > self._entries:
                del self._found[next(iter(self._found))]

    def count_run(self) -> None:
        with self._lock:
            self.probes_run += 1


DESCRIPTIONS = _DescriptionCache(CACHE_ENTRIES)


def probe_nkibench_task(
    source: str, *, timeout_s: float = 120, memory_limit_mb: int = 8192
) -> dict[str, Any]:
    """Run an NKIBench task module's get_inputs()/forward() once in the sandbox and return the
    shapes and dtypes: {"inputs": [{"shape", "dtype"}...], "outputs": [...]}. A source this
    process has probed before is answered from `DESCRIPTIONS` without running it again."""
    key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    known = DESCRIPTIONS.get(key)
    if known is not None:
        return known
    found = _run_probe(source, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb)
    DESCRIPTIONS.put(key, found)
    return found


def _run_probe(source: str, *, timeout_s: float, memory_limit_mb: int) -> dict[str, Any]:
    DESCRIPTIONS.count_run()
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
    try:
        described = TaskDescription.model_validate(data.get("describe"))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the description"
        raise ValueError(
            f"the task module describes itself wrongly ({where}: {first['msg']}); "
            "get_inputs()/forward() must return arrays, roofline() a dict of finite numbers"
        ) from None
    found = described.model_dump()
    if described.roofline is not None:
        # Only the keys roofline() gave: models.Roofline says what is missing.
        found["roofline"] = described.roofline.model_dump(exclude_none=True)
    return found

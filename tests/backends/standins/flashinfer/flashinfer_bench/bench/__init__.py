"""flashinfer_bench.bench of the stand-in: Benchmark runs each solution in a worker process
(it imports the solution's entry file there, as the real workers do before timing it) and
reports an Evaluation with the latency STANDIN_FIB_LATENCY_MS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from flashinfer_bench.data import TraceSet

_WORKER = """
import importlib.util, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("standin_solution", sys.argv[2])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
getattr(module, sys.argv[3])
"""


class BenchmarkConfig:
    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self.definitions: list[str] = fields.get("definitions") or []
        self.solutions: list[str] = fields.get("solutions") or []


class _Evaluation:
    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        return json.loads(json.dumps(self.fields))


class Benchmark:
    def __init__(self, trace_set: TraceSet, config: BenchmarkConfig) -> None:
        self.trace_set, self.config = trace_set, config

    def run_all(self, dump_traces: bool = True, resume: bool = False) -> Any:
        root = self.trace_set.root
        workloads = [
            json.loads(line)
            for path in sorted((root / "workloads").rglob("*.jsonl"))
            for line in path.read_text().splitlines()
            if line.strip()
        ]
        traces: dict[str, list[Any]] = {}
        for path in sorted((root / "solutions").rglob("*.json")):
            solution = json.loads(path.read_text())
            if self.config.solutions and solution["name"] not in self.config.solutions:
                continue
            evaluation = _Evaluation(self._evaluate(solution))
            for workload in workloads:
                trace = SimpleNamespace(
                    solution=solution["name"],
                    workload=SimpleNamespace(uuid=workload["workload"]["uuid"]),
                    evaluation=evaluation,
                )
                traces.setdefault(solution["definition"], []).append(trace)
        return SimpleNamespace(traces=traces)

    def _evaluate(self, solution: dict[str, Any]) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as scratch:
            for source in solution["sources"]:
                target = Path(scratch) / source["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(source["content"])
            entry_file, _, symbol = solution["spec"]["entry_point"].partition("::")
            worker = subprocess.run(
                [sys.executable, "-c", _WORKER, scratch, str(Path(scratch) / entry_file), symbol],
                capture_output=True,
                text=True,
                timeout=120,
            )
        status = os.environ.get("STANDIN_FIB_STATUS", "PASSED")
        if worker.returncode != 0:
            status = "RUNTIME_ERROR"
        latency = float(os.environ.get("STANDIN_FIB_LATENCY_MS", "2.0"))
        passed = status == "PASSED"
        # As in our schema (and flashinfer-bench's): a wrong answer has its error figures.
        checked = passed or status.startswith("INCORRECT")
        error = 0.0 if passed else 1.0
        return {
            "status": status,
            "environment": {"hardware": "NVIDIA_H100", "libs": {"torch": "2.5.0+standin"}},
            "timestamp": datetime.now(UTC).isoformat(),
            "log": worker.stderr[-2000:],
            "correctness": {"max_relative_error": error, "max_absolute_error": error}
            if checked
            else None,
            "performance": {
                "latency_ms": latency,
                "reference_latency_ms": 2 * latency,
                "speedup_factor": 2.0,
            }
            if passed
            else None,
        }

    def close(self) -> None:
        return None

"""Child-process side of the `flashinfer` backend: run flashinfer-bench 0.1.2 on a trace set.

Run as `python -m accelopt_mcp.backends.flashinfer_runner ROOT SETTINGS.json RESULT.json` inside
the sandbox. ROOT is a FlashInfer-Trace directory with one definition, its workload and the
solution to check; the result file holds flashinfer-bench's Evaluation as JSON, or an error.
flashinfer-bench and torch are imported here only, so the server never loads CUDA.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel


class FlashInferSettings(BaseModel):
    definition: str
    solution: str
    workload_uuid: str
    benchmark: dict[str, Any]
    """Keyword arguments of flashinfer_bench.bench.BenchmarkConfig."""


class FlashInferRunResult(BaseModel):
    evaluation: dict[str, Any] | None = None
    error: str | None = None
    """Why flashinfer-bench could not evaluate at all (not installed, no CUDA, no trace)."""


def run(root: Path, settings: FlashInferSettings) -> FlashInferRunResult:
    try:
        import torch
        from flashinfer_bench.bench import Benchmark, BenchmarkConfig
        from flashinfer_bench.data import TraceSet
    except ImportError as exc:
        return FlashInferRunResult(error=f"flashinfer-bench not installed: {exc}")
    if not torch.cuda.is_available():
        return FlashInferRunResult(error="No CUDA devices available")
    config = BenchmarkConfig(
        **settings.benchmark,
        definitions=[settings.definition],
        solutions=[settings.solution],
        log_dir=str(root / "logs"),
    )
    benchmark = Benchmark(TraceSet.from_path(str(root)), config)
    try:
        results = benchmark.run_all(dump_traces=False)
    finally:
        benchmark.close()
    for trace in results.traces.get(settings.definition, []):
        if trace.solution == settings.solution and trace.workload.uuid == settings.workload_uuid:
            return FlashInferRunResult(evaluation=trace.evaluation.model_dump(mode="json"))
    return FlashInferRunResult(
        error=(
            f"flashinfer-bench returned no trace for solution {settings.solution!r} on workload "
            f"{settings.workload_uuid!r} (its log: {_log_tail(root / 'logs')})"
        )
    )


def _log_tail(log_dir: Path, limit: int = 3000) -> str:
    texts = [p.read_text(errors="replace") for p in sorted(log_dir.rglob("*")) if p.is_file()]
    text = "\n".join(texts).strip()
    return (text if len(text) <= limit else "..." + text[-limit:]) or "empty"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m accelopt_mcp.backends.flashinfer_runner ROOT SETTINGS RESULT")
        return 2
    root, settings_file, result_file = Path(argv[0]), Path(argv[1]), Path(argv[2])
    settings = FlashInferSettings.model_validate_json(settings_file.read_text(encoding="utf-8"))
    try:
        result = run(root, settings)
    except Exception:
        result = FlashInferRunResult(error=f"flashinfer-bench failed:\n{traceback.format_exc()}")
    result_file.write_text(json.dumps(result.model_dump(mode="json")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Child-process side of the `flashinfer` backend: run flashinfer-bench 0.1.2 on a trace set.

Run as `python -m accelopt_mcp.backends.flashinfer_runner ROOT SETTINGS.json RESULT.json` inside
the sandbox. ROOT is a FlashInfer-Trace directory with one definition, its workload and the
solution to check; the result file holds flashinfer-bench's Evaluation as JSON, or an error.
flashinfer-bench and torch are imported here only, so the server never loads CUDA.

An invocation does one of two things, never both: evaluate (flashinfer-bench runs the solution
in worker processes of its own; this process never imports it), or, with `breakdown` set, take
the breakdown of one call, which loads the solution into this very process. A solution loaded
here can rewrite anything this process writes, so the backend runs the breakdown as a second
invocation, after it has read and checked the first one's result, and reads nothing of the
second's but the (validated) breakdown.
"""

from __future__ import annotations

import importlib.util
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
    breakdown: bool = False
    """Only take the breakdown (no flashinfer-bench run): time one call of the solution under
    torch.profiler and report its device kernels (`FlashInferRunResult.breakdown`). Asked by
    the backend in an invocation of its own, after another one's evaluation passed."""


class FlashInferRunResult(BaseModel):
    evaluation: dict[str, Any] | None = None
    error: str | None = None
    """Why flashinfer-bench could not evaluate at all (not installed, no CUDA, no trace)."""
    breakdown: list[dict[str, Any]] = []
    """Per device kernel of one call ({"what", "ms", "share", "calls"}, largest first), from a
    breakdown invocation; written by a process the solution ran in, so the backend reads it as
    hostile data (backends.breakdown.breakdown_from) and nothing else of that result."""
    breakdown_error: str | None = None
    """Why there is no breakdown although one was asked for."""


def run(root: Path, settings: FlashInferSettings) -> FlashInferRunResult:
    try:
        import torch
    except ImportError as exc:
        return FlashInferRunResult(error=f"flashinfer-bench not installed: {exc}")
    if not torch.cuda.is_available():
        return FlashInferRunResult(error="No CUDA devices available")
    if settings.breakdown:
        try:
            return FlashInferRunResult(breakdown=device_breakdown(root, settings, torch))
        except Exception as exc:  # no breakdown is never a failed evaluation
            return FlashInferRunResult(breakdown_error=f"{type(exc).__name__}: {exc}"[:300])
    try:
        from flashinfer_bench.bench import Benchmark, BenchmarkConfig
        from flashinfer_bench.data import TraceSet
    except ImportError as exc:
        return FlashInferRunResult(error=f"flashinfer-bench not installed: {exc}")
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


MAX_KERNELS = 12
"""Device kernels a breakdown keeps, the longest first."""


def kernel_rows(averages: Any) -> list[dict[str, Any]]:
    """(name, device time in us, count) of each device kernel in torch.profiler's
    `key_averages()`: its own device time (`self_device_time_total`, `self_cuda_time_total`
    before torch 2.4), rows with none left out."""
    rows = []
    for event in averages:
        micros = getattr(event, "self_device_time_total", None)
        if micros is None:
            micros = getattr(event, "self_cuda_time_total", 0.0)
        if not micros or micros <= 0:
            continue
        rows.append({"name": str(event.key), "device_us": float(micros), "count": int(event.count)})
    return rows


def shape_kernel_breakdown(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries {"what", "ms", "share", "calls"} from kernel_rows: each kernel's device time
    over one call (all its launches), its share of the device time of the call, longest
    first, at most MAX_KERNELS; names trimmed (templated CUDA names run to hundreds of
    characters)."""
    total = sum(row["device_us"] for row in rows)
    if total <= 0:
        return []
    ordered = sorted(rows, key=lambda row: -row["device_us"])[:MAX_KERNELS]
    return [
        {
            "what": row["name"] if len(row["name"]) <= 120 else row["name"][:117] + "...",
            "ms": row["device_us"] / 1e3,
            "share": row["device_us"] / total,
            "calls": row["count"],
        }
        for row in ordered
    ]


def device_breakdown(root: Path, settings: FlashInferSettings, torch: Any) -> list[dict[str, Any]]:
    """One call of the solution (a Python or Triton entry point) on the workload's inputs
    (seed 0, on the GPU), after one warm-up call, under torch.profiler with CUDA activity: its
    device kernels (shape_kernel_breakdown). A CUDA-source solution has none here (it is built
    by flashinfer-bench alone)."""
    from torch.profiler import ProfilerActivity, profile

    from accelopt_mcp.models import Definition, Solution, Trace
    from accelopt_mcp.tasks.inputs import generate_inputs, input_plan

    definition = Definition.model_validate_json(
        next((root / "definitions").rglob("*.json")).read_text(encoding="utf-8")
    )
    solution = next(
        solved
        for path in (root / "solutions").rglob("*.json")
        if (solved := Solution.model_validate_json(path.read_text(encoding="utf-8"))).name
        == settings.solution
    )
    workload = next(
        trace.workload
        for path in (root / "workloads").rglob("*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
        and (trace := Trace.model_validate_json(line)).workload.uuid == settings.workload_uuid
    )
    if solution.spec.language.value not in ("python", "triton"):
        raise ValueError(f"no breakdown for {solution.spec.language.value} solutions")
    source_dir = root / "breakdown_sources"
    for source in solution.sources:
        target = source_dir / source.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.content, encoding="utf-8")
    entry_file, _, symbol = solution.spec.entry_point.partition("::")
    sys.path.insert(0, str(source_dir))
    spec = importlib.util.spec_from_file_location(
        "accelopt_breakdown_entry", source_dir / entry_file
    )
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {entry_file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, symbol)
    device = torch.device("cuda")
    inputs = generate_inputs(input_plan(definition, workload), 0, as_torch=True)
    args = [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]
    if solution.spec.destination_passing_style:
        for out in definition.outputs.values():
            shape = definition.shape_of(out, workload.axes) or ()
            dtype = getattr(torch, out.dtype.value)
            args.append(torch.empty(tuple(shape), dtype=dtype, device=device))
    function(*args)  # warm-up: compilation and autotuning stay out of the profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as traced:
        function(*args)
        torch.cuda.synchronize()
    return shape_kernel_breakdown(kernel_rows(traced.key_averages()))


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

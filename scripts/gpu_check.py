"""One-command check of the real `flashinfer` path on an NVIDIA GPU (H100/H200).

    python scripts/gpu_check.py [--device cuda:0] [--quick]

Runs every solution in examples/flashinfer (a python baseline and a Triton kernel for RMSNorm)
on every workload through FlashInferBackend -- flashinfer-bench 0.1.2 in a sandboxed child -- and
prints status, latency, reference latency, speedup, percent of the GPU's peak bandwidth and the
hardware string; then one evaluation with a time breakdown (BenchmarkConfig.breakdown: one
call of the solution under torch.profiler after flashinfer-bench is done), whose device kernels
it prints and checks. It installs nothing: if torch, triton or flashinfer-bench is missing it prints
what to pip install and exits with status 2. Takes a few minutes at most (--quick: fewer runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accelopt_mcp.backends.flashinfer import FlashInferBackend  # noqa: E402
from accelopt_mcp.models import BenchmarkConfig, Definition, Roofline, Solution, Task, Trace  # noqa: E402

EXAMPLE = ROOT / "examples" / "flashinfer"
REQUIREMENTS = {"torch": "torch", "triton": "triton", "flashinfer_bench": "flashinfer-bench==0.1.2"}


def missing_packages() -> list[str]:
    return [pip for module, pip in REQUIREMENTS.items() if importlib.util.find_spec(module) is None]


def rmsnorm_roofline(definition: Definition, batch: int) -> Roofline:
    hidden = definition.const_axes["hidden_size"]
    # Read x and weight, write y (float32); about 4 FLOPs per element.
    return Roofline(flops=4.0 * batch * hidden, bytes_moved=4.0 * (2 * batch * hidden + hidden))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--quick", action="store_true", help="3 warm-up runs, 10 iterations")
    args = parser.parse_args()

    missing = missing_packages()
    if missing:
        print("missing packages; on this GPU host run:")
        print(f"  pip install {' '.join(missing)}")
        print("  (or: pip install -e '.[flashinfer]' from the repository root)")
        return 2

    # The child imports accelopt_mcp from this checkout even when it is not pip-installed.
    backend = FlashInferBackend(args.device, extra_env={"PYTHONPATH": str(ROOT)})
    availability = backend.availability()
    print(f"backend: {availability.reason}")
    if not availability.usable:
        return 2

    definition_file = next((EXAMPLE / "definitions").rglob("*.json"))
    definition = Definition.model_validate_json(definition_file.read_text())
    workloads = [
        Trace.model_validate_json(line).workload
        for path in sorted((EXAMPLE / "workloads").rglob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    solutions = [
        Solution.model_validate_json(p.read_text())
        for p in sorted((EXAMPLE / "solutions").rglob("*.json"))
    ]
    config = BenchmarkConfig(warmup_runs=3, iterations=10) if args.quick else BenchmarkConfig()

    started = time.perf_counter()
    header = f"{'solution':<28} {'workload':<22} {'status':<20} {'ms':>9} {'ref ms':>9} "
    print(header + f"{'speedup':>8} {'%peak BW':>9}  hardware")
    failures = 0
    for workload in workloads:
        batch = workload.axes["batch_size"]
        task = Task(
            definition=definition, workload=workload, roofline=rmsnorm_roofline(definition, batch)
        )
        for solution in solutions:
            evaluation = backend.evaluate(task, solution, config)
            perf = evaluation.performance
            bandwidth = evaluation.hardware_counters.get("peak_memory_fraction")
            row = (
                f"{solution.name:<28} {workload.uuid:<22} {evaluation.status.value:<20} "
                f"{perf.latency_ms if perf else float('nan'):>9.4f} "
                f"{perf.reference_latency_ms if perf else float('nan'):>9.4f} "
                f"{perf.speedup_factor if perf else float('nan'):>7.2f}x "
                f"{100 * bandwidth if bandwidth is not None else float('nan'):>8.1f}%  "
                f"{evaluation.environment.hardware}"
            )
            print(row, flush=True)
            if not evaluation.passed:
                failures += 1
                print("  log: " + evaluation.log.strip()[-1500:].replace("\n", "\n       "))
            if evaluation.flags:
                print(f"  flags: {', '.join(evaluation.flags)}")
    failures += check_breakdown(backend, definition, workloads[0], solutions, config)
    print(f"done in {time.perf_counter() - started:.1f} s; {failures} evaluation(s) not PASSED")
    return 1 if failures else 0


def check_breakdown(
    backend: FlashInferBackend,
    definition: Definition,
    workload: object,
    solutions: list[Solution],
    config: BenchmarkConfig,
) -> int:
    """One evaluation per solution with breakdown=True: it must pass and name at least one
    device kernel with a positive time and shares that are fractions. 0 when all did, else the
    number that did not."""
    task = Task(definition=definition, workload=workload)  # type: ignore[arg-type]
    traced = config.model_copy(update={"breakdown": True})
    bad = 0
    for solution in solutions:
        evaluation = backend.evaluate(task, solution, traced)
        entries = evaluation.breakdown
        print(f"breakdown of {solution.name} ({evaluation.status.value}):")
        for entry in entries:
            print(f"  {entry.ms:9.4f} ms {entry.share:5.1%} x{entry.calls:<4} {entry.what}")
        good = (
            evaluation.passed
            and bool(entries)
            and all(e.ms > 0 and 0 <= e.share <= 1 for e in entries)
            and sum(e.share for e in entries) <= 1.0 + 1e-6
        )
        if not good:
            bad += 1
            print("  BREAKDOWN CHECK FAILED; log tail: " + evaluation.log.strip()[-800:])
    return bad


if __name__ == "__main__":
    sys.exit(main())

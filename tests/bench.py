"""Short benchmark settings for tests, which time kernels for what they decide, not for
figures worth keeping."""

from __future__ import annotations

from typing import Any

from accelopt_mcp.models import BenchmarkConfig


def quick_bench(
    *, iterations: int = 3, processes: int | tuple[int, int] = 1, **fields: Any
) -> BenchmarkConfig:
    """One warm-up run, `iterations` timed runs, in `processes` fresh processes (a number, or
    the (min, max) range); the other settings as given, else BenchmarkConfig's defaults."""
    low, high = (processes, processes) if isinstance(processes, int) else processes
    return BenchmarkConfig(
        warmup_runs=1, iterations=iterations, min_processes=low, max_processes=high, **fields
    )


def quick_bench_fields(**settings: Any) -> dict[str, Any]:
    """quick_bench(**settings) as a tool's or a preset's `benchmark` argument: the fields it
    sets, the rest left to the receiver's defaults."""
    return quick_bench(**settings).model_dump(mode="json", exclude_unset=True)

"""BenchmarkConfig: how a candidate is checked and timed (seeds, tolerances, repetitions)."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator


class BenchmarkConfig(BaseModel):
    """How a candidate is checked and timed."""

    seeds: list[int] = Field(default_factory=lambda: [0, 21, 42, 63, 84], min_length=1)
    """Correctness is checked on inputs drawn with each seed."""
    rtol: float = Field(default=2e-5, gt=0)
    """L2-relative tolerance: ||out - ref|| / ||ref|| must not exceed it."""
    atol: float = Field(default=1e-6, ge=0)
    """Absolute floor, for outputs whose reference norm is ~0."""
    nonfinite: Literal["match", "ignore"] = "match"
    """Where the reference output is NaN or +/-inf (masked scores, log-probabilities):
    "match" requires the output to be NaN, or the same infinity with the same sign, at each
    such position (else INCORRECT_NUMERICAL); "ignore" leaves those positions out of the
    comparison, for a task whose masked positions are don't-care. Either way an output that is
    NaN/inf where the reference is finite fails."""
    warmup_runs: int = Field(default=2, ge=0)
    """Untimed calls per process before its samples count."""
    iterations: int = Field(default=10, ge=1)
    """Timed samples per round (nki, flashinfer); rounds per set of fresh processes (cpu)."""
    max_relative_spread: float = Field(default=0.05, gt=0)
    """nki, flashinfer: re-measure while (max - min) / min of a round exceeds this."""
    max_measurement_rounds: int = Field(default=3, ge=1)
    """nki, flashinfer: at most this many rounds."""
    target_ci: float = Field(default=0.01, gt=0, lt=1)
    """cpu: sampling stops once every speedup the caller reads (the kernel's over the reference
    and each baseline; in a comparison, every pair) has a confidence interval within this
    fraction of it (half-width), or answers `decide_at`, or `max_timing_seconds` is spent. The
    median latencies' intervals are reported as they came out."""
    decide_at: list[float] = Field(default_factory=lambda: [1.0])
    """cpu: the speedups the caller decides on. Sampling also stops once every speedup interval
    lies wholly above or below each of them: with the default [1.0], once it is clear whether
    the kernel is faster or slower; a run passes its selection thresholds (say [0.87, 1.04]).
    A kernel whose interval keeps straddling one is sampled to `target_ci` or the cap. [] asks
    for `target_ci` alone."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """Level of every confidence interval."""
    min_processes: int = Field(default=3, ge=1)
    """cpu: at least this many sets of fresh processes (the kernel's and every baseline's,
    the reference's included) take samples: variance between processes (memory layout,
    alignment, core) does not shrink with more samples in one."""
    max_processes: int = Field(default=8, ge=1)
    """cpu: at most this many sets of fresh processes."""
    max_timing_seconds: float = Field(default=20.0, gt=0)
    """cpu: a cap on the time spent sampling, per evaluation; reaching it leaves a wider
    interval (flag `noisy_timing`), never a failure."""
    timeout_seconds: float = Field(default=60.0, gt=0)
    """The longest any one call of a kernel (or of the reference) may take, checking and
    timing alike; a call past it ends the evaluation as TIMEOUT (CLI `--timeout`, MCP
    `timeout_seconds`). A kernel that takes seconds per call needs more than the default."""
    memory_limit_mb: int = Field(default=4096, ge=64)
    """Address-space cap of each jailed process, MB; a kernel past it fails as RUNTIME_ERROR
    (out of memory)."""
    breakdown: bool = False
    """Also say where one call of a passing kernel spends its time (`Evaluation.breakdown`),
    taken after the timed rounds (cpu: one more call under a line tracer, per source line;
    nki: the profiler's engine times; flashinfer: per device kernel). Never changes the
    verdict or the figures; costs about one traced call (cpu)."""

    # Settings that change what a latency figure means. Timeouts and memory caps do not.
    PERF_FIELDS: ClassVar[tuple[str, ...]] = (
        "seeds",
        "rtol",
        "atol",
        "warmup_runs",
        "iterations",
        "max_relative_spread",
        "max_measurement_rounds",
        "target_ci",
        "decide_at",
        "confidence",
        "min_processes",
        "max_processes",
        "max_timing_seconds",
    )

    @model_validator(mode="after")
    def _check_processes(self) -> BenchmarkConfig:
        bad = [t for t in self.decide_at if not (math.isfinite(t) and t > 0)]
        if bad:
            raise ValueError(
                f"decide_at holds {bad}: every speedup to decide on must be a positive number, "
                "like 1.0 or 1.04"
            )
        if self.max_processes < self.min_processes:
            raise ValueError(
                f"max_processes ({self.max_processes}) is below min_processes "
                f"({self.min_processes}): raise max_processes or lower min_processes"
            )
        return self

    def perf_fields(self) -> dict[str, Any]:
        fields = {name: getattr(self, name) for name in self.PERF_FIELDS}
        # What counts as correct, like rtol: part of the key, but only when it is not the
        # default, so every profile and config hash stored before it existed stays valid.
        if self.nonfinite != "match":
            fields["nonfinite"] = self.nonfinite
        return fields

    def profile_key(
        self, *, workers: int = 1, cores: int | None = 1, stress: str | None = None
    ) -> dict[str, Any]:
        """What a stored profile is filed (and found) under: the perf fields, plus how the
        evaluation ran where that is not one evaluation alone on one core: `workers`
        evaluations at once on the host, `cores` per evaluation (None: every core). Both
        change what a latency means; a profile taken under other conditions is not reused,
        and measurements are pooled only with their like. `stress`: the task's stress sets
        (tasks.inputs.stress_signature), which change what PASSED means: a profile checked
        without them is neither reused nor pooled once the task declares some (a task with
        none keeps the key, and every profile stored before, as it was)."""
        key = self.perf_fields()
        if workers != 1:
            key["workers"] = workers
        if cores != 1:
            key["cores"] = cores
        if stress is not None:
            key["stress"] = stress
        return key

"""Evaluation: how one solution fared on one workload (status, correctness, latency).

Flags, and which of them make a result untrusted (one definition, read by the engine, the
stores and every listing of "best"):

A flag is a warning a backend attaches to an evaluation (`Evaluation.flags`). Most say "do not
believe this number": the kernel passed the checks, but the way it passed (or the latency it
reached) points at a cheat or a broken measurement. A few are only informational. The rule:

- an evaluation is *trusted* when every flag it carries is in `INFORMATIONAL_FLAGS`;
- any other flag makes it untrusted: the ones in `UNTRUSTED_FLAGS`, and any flag this code
  does not know (a newer backend's). Unknown means untrusted, so that a new warning can never
  silently crown a kernel; a new informational flag is added to `INFORMATIONAL_FLAGS` here.

An untrusted PASSED evaluation is stored and shown (with its flags), but it never enters the
beam, never forms an experience pair, never becomes a run's best, and is left out of
`best_solutions` / `ranked_solutions` unless `include_flagged=True`.

The SQL stores rank with a `profiles.trusted` column generated from the stored JSON with the
same informational list (schema_v2.txt, store/sqlite_schema.sql); a test keeps the lists equal,
and changing `INFORMATIONAL_FLAGS` means changing that column too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from accelopt_mcp.models.base import NonEmptyString, Record
from accelopt_mcp.redaction import redact

UNTRUSTED_FLAGS: frozenset[str] = frozenset(
    {
        "above_peak",
        "constant_output",
        "forged_result",
        "input_independent_output",
        "timed_output_mismatch",
    }
)
"""Flags known to mean "the result cannot be believed" (any flag not informational is treated
the same way; these are the ones the backends raise today):

- `above_peak`: the latency implies more FLOP/s or bytes/s than the hardware's peak for the
  task's declared roofline: the kernel skips work (or caches), or the roofline is wrong;
- `constant_output`: the kernel returned the same output for different inputs while the
  reference's changed (a cached or constant answer);
- `input_independent_output`: the output does not depend on the inputs it was given (the cpu
  backend's probe with fresh inputs);
- `timed_output_mismatch`: correct in the correctness pass, wrong while being timed (it
  behaves differently when it is measured);
- `forged_result`: the result file was not written by the profiler (the kernel wrote it).

Flags seen only on failed evaluations (`backend_error`, `task_error`, `profiler_error`,
`latency_unavailable`) are not informational either; a failed evaluation never ranks anyway.
"""

INFORMATIONAL_FLAGS: frozenset[str] = frozenset(
    {"no_reference_latency", "noisy_timing", "not_isolated", "unstable_latency"}
)
"""Flags that leave a result trusted:

- `noisy_timing` (cpu) / `unstable_latency` (nki): the spread of the measurements stayed above
  the configured limit after every round; the steadiest round was kept;
- `no_reference_latency` (nki): no reference latency on the device, so no speedup against it;
- `not_isolated`: the evaluation ran without a jail (no sandbox on this host).
"""


def untrusted_flags(flags: Iterable[str]) -> list[str]:
    """The flags (in order, once each) that make an evaluation untrusted: every flag that is
    not in INFORMATIONAL_FLAGS, known (UNTRUSTED_FLAGS) or not."""
    return [flag for flag in dict.fromkeys(flags) if flag not in INFORMATIONAL_FLAGS]


def flags_trusted(flags: Iterable[str]) -> bool:
    """True when no flag makes the result untrusted (see the module's docstring)."""
    return not untrusted_flags(flags)


class EvaluationStatus(StrEnum):
    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"


class Correctness(Record):
    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")

    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: dict[str, Any] | None = None

    @field_validator("max_relative_error", "max_absolute_error")
    @classmethod
    def _non_negative_or_nan(cls, value: float) -> float:
        if not math.isnan(value) and value < 0:
            raise ValueError("an error measure must be non-negative (or NaN)")
        return value


class Performance(Record):
    latency_ms: float = Field(default=0.0, ge=0.0)
    """The solution's median latency."""
    reference_latency_ms: float = Field(default=0.0, ge=0.0)
    """The reference's median latency, measured in the same interleaved rounds (cpu)."""
    speedup_factor: float = Field(default=0.0, ge=0.0)
    """reference latency / solution latency (a ratio of medians)."""
    speedup_ci_low: float | None = None
    """Lower end of the speedup's confidence interval (None: the backend gives none)."""
    speedup_ci_high: float | None = None
    """Upper end of the speedup's confidence interval."""


Verdict = Literal["faster", "slower", "indistinguishable"]


class Comparison(Record):
    """The solution against one baseline timed in the same interleaved rounds (its parent, the
    initial kernel, another candidate): how many times faster, with its interval."""

    model_config = ConfigDict(
        extra="ignore", use_attribute_docstrings=True, ser_json_inf_nan="strings"
    )

    baseline: NonEmptyString
    """What it was compared with, as the caller named it (e.g. 'parent', a solution id)."""
    baseline_id: str | None = None
    """The stored solution that baseline was, where the caller knew it (a run's and
    profile_kernel's 'parent'; `Evaluation.with_baseline_id`). None for rows stored before it
    was kept and for baselines that are no stored kernel: a label alone does not say which
    kernel a 'parent' was."""
    baseline_latency_ms: float = Field(ge=0.0)
    """The baseline's median latency in these rounds."""
    speedup: float = Field(ge=0.0)
    """baseline median / solution median."""
    ci_low: float = Field(ge=0.0)
    ci_high: float
    """Infinity when there is no upper bound (too few samples for an interval); written to
    JSON as the string "Infinity"."""
    verdict: Verdict
    """'faster' / 'slower' when the whole interval is above / below 1, else
    'indistinguishable'."""


class Environment(Record):
    hardware: NonEmptyString
    """Where it ran, e.g. 'cpu/x86_64'."""
    libs: dict[str, str] = Field(default_factory=dict)


class LatencyStats(Record):
    """Ours: the samples behind `Performance.latency_ms`, in milliseconds."""

    mean_ms: float
    median_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float = 0.0
    relative_spread: float
    """A robust spread: interquartile range / median (cpu; the nki backend's is
    (max - min) / min over its runs). Older records hold (max - min) / min."""
    runs: int
    """Samples kept (pooled over every process and round)."""
    measurement_rounds: int = 1
    """Process blocks (cpu: sets of fresh processes) the samples came from."""
    ci_low_ms: float | None = None
    """Lower end of the median's confidence interval (None: the backend gives none)."""
    ci_high_ms: float | None = None
    """Upper end of the median's confidence interval."""
    confidence: float = 0.95
    """The level of every interval in this evaluation."""
    q1_ms: float | None = None
    """First quartile of the samples."""
    q3_ms: float | None = None
    """Third quartile of the samples."""
    contended_samples: int = 0
    """Samples in which more than 5 % of the kernel's timed window went to other programs
    (cpu: that time is taken out of every contestant's samples alike; none is thrown away).
    Records from before 2026-12-02 count samples that were re-taken instead."""
    contended: bool = False
    """The host was busy: other programs took a noticeable share of the timed windows, or
    steal time. The figures have that time taken out, but the caches were shared: read it
    with care."""
    measurements: int = 1
    """How many measurements (separate evaluations) this figure pools (stored profiles)."""

    @property
    def ci_half_width(self) -> float | None:
        """Half the median's interval as a fraction of the median; None without one."""
        if self.ci_low_ms is None or self.ci_high_ms is None or self.median_ms <= 0:
            return None
        return (self.ci_high_ms - self.ci_low_ms) / 2 / self.median_ms


class BreakdownEntry(Record):
    """One part of a single call of a kernel and the time it took: where the time goes, for
    whoever decides what to rewrite next. Taken outside the timed rounds (its own overhead never
    reaches a latency), so its times are indicative: they need not add up to the latency."""

    what: NonEmptyString
    """The part: a NumPy operation (`np.matmul`), a source line (`L12: y = np.exp(x - m)`), a
    device kernel's name, or an engine's busy time, as the backend names it."""
    ms: float = Field(ge=0.0)
    """Time spent in this part during one call, in milliseconds (all of its calls together)."""
    share: float = Field(default=0.0, ge=0.0, le=1.0)
    """Fraction of the call's measured time spent here (0 when the backend cannot say)."""
    calls: int = Field(default=1, ge=0, le=10**12)
    """How many times the part ran during the call (0 when the backend cannot say). Bounded:
    no traced call runs a line 10^12 times, and a forged count must not reach a text."""


class Evaluation(Record):
    status: EvaluationStatus
    environment: Environment
    timestamp: NonEmptyString
    # Redacted (`redacted()`) where it is stored or returned: the stores' upsert_profile,
    # profile_kernel, the engine's profile cache. Not in a validator: masking a 16 KB log takes
    # milliseconds, too much for every stored profile read back.
    log: str = ""
    """What the backend reported (the kernel's output included), secrets masked."""
    correctness: Correctness | None = None
    performance: Performance | None = None
    latency_stats: LatencyStats | None = None
    """The spread of the measurements (not in flashinfer-bench)."""
    hardware_counters: dict[str, float] = Field(default_factory=dict)
    """What the planner sees besides latency (not in flashinfer-bench)."""
    measurement: dict[str, float] = Field(default_factory=dict)
    """How the figures were taken (calls timed, time inside them, the profiler's round trip,
    contention): for benchmarks and audits, never shown to the LLM."""
    comparisons: list[Comparison] = Field(default_factory=list)
    """Baselines timed in the same interleaved rounds as this solution (its parent in a run),
    each with a speedup interval and a verdict."""
    breakdown: list[BreakdownEntry] = Field(default_factory=list)
    """Where one call of the kernel spends its time, largest first (cpu: per NumPy operation
    or source line; nki: the profiler's summary; flashinfer: per device kernel). Empty when it
    was not asked for or the backend offers none. Taken outside the timed rounds."""
    flags: list[str] = Field(default_factory=list)
    """Warnings a result carries, e.g. 'above_peak' (not in flashinfer-bench); any flag outside
    INFORMATIONAL_FLAGS makes it untrusted (`trusted`)."""

    @model_validator(mode="after")
    def _check_status(self) -> Evaluation:
        # Same rule as flashinfer-bench, so our files load there.
        has_c, has_p = self.correctness is not None, self.performance is not None
        if self.status == EvaluationStatus.PASSED and not (has_c and has_p):
            raise ValueError("a PASSED evaluation needs both correctness and performance")
        if self.status == EvaluationStatus.INCORRECT_NUMERICAL and (not has_c or has_p):
            raise ValueError("an INCORRECT_NUMERICAL evaluation has correctness, no performance")
        if self.status not in (EvaluationStatus.PASSED, EvaluationStatus.INCORRECT_NUMERICAL) and (
            has_c or has_p
        ):
            raise ValueError(f"a {self.status.value} evaluation has no correctness or performance")
        return self

    @property
    def passed(self) -> bool:
        return self.status == EvaluationStatus.PASSED

    @property
    def trusted(self) -> bool:
        """False when a flag says its numbers cannot be believed (`untrusted_flags`). Says
        nothing about the status: a failed evaluation with no flags is trusted (and failed)."""
        return flags_trusted(self.flags)

    @property
    def untrusted_flags(self) -> list[str]:
        """The flags that make it untrusted; empty when it is trusted."""
        return untrusted_flags(self.flags)

    def with_baseline_id(self, label: str, solution_id: str | None) -> Evaluation:
        """This evaluation with `solution_id` recorded as the stored kernel its comparison
        labelled `label` was timed against (Comparison.baseline_id); itself when it has no such
        comparison or no id is given. For the caller that chose the baseline: a backend knows
        only the label."""
        if solution_id is None or not any(c.baseline == label for c in self.comparisons):
            return self
        comparisons = [
            c.model_copy(update={"baseline_id": solution_id}) if c.baseline == label else c
            for c in self.comparisons
        ]
        return self.model_copy(update={"comparisons": comparisons})

    def redacted(self, secrets: Iterable[str | None] = ()) -> Evaluation:
        """This evaluation with secrets masked in its log (accelopt_mcp.redaction.redact: URL
        passwords, key=value secrets, tokens, secret environment values, `secrets`); itself
        when there is nothing to mask."""
        if not self.log:
            return self
        log = redact(self.log, secrets)
        return self if log == self.log else self.model_copy(update={"log": log})

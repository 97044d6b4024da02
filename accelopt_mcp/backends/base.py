"""The profiling contract: a task and a candidate kernel in, an Evaluation out.

Backends know nothing of the engine, the store or MCP. Every backend runs the candidate (which is
untrusted, LLM-written code) outside the calling process.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from accelopt_mcp.models import (
    BenchmarkConfig,
    ComparedKernel,
    Evaluation,
    KernelComparison,
    PairVerdict,
    Solution,
    Task,
)
from accelopt_mcp.stats import Interval, ratio_of_independent, verdict


class BackendInfo(BaseModel):
    """What a backend is, declared once on its class: the engine, the loaders, the device pool
    and every help text read it from here, so adding a backend is one module plus one line in
    the registry."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The name users pass (`--backend`, `backend=`)."""
    summary: str
    """One line for help texts: the hardware and the kind of kernel."""
    prompt_family: Literal["cpu", "nki", "gpu"]
    """The prompt set the planner, executor and summarizer use
    (accelopt_mcp/engine/prompt_templates/<family>/)."""
    device_kind: Literal["cpu", "neuron", "gpu"]
    """What one slot of its device pool is: a pinned CPU core group, a NeuronCore or a GPU."""
    target_hardware: tuple[str, ...]
    """What a kernel loaded for this backend lists as `spec.target_hardware`."""


class Availability(BaseModel):
    name: str
    usable: bool
    hardware: str | None = None
    reason: str
    """Why it is (not) usable, and what to install or where to run when it is not."""
    isolation: str | None = None
    """How candidates are isolated here: 'bwrap jail: ...' or 'none: ...' with how to get a
    jail. None where the backend does not say."""


class Baseline(BaseModel):
    """A kernel timed alongside the one being evaluated (its parent in a run, another
    candidate in a comparison)."""

    model_config = ConfigDict(frozen=True)

    label: str
    """How results name it (Comparison.baseline, ComparedKernel.label)."""
    solution: Solution


class BackendUnavailableError(RuntimeError):
    """The backend cannot run on this host; the message names what is missing and how to get it."""


class Backend(abc.ABC):
    """A profiler for one kind of hardware. Subclasses set `info` and implement availability()
    and _evaluate(); the registry (backends/registry.py) names them."""

    info: ClassVar[BackendInfo]

    @property
    def name(self) -> str:
        return self.info.name

    @abc.abstractmethod
    def availability(self) -> Availability: ...

    interleaves: ClassVar[bool] = False
    """True when `evaluate` times its baselines in the same rounds as the candidate (and
    `compare` times every kernel together). Otherwise baselines are ignored by evaluate and
    compare measures each kernel on its own."""

    @classmethod
    def options_from_store(cls, store: Any) -> dict[str, Any]:
        """Constructor options this backend keeps in the kernel database `store` (a
        KernelStore: backends sit beside the stores and know one only by the methods they
        call). Given options win over these. None by default."""
        return {}

    @classmethod
    def before_run(cls, store: Any, task: Task) -> None:
        """Work a run does once on the host that evaluates, before its first evaluation,
        while nothing is timed beside it (`store` as in options_from_store). Never raises
        for the run: what it cannot do it logs, and profiles say what is missing. Nothing by
        default."""
        return None

    @property
    def cores_per_evaluation(self) -> int | None:
        """How many cores one evaluation has (None: every core of the host); part of what a
        stored profile is filed under (BenchmarkConfig.profile_key). One device: 1."""
        return 1

    def evaluate(
        self,
        task: Task,
        solution: Solution,
        config: BenchmarkConfig | None = None,
        baselines: Sequence[Baseline] = (),
    ) -> Evaluation:
        """Check and time one candidate. Failures of the candidate (compile error, wrong
        answer, crash, hang) come back as an Evaluation, never as an exception. Raises
        BackendUnavailableError when the backend cannot run here at all. A backend that
        `interleaves` times each baseline in the same rounds and reports it in
        `Evaluation.comparisons` (a baseline that fails is left out, never failing the
        candidate); others ignore baselines. No config: BenchmarkConfig's defaults."""
        return self._evaluate(task, solution, config or BenchmarkConfig(), baselines)

    @abc.abstractmethod
    def _evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig, baselines: Sequence[Baseline]
    ) -> Evaluation:
        """evaluate, with a config."""

    def compare(
        self, task: Task, kernels: Sequence[Baseline], config: BenchmarkConfig | None = None
    ) -> KernelComparison:
        """Time 2-8 kernels against each other. This default measures each on its own and
        combines their intervals (independent errors); a backend that interleaves overrides
        it."""
        if not 2 <= len(kernels) <= 8:
            raise ValueError(f"compare takes 2 to 8 kernels, got {len(kernels)}")
        config = config or BenchmarkConfig()
        evaluations = [self.evaluate(task, k.solution, config) for k in kernels]
        intervals = {
            k.label: latency_interval(e) for k, e in zip(kernels, evaluations, strict=True)
        }
        pairs = []
        for i, a in enumerate(kernels):
            for b in kernels[i + 1 :]:
                ia, ib = intervals[a.label], intervals[b.label]
                if ia is None or ib is None:
                    continue
                pairs.append(pair_verdict(a.label, ia, b.label, ib, config.confidence))
        return ranked_comparison(kernels, evaluations, pairs, interleaved=False, config=config)


def latency_interval(evaluation: Evaluation) -> Interval | None:
    """The median latency with its interval (ms), or None when it did not pass. Without an
    interval, the min-max range stands in (wider, never narrower, than the truth)."""
    if not evaluation.passed or evaluation.performance is None:
        return None
    median = evaluation.performance.latency_ms
    stats = evaluation.latency_stats
    if stats is not None and stats.ci_low_ms is not None and stats.ci_high_ms is not None:
        return Interval(median, stats.ci_low_ms, stats.ci_high_ms)
    if stats is not None and stats.max_ms > stats.min_ms > 0:
        return Interval(median, stats.min_ms, stats.max_ms)
    return Interval(median, 0.0, math.inf)


def pair_verdict(
    a: str, a_latency: Interval, b: str, b_latency: Interval, confidence: float
) -> PairVerdict:
    """One pair measured apart, the faster median first."""
    if b_latency.estimate < a_latency.estimate:
        a, a_latency, b, b_latency = b, b_latency, a, a_latency
    speedup = ratio_of_independent(b_latency, a_latency, confidence)
    return PairVerdict(
        kernel=a,
        baseline=b,
        baseline_latency_ms=b_latency.estimate,
        speedup=speedup.estimate,
        ci_low=speedup.low,
        ci_high=speedup.high,
        verdict=verdict(speedup),
    )


def ranked_comparison(
    kernels: Sequence[Baseline],
    evaluations: Sequence[Evaluation],
    pairs: list[PairVerdict],
    *,
    interleaved: bool,
    config: BenchmarkConfig,
) -> KernelComparison:
    entries = [
        ComparedKernel(label=k.label, evaluation=e)
        for k, e in zip(kernels, evaluations, strict=True)
    ]
    passed = sorted(
        (e for e in entries if e.evaluation.passed and e.evaluation.performance is not None),
        key=lambda e: e.evaluation.performance.latency_ms if e.evaluation.performance else 0.0,
    )
    for rank, entry in enumerate(passed, start=1):
        entry.rank = rank
    rest = [e for e in entries if e.rank is None]
    return KernelComparison(
        kernels=passed + rest, pairs=pairs, interleaved=interleaved, confidence=config.confidence
    )

"""Compare kernels of one task against each other (the one path `accelopt compare` and the
`compare_kernels` tool share), and how measured figures read wherever they are shown: the
LLM's prompts, the MCP tools, the `accelopt` command.

Every figure is shown with its interval and, for a speedup, against what: a latency reads
'0.412 ms [0.405, 0.419] (95% CI)', a speedup '1.31x [1.27, 1.35] over the reference'. How
the harness took them (calls timed, time inside them, its round trip, contention) is kept in
`Evaluation.measurement` for benchmarks and audits and is never shown: to the planner such
figures look like properties of the kernel, and they are not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.base import Baseline
from accelopt_mcp.backends.cluster import cluster_address
from accelopt_mcp.backends.placement import local_backend, local_options_only
from accelopt_mcp.backends.registry import backend_class, backend_info
from accelopt_mcp.backends.roofline import (
    NO_ROOFLINE,
    PEAK_NAME_COUNTERS,
    PERCENT_COUNTERS,
    compute_peak_name,
    memory_peak_name,
    peak_against,
)
from accelopt_mcp.models import (
    BenchmarkConfig,
    ComparedKernel,
    Comparison,
    Evaluation,
    KernelComparison,
    PairVerdict,
    Task,
)
from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.tasks.kernels import load_solution, solution_from_source

MIN_KERNELS = 2
MAX_KERNELS = 8

HARNESS_INTERNALS: frozenset[str] = frozenset(
    {
        "timed_calls",
        "timed_total_ms",
        "reference_timed_total_ms",
        "all_timed_total_ms",
        "harness_overhead_us",
        "runqueue_wait_ms",
        "calls_per_sample",
        "rounds",
        "retaken_rounds",
        "foreign_share",
        "reference_busy_rounds",
        "host_load",
        "steal_fraction",
        "drift",
        "measurement_rounds",
        "max_rss_mb",
    }
)
"""How the harness took its figures. Profiles stored before `Evaluation.measurement` existed
hold some of these among their hardware counters; they are filtered out of what is shown."""

SHOWN_ELSEWHERE: frozenset[str] = frozenset(
    {"latency_ms", "reference_latency_ms", "relative_spread"}
)
"""Figures older cpu profiles also kept among their counters: the latencies and their spread
are shown with their intervals (performance, latency_stats), not again as bare numbers."""

# Significant digits of a figure: three, more when an interval would otherwise print as one
# number ([0.412, 0.412]), at most six.
_DIGITS, _MAX_DIGITS = 3, 6


# --------------------------------------------------------------------------- what is shown


def shown_counters(evaluation: Evaluation) -> dict[str, float]:
    """The hardware counters fit to show: performance figures (percent of peak among them),
    none of the harness's internals nor the latencies shown elsewhere with their intervals."""
    hidden = HARNESS_INTERNALS | SHOWN_ELSEWHERE | set(evaluation.measurement)
    return {k: v for k, v in evaluation.hardware_counters.items() if k not in hidden}


def roofline_text(evaluation: Evaluation, *, short: bool = False) -> str | None:
    """How close the kernel comes to the hardware, naming the peaks it is held against where
    the backend says how many cores' they are (cpu: roofline.PEAK_NAME_COUNTERS): '13.2% of
    the roofline (memory-bound: 2.12 GB/s of the 1-core memory peak 16 GB/s, 1.06 GFLOP/s of
    the 1-core elementwise fp32 peak 35.5 GFLOP/s)', from the percent-of-peak counters
    (roofline.PERCENT_COUNTERS); `short`: '13.2% of the roofline (memory-bound, against the
    1-core memory peak of 16 GB/s)'. 'no roofline declared...' with how to declare one when
    the backend said the task has none (`short`: without the how-to); None when neither (a
    failed evaluation, a backend without peaks)."""
    counters = evaluation.hardware_counters
    percent = counters.get("roofline_pct_of_peak")
    if percent is not None:
        bound = "memory" if counters.get("memory_bound", 0.0) >= 0.5 else "compute"
        text = f"{_figure(percent)}% of the roofline ({bound}-bound"
        cores = counters.get("peak_cores")
        if short:
            against = peak_against(counters)
            return text + (f", against {against})" if against else ")")
        rates = []
        if "gbytes_per_s" in counters and "peak_gbytes_per_s" in counters:
            of = "" if cores is None else f"the {memory_peak_name(cores)} "
            rates.append(
                f"{_figure(counters['gbytes_per_s'])} GB/s of {of}"
                f"{_figure(counters['peak_gbytes_per_s'])} GB/s"
            )
        if "gflops" in counters and "peak_gflops" in counters:
            matmul = counters.get("peak_matmul")
            of = (
                ""
                if cores is None
                else f"the {compute_peak_name(cores, None if matmul is None else matmul >= 0.5)} "
            )
            rates.append(
                f"{_figure(counters['gflops'])} GFLOP/s of {of}"
                f"{_figure(counters['peak_gflops'])} GFLOP/s"
            )
        if bound == "compute":
            rates.reverse()
        return text + (": " + ", ".join(rates) if rates else "") + ")"
    for line in evaluation.log.splitlines():
        if line.startswith(NO_ROOFLINE):
            return (
                f"{NO_ROOFLINE}: add roofline() to the task for percent of peak" if short else line
            )
    return None


def _figure(value: float) -> str:
    """Three significant digits, whole numbers from 1000 up: 13.2, 0.114, 1060."""
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def shown_evaluation(evaluation: Evaluation) -> Evaluation:
    """The evaluation as outputs (JSON included) show it: without `measurement` and without
    harness internals among its counters."""
    counters = shown_counters(evaluation)
    if not evaluation.measurement and counters == evaluation.hardware_counters:
        return evaluation
    return evaluation.model_copy(update={"measurement": {}, "hardware_counters": counters})


def shown_comparison(comparison: KernelComparison) -> KernelComparison:
    kernels = [
        k.model_copy(update={"evaluation": shown_evaluation(k.evaluation)})
        for k in comparison.kernels
    ]
    return comparison.model_copy(update={"kernels": kernels})


def _decimals(value: float, digits: int) -> int:
    if value == 0 or not math.isfinite(value):
        return digits - 1
    return max(0, digits - 1 - math.floor(math.log10(abs(value))))


def _number(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}" if math.isfinite(value) else "inf"


def interval_text(estimate: float, low: float | None, high: float | None, unit: str = "") -> str:
    """'0.412 ms [0.405, 0.419]' (unit ' ms'), or the estimate alone without an interval."""
    digits = _DIGITS
    while True:
        decimals = _decimals(estimate, digits)
        shown = f"{_number(estimate, decimals)}{unit}"
        if low is None or high is None:
            return shown
        lo, hi = _number(low, decimals), _number(high, decimals)
        if lo != hi or low == high or digits >= _MAX_DIGITS:
            return f"{shown} [{lo}, {hi}]"
        digits += 1


def level_text(confidence: float) -> str:
    return f"({confidence:.0%} CI)"


def against_text(baseline: str) -> str:
    """How a baseline is named after 'over': 'the reference', 'the parent', or its label."""
    return f"the {baseline}" if baseline in ("reference", "parent") else baseline


def speedup_text(speedup: float, low: float | None, high: float | None, against: str) -> str:
    """'1.31x [1.27, 1.35] over the reference'."""
    return f"{interval_text(speedup, low, high, 'x')} over {against}"


def latency_text(evaluation: Evaluation) -> str | None:
    """'0.412 ms [0.405, 0.419] (95% CI)'; None when it has no latency."""
    if evaluation.performance is None:
        return None
    stats = evaluation.latency_stats
    median = evaluation.performance.latency_ms
    if stats is None or stats.ci_low_ms is None or stats.ci_high_ms is None:
        return interval_text(median, None, None, " ms")
    interval = interval_text(median, stats.ci_low_ms, stats.ci_high_ms, " ms")
    return f"{interval} {level_text(stats.confidence)}"


def reference_speedup_text(evaluation: Evaluation) -> str | None:
    """'1.31x [1.27, 1.35] over the reference'; None without a reference latency."""
    perf = evaluation.performance
    if perf is None or perf.speedup_factor <= 0 or perf.reference_latency_ms <= 0:
        return None
    high = perf.speedup_ci_high
    if perf.speedup_ci_low is not None and high is None:
        high = math.inf  # the backend drops an unbounded upper end
    return speedup_text(perf.speedup_factor, perf.speedup_ci_low, high, "the reference")


def comparison_text(comparison: Comparison) -> str:
    """'1.05x [1.01, 1.09] over the parent (faster)'."""
    speedup = speedup_text(
        comparison.speedup,
        comparison.ci_low,
        comparison.ci_high,
        against_text(comparison.baseline),
    )
    return f"{speedup} ({comparison.verdict})"


def figures_text(evaluation: Evaluation) -> str:
    """One line: the median with its interval, every speedup with its interval and against
    what, and the percent of the roofline with the bound that binds (empty when it has no
    latency)."""
    parts = [latency_text(evaluation), reference_speedup_text(evaluation)]
    parts += [comparison_text(c) for c in evaluation.comparisons]
    if evaluation.passed:
        parts.append(roofline_text(evaluation, short=True))
    return "; ".join(p for p in parts if p)


def pair_text(pair: PairVerdict) -> str:
    """One verdict line: 'fast.py is faster than slow.py: 3.10x [2.95, 3.30]', or 'a.py and
    b.py are indistinguishable: a.py is 1.01x [0.98, 1.04] over b.py'."""
    interval = interval_text(pair.speedup, pair.ci_low, pair.ci_high, "x")
    if pair.verdict == "indistinguishable":
        return (
            f"{pair.kernel} and {pair.baseline} are indistinguishable: {pair.kernel} is "
            f"{interval} over {pair.baseline}"
        )
    return f"{pair.kernel} is {pair.verdict} than {pair.baseline}: {interval}"


# --------------------------------------------------------------------------- which kernels


def check_count(count: int) -> None:
    """ValueError, saying what to do, unless 2 to 8 kernels are given."""
    if count < MIN_KERNELS:
        raise ValueError(
            f"compare takes {MIN_KERNELS} to {MAX_KERNELS} kernels, got {count}: give at least "
            "two (profile a single kernel instead)"
        )
    if count > MAX_KERNELS:
        raise ValueError(
            f"compare takes {MIN_KERNELS} to {MAX_KERNELS} kernels, got {count}: compare at "
            f"most {MAX_KERNELS} at a time (keep one kernel in every group as the common yardstick)"
        )


def stored_kernel(
    store: KernelStore, task: Task, solution_id: str, label: str | None = None
) -> Baseline:
    """A stored solution (its id, or a unique prefix of 8+ characters), labelled with the id
    as given. LookupError when the store has no such id (AmbiguousIdError, a LookupError, for
    a prefix of several); ValueError when it is for another definition."""
    full = store.resolve_id("solution", solution_id)
    found = store.get_solution(full) if full is not None else None
    if found is None:
        raise LookupError(f"no stored solution with id {solution_id!r}")
    if found.definition_name != task.definition.name:
        raise ValueError(
            f"solution {solution_id!r} is for definition {found.definition_name!r}, not the "
            f"task's {task.definition.name!r}: compare kernels of one task"
        )
    return Baseline(label=label or solution_id, solution=found.solution)


def file_kernel(
    task: Task,
    path: str | Path,
    *,
    label: str | None = None,
    target_hardware: list[str] | None = None,
) -> Baseline:
    """A kernel .py or solution .json, labelled with its file name."""
    path = Path(path).expanduser()
    solution = load_solution(path, task, target_hardware=target_hardware)
    return Baseline(label=label or path.name, solution=solution)


def source_kernel(
    task: Task,
    source: str,
    *,
    label: str,
    target_hardware: list[str] | None = None,
) -> Baseline:
    """A kernel given as the text of a kernel .py."""
    solution = solution_from_source(
        source,
        task.definition.name,
        name=label,
        target_hardware=target_hardware,
        origin=f"the source of {label}",
    )
    return Baseline(label=label, solution=solution)


def unique_labels(kernels: Sequence[Baseline]) -> list[Baseline]:
    """The kernels with labels made unique ('a.py', 'a.py#2'): results name kernels by label,
    and comparing a kernel with itself (a noise check) is legitimate."""
    taken: set[str] = set()
    out = []
    for kernel in kernels:
        label, count = kernel.label, 1
        while label in taken:
            count += 1
            label = f"{kernel.label}#{count}"
        taken.add(label)
        out.append(
            kernel if label == kernel.label else Baseline(label=label, solution=kernel.solution)
        )
    return out


# --------------------------------------------------------------------------- comparing


def compare_kernels(
    task: Task,
    kernels: Sequence[Baseline],
    *,
    backend: str = "cpu",
    config: BenchmarkConfig | None = None,
    backend_options: dict[str, Any] | None = None,
    cluster: str | None = None,
) -> KernelComparison:
    """Time 2-8 kernels of `task` against each other on a backend (Backend.compare: in the
    same interleaved rounds where the backend can), ranked, with a verdict for every pair.
    A kernel that fails is ranked last with its status; it never fails the others. Logs come
    back redacted, as profile_kernel's do. cluster: on one device of a node of this Ray
    cluster (None reads ACCELOPT_RAY_ADDRESS, else this host)."""
    check_count(len(kernels))
    labelled = unique_labels(kernels)
    address = cluster_address(cluster)
    local_options_only(backend_options, address)
    if address is None:
        found = local_backend(backend, backend_options).compare(task, labelled, config)
    else:  # one node's device times them all, as one device here would
        from accelopt_mcp.backends.ray_pool import RayPool

        with RayPool(address, backend_info(backend), workers=1) as pool:
            found = pool.submit_compare(backend_class(backend), task, labelled, config).result()
    return found.model_copy(
        update={
            "kernels": [
                ComparedKernel(label=k.label, evaluation=k.evaluation.redacted(), rank=k.rank)
                for k in found.kernels
            ]
        }
    )


# --------------------------------------------------------------------------- decision figures

ROOFLINE_FIGURES: frozenset[str] = frozenset(
    {
        *PERCENT_COUNTERS,
        *PEAK_NAME_COUNTERS,
        "gflops",
        "gbytes_per_s",
        # roofline.peak_counters' copies of the same figures (nki, flashinfer)
        "peak_achieved_tflops_per_s",
        "peak_achieved_gbytes_per_s",
        "peak_compute_fraction",
        "peak_memory_fraction",
        "peak_roofline_fraction",
    }
)
"""Counters that roofline_text and the ideal time already say: listed again as bare numbers
they only repeat the percent of peak. (peak_matmul_fraction and peak_vector_fraction stay:
how the work splits between the engines is not said elsewhere.)"""
ACCURACY_FIGURES = ("l2_rel_error", "max_absolute_error", "max_relative_error")
"""How far the outputs were from the reference's, as counters (the tolerance is checked on the
first: the L2-relative error)."""


def ideal_time_ms(evaluation: Evaluation) -> float | None:
    """The roofline's time for one call: the latency times the fraction of the roofline it
    reaches (roofline.percent_of_peak: that fraction is the ideal time over the measured one);
    None without a latency or a percent of peak."""
    percent = evaluation.hardware_counters.get("roofline_pct_of_peak")
    if evaluation.performance is None or percent is None or not math.isfinite(percent):
        return None
    return evaluation.performance.latency_ms * percent / 100.0


def ms_text(value: float) -> str:
    """A time in ms to three significant digits: '0.0421 ms', '24.1 ms', '1060 ms'."""
    return f"{_figure(value)} ms"


def breakdown_lines(evaluation: Evaluation, top: int = 8) -> list[str]:
    """The largest `top` parts of one call (Evaluation.breakdown, largest first), one line
    each: '- np.exp: 12.1 ms (51%, 256 calls)'; a last line for the rest when some are left
    out. Empty when the evaluation has no breakdown."""
    entries = sorted(evaluation.breakdown, key=lambda e: e.ms, reverse=True)
    lines = []
    for entry in entries[:top]:
        extra = []
        if entry.share > 0:
            extra.append(f"{entry.share:.0%}")
        if entry.calls > 1:
            extra.append(f"{entry.calls} calls")
        what = " ".join(entry.what.split())
        lines.append(f"- {what}: {ms_text(entry.ms)}" + (f" ({', '.join(extra)})" if extra else ""))
    rest = entries[top:]
    if rest:
        lines.append(f"- {len(rest)} smaller part(s): {ms_text(sum(e.ms for e in rest))} in all")
    return lines

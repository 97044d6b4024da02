"""Reading a cpu evaluation's result (what the harness, cpu_runner, wrote): the latency
statistics and pair verdicts, the measurement figures, and the lines of the log a person and
the planner read (timing, memory, how a kernel failed). Pure functions of that result; the
backend (cpu.py) turns them into an Evaluation."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from accelopt_mcp.isolation.sandbox import (
    SandboxResult,
    read_result_file,
)
from accelopt_mcp.models import (
    BenchmarkConfig,
    Correctness,
    Definition,
    EvaluationStatus,
    LatencyStats,
    PairVerdict,
)
from accelopt_mcp.stats import Interval, robust_spread_of, verdict

log = logging.getLogger(__name__)
MAX_LOG_CHARS = 16_000
STDERR_TAIL_CHARS = 4_000


EVALUATION_CAP_S = 1800.0
"""No cpu evaluation runs longer than this, whatever its settings (see evaluation_backstop_s)."""


def output_plan(definition: Definition, axes: dict[str, int]) -> list[dict[str, Any]]:
    plan = []
    for name, spec in definition.outputs.items():
        try:
            shape = definition.shape_of(spec, axes)
        except ValueError:
            shape = None
        plan.append(
            {"name": name, "shape": list(shape) if shape else None, "dtype": spec.dtype.value}
        )
    return plan


def read_json(path: Path) -> dict[str, Any] | None:
    text = read_result_file(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def as_float(value: Any) -> float:
    return float(value) if value is not None else math.nan


def correctness_of(data: dict[str, Any] | None) -> Correctness | None:
    if not data:
        return None
    extra = {k: as_float(v) for k, v in data.items() if k not in ("max_absolute_error",)}
    return Correctness(
        max_relative_error=abs(as_float(data.get("max_relative_error", 0.0))),
        max_absolute_error=abs(as_float(data.get("max_absolute_error", 0.0))),
        extra=extra,
    )


def stats(
    summary: dict[str, Any],
    analysis: dict[str, Any],
    confidence: float,
    contention: dict[str, Any],
    label: str,
) -> LatencyStats:
    """LatencyStats in milliseconds from the harness's summary (nanoseconds) of one kernel."""
    busy_rounds = (contention.get("busy_rounds_by_contestant") or {}).get(label, 0)
    ms = {k: float(v) / 1e6 for k, v in summary.items() if k != "samples"}
    return LatencyStats(
        mean_ms=ms["mean"],
        median_ms=ms["median"],
        min_ms=ms["min"],
        max_ms=ms["max"],
        stdev_ms=ms["stdev"],
        relative_spread=robust_spread_of(ms["q1"], ms["q3"], ms["median"]),
        runs=int(summary["samples"]),
        measurement_rounds=int(analysis["blocks"]),
        # No interval at all rather than (0, inf): too few samples to say anything.
        ci_low_ms=ms["low"] if math.isfinite(ms["high"]) else None,
        ci_high_ms=ms["high"] if math.isfinite(ms["high"]) else None,
        confidence=confidence,
        q1_ms=ms["q1"],
        q3_ms=ms["q3"],
        contended_samples=int(busy_rounds),
        contended=bool(contention.get("contended")),
    )


NOISY_WIDTH = 0.05
"""A figure whose widest interval stays beyond ±5 % is flagged noisy_timing: too loose to tell
apart the changes a search ranks on (a few percent)."""


def timing_lines(
    config: BenchmarkConfig,
    analysis: dict[str, Any],
    contention: dict[str, Any],
    flags: list[str],
    cpus: set[int] | None,
) -> list[str]:
    """What the timing saw (how busy the host was, what was taken out, how wide the intervals
    stayed) and, when the figures are loose, what to do about it; adds noisy_timing then."""
    widest = float(analysis.get("widest", 0.0))
    share = float(contention.get("foreign_share", 0.0))
    load = (float(contention.get("load_before", 0.0)), float(contention.get("load_after", 0.0)))
    cores = len(os.sched_getaffinity(0))
    if cpus:
        where = (
            f"pinned to core{'s' if len(cpus) > 1 else ''} {','.join(map(str, sorted(cpus)))} "
            f"with {len(cpus)} BLAS/OpenMP thread{'s' if len(cpus) > 1 else ''}"
        )
    else:
        where = f"on every usable core ({cores}), BLAS/OpenMP threads at the library's default"
    seen = (
        f"timing: {where}; host load {load[0]:.1f} -> {load[1]:.1f} "
        f"on {cores} usable cores; "
        f"{share:.1%} of the timed windows went to other programs"
    )
    seen += (
        " (taken out of every contestant's samples alike)"
        if contention.get("accounted", True)
        else " (not taken out: this host gives no per-jail CPU time, the figures are wall clock)"
    )
    steal = float(contention.get("steal_fraction", 0.0))
    if steal > 0.01:
        seen += f"; steal {steal:.1%}"
    seen += f"; widest speedup interval ±{widest:.1%} (target ±{config.target_ci:.1%}"
    thresholds = analysis.get("decide_at") or []
    if thresholds:
        seen += ", or clear of " + " and ".join(f"{float(t):g}x" for t in thresholds)
    seen += ")"
    if analysis.get("answered", analysis.get("target_met", True)):
        return [seen + f", answered after {analysis.get('blocks', 1)} sets of processes"]
    why = (
        f"the {config.max_timing_seconds:g} s timing cap"
        if analysis.get("time_capped")
        else f"{analysis['blocks']} sets of processes"
    )
    seen += f", reached after {why}"
    if widest <= NOISY_WIDTH:
        return [seen]
    flags.append("noisy_timing")
    if contention.get("contended"):
        step = (
            "the host was busy: time it again when it is quieter (in a run: fewer --workers), "
            "or raise --max-timing"
        )
    else:
        step = (
            "the kernel's own times vary from call to call (or process to process): raise "
            "--max-timing, or make each call longer than a millisecond"
        )
    return [seen, f"next step: {step}"]


def measurement(result: dict[str, Any], analysis: dict[str, Any], label: str) -> dict[str, float]:
    """How the figures were taken (never shown to the LLM): calls, time inside them, the
    harness's round trip, contention."""
    timed = result.get("timed_ns") or {}
    contention = analysis.get("contention") or {}
    return {
        "timed_calls": float(result.get("timed_calls", 0)),
        "timed_total_ms": timed.get(label, 0) / 1e6,
        "reference_timed_total_ms": timed.get("reference", 0) / 1e6,
        "all_timed_total_ms": sum(timed.values()) / 1e6,
        "harness_overhead_us": result.get("harness_overhead_ns", 0) / 1e3,
        "calls_per_sample": float(analysis.get("calls_per_sample", 1)),
        "rounds": float(analysis.get("rounds", 0)),
        "foreign_share": float(contention.get("foreign_share", 0.0)),
        "reference_busy_rounds": float(
            (contention.get("busy_rounds_by_contestant") or {}).get("reference", 0)
        ),
        "host_load": float(contention.get("load_after", 0.0)),
        "steal_fraction": float(contention.get("steal_fraction", 0.0)),
        "drift": float(contention.get("drift", 0.0)),
        # Untimed extras of this evaluation, wall seconds: the stress sets' checks and the
        # breakdown's traced call (0 when there were none).
        "stress_s": float(result.get("stress_s", 0.0)),
        "breakdown_s": float(result.get("breakdown_s", 0.0)),
    }


def pair_verdicts(
    result: dict[str, Any], names: dict[str, str], labels: list[str]
) -> list[PairVerdict]:
    """Each pair of compared kernels once, the faster median first."""
    analysis = result.get("analysis") or {}
    summaries = analysis.get("summaries") or {}
    speedups = {(s["kernel"], s["baseline"]): s for s in analysis.get("speedups", [])}
    timed = [label for label in labels if label in summaries]
    pairs = []
    for i, a in enumerate(timed):
        for b in timed[i + 1 :]:
            if summaries[b]["median"] < summaries[a]["median"]:
                first, second = b, a
            else:
                first, second = a, b
            s = speedups.get((first, second))
            if s is None:
                continue
            interval = Interval(float(s["estimate"]), float(s["low"]), float(s["high"]))
            pairs.append(
                PairVerdict(
                    kernel=names[first],
                    baseline=names[second],
                    baseline_latency_ms=summaries[second]["median"] / 1e6,
                    speedup=interval.estimate,
                    ci_low=interval.low,
                    ci_high=interval.high,
                    verdict=verdict(interval),
                )
            )
    return pairs


def isolation_flags(result: dict[str, Any]) -> list[str]:
    """['not_isolated'] when the harness says its processes ran without a jail."""
    isolation = result.get("isolation")
    return ["not_isolated"] if isinstance(isolation, dict) and not isolation.get("isolated") else []


def memory_cgroup(result: dict[str, Any], label: str) -> float | None:
    by = (result.get("jail_memory_limit_by") or {}).get(label)
    return None if by is None else float(by in ("cgroup-v1", "cgroup-v2"))


def memory_line(result: dict[str, Any], label: str, config: BenchmarkConfig) -> str:
    """What held the kernel's jails to memory_limit_mb, and the most they held at once."""
    by = (result.get("jail_memory_limit_by") or {}).get(label)
    peak = (result.get("jail_memory_peak_mb") or {}).get(label)
    limit = f"memory_limit_mb {config.memory_limit_mb} MB"
    if by in ("cgroup-v1", "cgroup-v2"):
        line = (
            f"memory: {limit} held by each jail's memory cgroup ({by}: all its processes and "
            "their /tmp, /dev/shm and work-folder files together)"
        )
    else:
        line = f"memory: {limit} per process only (RLIMIT_AS; no memory cgroup on this host)"
    return line + (f"; peak {peak:.0f} MB" if isinstance(peak, int | float) else "")


def outcome_text(outcome: dict[str, Any]) -> str:
    error = outcome.get("error")
    if error:
        return str(error.get("message", "failed"))
    return f"{outcome.get('status')}: {outcome.get('message', '')}".strip()


def died(run: SandboxResult, stage: str, config: BenchmarkConfig) -> tuple[EvaluationStatus, str]:
    """Status and log for a child that ended without writing its result."""
    where = f"during {stage}"
    if run.timed_out:
        status = EvaluationStatus.TIMEOUT
        line = (
            f"the whole evaluation ran past its limit ({run.wall_s:.0f} s) {where} "
            f"(timeout_seconds {config.timeout_seconds:g} s per call, for every untimed call of "
            f"every contestant, plus the sampling cap; never more than {EVALUATION_CAP_S:g} s): "
            "if the kernel is slow rather than stuck, raise timeout_seconds (CLI --timeout)"
        )
    elif run.memory_exceeded:
        status = EvaluationStatus.RUNTIME_ERROR
        line = f"ran out of memory (limit {config.memory_limit_mb} MB) {where}"
    elif run.signal is not None:
        status = EvaluationStatus.RUNTIME_ERROR
        line = f"the kernel process {run.describe().removeprefix('child ')} {where}"
    else:
        status = EvaluationStatus.RUNTIME_ERROR
        line = (
            f"the process exited with code {run.returncode} {where} without reporting a result "
            "(os._exit or a hard exit in the kernel?)"
        )
    if run.fork_limit_hit:
        line += "; it also hit the process limit (fork bomb?)"
    return status, join([line], run)


def error_line(error: dict[str, Any]) -> str:
    message: str = error["message"]
    if error["kind"] == "reference":
        message = f"the task's reference failed (not the candidate's fault): {message}"
    if "MemoryError" in message or "Unable to allocate" in message:
        message = f"ran out of memory: {message}"
    if "Resource temporarily unavailable" in message or "BlockingIOError" in message:
        message = f"hit the process limit (fork bomb?): {message}"
    return message


def join(lines: list[str], run: SandboxResult) -> str:
    parts = [line for line in lines if line]
    if run.stderr.strip():
        parts.append("stderr (tail):\n" + run.stderr[-STDERR_TAIL_CHARS:])
    if run.stdout.strip():
        parts.append("stdout (tail):\n" + run.stdout[-STDERR_TAIL_CHARS // 2 :])
    if run.output_truncated:
        parts.append("(output was truncated by the sandbox)")
    return "\n".join(parts)


def cap(log: str) -> str:
    if len(log) <= MAX_LOG_CHARS:
        return log
    half = MAX_LOG_CHARS // 2
    return f"{log[:half]}\n[... {len(log) - MAX_LOG_CHARS} characters dropped ...]\n{log[-half:]}"

"""The `cpu` backend: Python (NumPy / PyTorch-CPU) kernels checked and timed on this host.

Each evaluation is one sandboxed child (`cpu_runner`) in its own temp dir; this side writes the
job (cpu_job.py: the job file and the limits the child runs under), maps how the child ended
onto an Evaluation (reading its result with cpu_result.py), and adds the figures the planner
reads.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from accelopt_mcp.backends.base import (
    Availability,
    Backend,
    BackendInfo,
    BackendUnavailableError,
    Baseline,
    ranked_comparison,
)
from accelopt_mcp.backends.breakdown import breakdown_from
from accelopt_mcp.backends.cpu_job import (
    HARNESS_PROCESSES,
    JAIL_MAX_PROCESSES,
    TIMING_ENV,
    evaluation_backstop_s,
    runner_argv,
    stress_allowance,
    write_job,
)
from accelopt_mcp.backends.cpu_peaks import PeakSource, measured_roofline
from accelopt_mcp.backends.cpu_peaks_records import PeakMeasurementError
from accelopt_mcp.backends.cpu_result import (
    cap,
    correctness_of,
    died,
    error_line,
    isolation_flags,
    join,
    measurement,
    memory_cgroup,
    memory_line,
    outcome_text,
    pair_verdicts,
    read_json,
    stats,
    timing_lines,
)
from accelopt_mcp.backends.cpu_session import live_jails
from accelopt_mcp.backends.host_facts import environment_libs, host_hardware
from accelopt_mcp.backends.roofline import NO_ROOFLINE_LINE, ROOFLINE_LINE, is_above_peak
from accelopt_mcp.isolation.jail_probe import MODE_VARIABLE, jail_status
from accelopt_mcp.isolation.sandbox import (
    SandboxResult,
    address_space_backstop_mb,
    remove_abandoned_work_dirs,
    run_sandboxed,
    work_dir_prefix,
)
from accelopt_mcp.models import (
    BenchmarkConfig,
    Comparison,
    Correctness,
    Environment,
    Evaluation,
    EvaluationStatus,
    KernelComparison,
    Language,
    PairVerdict,
    Performance,
    Roofline,
    Solution,
    Task,
)
from accelopt_mcp.redaction import redact
from accelopt_mcp.stats import Interval, verdict
from accelopt_mcp.tasks.inputs import InputError

log = logging.getLogger(__name__)
PRIMARY = "candidate"
"""The harness's label for the kernel being evaluated (baselines are b0, b1, ...)."""
MAX_COMPARED = 8


_warned_not_isolated = False


def isolation_summary() -> str:
    """'bwrap jail: ...' or 'none: <why, and how to get one>'. The first time no jail can run,
    says so once in the log: every evaluation will carry the `not_isolated` flag."""
    global _warned_not_isolated
    status = jail_status()
    if status.kind == "none" and not _warned_not_isolated:
        _warned_not_isolated = True
        log.warning(
            "kernels run WITHOUT a jail (evaluations are flagged not_isolated): %s", status.reason
        )
    return f"{'bwrap jail' if status.kind == 'bwrap' else 'none'}: {status.reason}"


class _HarnessRun(NamedTuple):
    """How one run of the harness ended (CpuBackend._run)."""

    run: SandboxResult
    """The sandboxed child's exit, output and limits."""
    result: dict[str, Any] | None
    """Its result file; None when it wrote none (it died)."""
    stage: str
    """The last stage it reported reaching (what it was doing when it died)."""


class CpuBackend(Backend):
    interleaves = True
    info = BackendInfo(
        name="cpu",
        summary="this host's CPU: Python/NumPy (or PyTorch-CPU) kernels",
        prompt_family="cpu",
        device_kind="cpu",
        target_hardware=("cpu",),
    )

    def __init__(self, cpus: set[int] | None = None, peaks: PeakSource | None = None) -> None:
        """cpus: the cores every evaluation is pinned to (None: every usable core). peaks:
        where this host's measured peaks come from for percent of peak (default: this
        process's memory, then the peaks file, else measured once; give
        `PeakSource(store)` to keep them in a kernel store)."""
        if cpus is not None:
            usable = os.sched_getaffinity(0)
            if not cpus or not cpus <= usable:
                raise ValueError(
                    f"cpus {sorted(cpus)} must be a non-empty subset of this host's usable "
                    f"cores {sorted(usable)}"
                )
        self.cpus = set(cpus) if cpus else None
        self.peaks = peaks or PeakSource()
        self.hardware = host_hardware()
        remove_abandoned_work_dirs("cpu")
        self.jail = "bwrap" if jail_status().kind == "bwrap" else "none"
        isolation_summary()

    @classmethod
    def options_from_store(cls, store: Any) -> dict[str, Any]:
        # Peaks measured once per host land in the database (and come from it).
        return {"peaks": PeakSource(store)}

    @classmethod
    def before_run(cls, store: Any, task: Task) -> None:
        """This host's peaks (for percent of peak), measured now unless already kept: the
        measurement takes every core for seconds, so before any evaluation runs beside it."""
        if task.roofline is None:
            return
        try:
            PeakSource(store).peaks(host_hardware())
        except PeakMeasurementError as exc:
            # Profiles then say they have no percent of peak, and why.
            log.warning("could not measure this host's peaks: %s", exc)

    @property
    def cores_per_evaluation(self) -> int | None:
        return len(self.cpus) if self.cpus else None

    def availability(self) -> Availability:
        cores = len(self.cpus) if self.cpus else len(os.sched_getaffinity(0))
        return Availability(
            name=self.name,
            usable=True,
            hardware=self.hardware,
            reason=f"runs Python/NumPy kernels on this host ({cores} core(s))",
            isolation=isolation_summary(),
        )

    # ------------------------------------------------------------------ evaluate

    def _evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig, baselines: Sequence[Baseline]
    ) -> Evaluation:
        refused = self._refuse(solution)
        if refused is not None:
            return refused
        # Our own labels travel to the harness; the caller's come back in the results.
        kernels = [(PRIMARY, solution)] + [
            (f"b{i}", b.solution)
            for i, b in enumerate(baselines)
            if Language(b.solution.spec.language) == Language.PYTHON
        ]
        names = {f"b{i}": b.label for i, b in enumerate(baselines)}
        outcome = self._run(task, kernels, config, primary=True)
        if isinstance(outcome, Evaluation):
            return outcome
        return self._to_evaluation(task, config, outcome, names)

    def compare(
        self, task: Task, kernels: Sequence[Baseline], config: BenchmarkConfig | None = None
    ) -> KernelComparison:
        """Every kernel and the reference in the same interleaved rounds, over fresh processes;
        a kernel that fails is ranked last with its own verdict, the others go on."""
        if not 2 <= len(kernels) <= MAX_COMPARED:
            raise ValueError(f"compare takes 2 to {MAX_COMPARED} kernels, got {len(kernels)}")
        config = config or BenchmarkConfig()
        labels = [f"k{i}" for i in range(len(kernels))]
        evaluations: dict[str, Evaluation] = {}
        runnable: list[tuple[str, Solution]] = []
        for label, kernel in zip(labels, kernels, strict=True):
            refused = self._refuse(kernel.solution)
            if refused is not None:
                evaluations[label] = refused
            else:
                runnable.append((label, kernel.solution))
        pairs: list[PairVerdict] = []
        if runnable:
            outcome = self._run(task, runnable, config, primary=False)
            if isinstance(outcome, Evaluation):
                evaluations |= {label: outcome for label, _ in runnable}
            else:
                names = dict(zip(labels, [k.label for k in kernels], strict=True))
                for label, _ in runnable:
                    evaluations[label] = self._kernel_evaluation(task, config, outcome, label)
                pairs = pair_verdicts(outcome.result or {}, names, [label for label, _ in runnable])
        return ranked_comparison(
            kernels,
            [evaluations[label] for label in labels],
            pairs,
            interleaved=True,
            config=config,
        )

    def _refuse(self, solution: Solution) -> Evaluation | None:
        """An evaluation when this backend cannot run the solution at all, else None."""
        if self.jail == "none" and os.environ.get(MODE_VARIABLE, "").strip().lower() == "bwrap":
            raise BackendUnavailableError(
                f"{MODE_VARIABLE}=bwrap asks for a jail and none can run here: "
                f"{jail_status().reason}"
            )
        language = Language(solution.spec.language)
        if language != Language.PYTHON:
            return self._evaluation(
                EvaluationStatus.COMPILE_ERROR,
                f"the cpu backend runs Python kernels; this solution's language is "
                f"{language.value!r}: profile it with the "
                f"{'nki' if language == Language.NKI else 'flashinfer'} backend",
            )
        return None

    def _run(
        self,
        task: Task,
        kernels: list[tuple[str, Solution]],
        config: BenchmarkConfig,
        *,
        primary: bool,
    ) -> Evaluation | _HarnessRun:
        """Run the harness once: an Evaluation when the run is void (the task cannot be run,
        a forged result), else how the child ended, its result and its last stage."""
        with tempfile.TemporaryDirectory(
            prefix=work_dir_prefix("cpu"), ignore_cleanup_errors=True
        ) as tmp:
            work = Path(tmp)
            try:
                job = write_job(
                    work, task, kernels, config, primary=primary, cpus=self.cpus, jail=self.jail
                )
            except (InputError, ValueError) as exc:
                # The task, not the candidate, is at fault; say so instead of blaming the kernel.
                return self._evaluation(
                    EvaluationStatus.RUNTIME_ERROR, f"the task cannot be run: {exc}"
                )
            run = run_sandboxed(
                runner_argv(work / "job.json", work / "result.json"),
                timeout_s=evaluation_backstop_s(
                    config, len(kernels), stress_allowance(task.definition.reference)
                ),
                # A jail whose memory cgroup holds memory_limit_mb gets the looser RLIMIT_AS
                # backstop, which it inherits from here and could not raise past this.
                memory_limit_mb=max(
                    config.memory_limit_mb * len(kernels),
                    address_space_backstop_mb(config.memory_limit_mb),
                ),
                # The harness itself needs a handful; every live jail has its own cap as well
                # (JAIL_MAX_PROCESSES) and counts against this one too.
                max_processes=HARNESS_PROCESSES
                + live_jails(len(kernels), config.max_processes) * (JAIL_MAX_PROCESSES + 3),
                cwd=work,
                env=TIMING_ENV,
                cpus=self.cpus,
            )
            result = read_json(work / "result.json")
            if result is not None and result.get("nonce") != job["nonce"]:
                return self._evaluation(
                    EvaluationStatus.RUNTIME_ERROR,
                    join(
                        [
                            "the result file was not written by the profiler (forged by the "
                            "kernel?); the evaluation is void"
                        ],
                        run,
                    ),
                    flags=["forged_result"],
                )
            stage = (read_json(work / "progress.json") or {}).get("stage", "start-up")
        return _HarnessRun(run, result, stage)

    # ------------------------------------------------------------------ results

    def _evaluation(self, status: EvaluationStatus, log: str, **fields: Any) -> Evaluation:
        return Evaluation(
            status=status,
            environment=Environment(
                hardware=self.hardware,
                # Versions, ISA, caches and the cores it ran on: the planner's hardware block.
                libs=environment_libs(self.cpus),
            ),
            timestamp=datetime.now(UTC).isoformat(),
            # A second line of defence: no secret leaves an evaluation, whatever printed it.
            log=cap(redact(log)),
            **fields,
        )

    def _to_evaluation(
        self,
        task: Task,
        config: BenchmarkConfig,
        harness: _HarnessRun,
        names: dict[str, str] | None = None,
    ) -> Evaluation:
        """The candidate's evaluation from a primary-mode run."""
        run, result = harness.run, harness.result
        if result is None:
            return self._evaluation(*died(run, harness.stage, config))
        flags = list(dict.fromkeys(result.get("flags", []))) + isolation_flags(result)
        stderr = str(result.get("candidate_stderr") or "").strip()
        if stderr:
            run = dataclasses.replace(run, stderr=f"{run.stderr}\n[kernel]\n{stderr}".strip())
        error = result.get("error")
        if error:
            return self._error_evaluation(error, run, flags)
        correctness = correctness_of(result.get("correctness"))
        failed = self._unpassed(result.get("status"), result, correctness, run, flags)
        if failed is not None:
            return failed
        assert correctness is not None
        dropped = [
            f"baseline {(names or {}).get(label, label)} was not timed: {outcome_text(outcome)}"
            for label, outcome in (result.get("kernels") or {}).items()
            if label != PRIMARY and outcome.get("status") != "PASSED"
        ]
        return self._passed(
            task, config, run, result, PRIMARY, correctness, flags, names or {}, dropped
        )

    def _kernel_evaluation(
        self,
        task: Task,
        config: BenchmarkConfig,
        harness: _HarnessRun,
        label: str,
    ) -> Evaluation:
        """One kernel's evaluation from a comparison run."""
        run, result = harness.run, harness.result
        if result is None:
            return self._evaluation(*died(run, harness.stage, config))
        flags = isolation_flags(result)
        if result.get("error"):
            return self._error_evaluation(result["error"], run, flags)
        outcome = (result.get("kernels") or {}).get(label) or {}
        flags = list(dict.fromkeys([*outcome.get("flags", []), *flags]))
        if outcome.get("stderr"):
            # What this kernel printed (not the harness's output, which all kernels share).
            run = dataclasses.replace(run, stderr=str(outcome["stderr"]), stdout="")
        if outcome.get("error"):
            return self._error_evaluation(outcome["error"], run, flags)
        correctness = correctness_of(outcome.get("correctness"))
        failed = self._unpassed(outcome.get("status"), outcome, correctness, run, flags)
        if failed is not None:
            return failed
        assert correctness is not None
        if label not in ((result.get("analysis") or {}).get("summaries") or {}):
            return self._evaluation(
                EvaluationStatus.RUNTIME_ERROR, "no timing was taken", flags=flags
            )
        return self._passed(task, config, run, result, label, correctness, flags, {}, [])

    def _unpassed(
        self,
        status: str | None,
        report: dict[str, Any],
        correctness: Correctness | None,
        run: SandboxResult,
        flags: list[str],
    ) -> Evaluation | None:
        """The evaluation of a kernel the harness reported as not passed, with its message
        (None when it passed, with the figures that says it did)."""
        verdict = EvaluationStatus(status or "RUNTIME_ERROR")
        log = join([report.get("message", "")], run)
        if verdict == EvaluationStatus.INCORRECT_NUMERICAL:
            return self._evaluation(
                verdict, log, correctness=correctness or Correctness(), flags=flags
            )
        if verdict != EvaluationStatus.PASSED or correctness is None:
            return self._evaluation(verdict, log, flags=flags)
        return None

    def _error_evaluation(
        self, error: dict[str, Any], run: SandboxResult, flags: list[str]
    ) -> Evaluation:
        status = {
            "compile": EvaluationStatus.COMPILE_ERROR,
            "timeout": EvaluationStatus.TIMEOUT,
        }.get(error["kind"], EvaluationStatus.RUNTIME_ERROR)
        lines = [error_line(error), error.get("traceback", "")]
        return self._evaluation(status, join(lines, run), flags=flags)

    def _passed(
        self,
        task: Task,
        config: BenchmarkConfig,
        run: SandboxResult,
        result: dict[str, Any],
        label: str,
        correctness: Correctness,
        flags: list[str],
        names: dict[str, str],
        notes: list[str],
    ) -> Evaluation:
        analysis = result["analysis"]
        summaries = analysis["summaries"]
        contention = analysis.get("contention") or {}
        kernel = stats(summaries[label], analysis, config.confidence, contention, label)
        reference = summaries["reference"]
        latency_ms, reference_ms = kernel.median_ms, reference["median"] / 1e6
        speedups = {(s["kernel"], s["baseline"]): s for s in analysis.get("speedups", [])}
        against_reference = speedups.get((label, "reference"))
        comparisons = [
            Comparison(
                baseline=names.get(baseline, baseline),
                baseline_latency_ms=summaries[baseline]["median"] / 1e6,
                speedup=s["estimate"],
                ci_low=float(s["low"]),
                ci_high=float(s["high"]),
                verdict=verdict(Interval(s["estimate"], float(s["low"]), float(s["high"]))),
            )
            for (kernel_label, baseline), s in speedups.items()
            if kernel_label == label and baseline != "reference" and baseline in names
        ]
        # Performance figures only: the latencies and their spread are in `performance` and
        # `latency_stats`, how the harness ran in `measurement`.
        counters = {
            "l2_rel_error": correctness.extra["l2_rel_error"] if correctness.extra else 0.0,
            "max_absolute_error": correctness.max_absolute_error,
        }
        roofline_counters, roofline_line, above_peak = self._roofline(task.roofline, latency_ms)
        counters |= roofline_counters
        if above_peak:
            flags.append("above_peak")
        speedup = Interval(reference_ms / latency_ms if latency_ms > 0 else 0.0, 0.0, math.inf)
        if against_reference is not None:
            speedup = Interval(
                float(against_reference["estimate"]),
                float(against_reference["low"]),
                float(against_reference["high"]),
            )
        level = f"{config.confidence:.0%}"
        interval = (
            f"[{kernel.ci_low_ms:.4f}, {kernel.ci_high_ms:.4f}] ({level} CI)"
            if kernel.ci_low_ms is not None and kernel.ci_high_ms is not None
            else "(too few samples for an interval)"
        )
        stressed = [str(n) for n in result.get("stress_sets") or []][:8]
        sets = "stress set" if len(stressed) == 1 else "stress sets"
        stress = f" and {len(stressed)} {sets} ({', '.join(stressed)})" if stressed else ""
        log = [
            f"correct on {len(config.seeds)} seeds{stress} (L2-relative error "
            f"{counters['l2_rel_error']:.3g}); median {latency_ms:.4f} ms {interval} over "
            f"{kernel.runs} samples in {kernel.measurement_rounds} sets of fresh processes; "
            f"reference {reference_ms:.4f} ms in the same rounds; speedup over the reference "
            f"{speedup.estimate:.3f}x [{speedup.low:.3f}, {speedup.high:.3f}]"
        ]
        log += [
            f"against {c.baseline}: {c.speedup:.3f}x [{c.ci_low:.3f}, "
            f"{c.ci_high:.3f}] ({c.verdict})"
            for c in comparisons
        ]
        log += timing_lines(config, analysis, contention, flags, self.cpus)
        log.append(roofline_line)
        if "above_peak" in flags:
            log.append(
                "above this host's measured peak: the kernel skips work (or reuses a result), "
                "or the task's roofline overstates the work"
            )
        log.append(memory_line(result, label, config))
        if label == PRIMARY and config.breakdown and result.get("breakdown_error"):
            # Why there is no breakdown (the kernel's doing, or its tracer's): a note, no verdict.
            log.append(f"no time breakdown: {str(result['breakdown_error'])[:300]}")
        log += notes
        return self._evaluation(
            EvaluationStatus.PASSED,
            join(log, run),
            correctness=correctness,
            performance=Performance(
                latency_ms=latency_ms,
                reference_latency_ms=reference_ms,
                speedup_factor=speedup.estimate,
                speedup_ci_low=speedup.low,
                speedup_ci_high=speedup.high if math.isfinite(speedup.high) else None,
            ),
            latency_stats=kernel,
            hardware_counters={k: float(v) for k, v in counters.items()},
            measurement=measurement(result, analysis, label)
            | {
                name: value
                for name, value in {
                    "max_rss_mb": run.max_rss_mb,
                    # The kernel's jails as wholes (children and tmpfs files included), not
                    # the harness's largest single process; absent without a memory cgroup.
                    "jail_memory_peak_mb": (result.get("jail_memory_peak_mb") or {}).get(label),
                    # The same, with the breakdown's untimed traced call (its process only),
                    # apart from the figure above, which the traced call never changes.
                    "breakdown_jail_memory_peak_mb": result.get("breakdown_memory_peak_mb")
                    if label == PRIMARY
                    else None,
                    # 1.0: memory_limit_mb held each jail as a whole (its memory cgroup); 0.0:
                    # only RLIMIT_AS per process (the log names which).
                    "jail_memory_cgroup": memory_cgroup(result, label),
                }.items()
                if value is not None
            },
            comparisons=comparisons,
            breakdown=breakdown_from(result.get("breakdown")) if label == PRIMARY else [],
            flags=list(dict.fromkeys(flags)),
        )

    def _roofline(
        self, roofline: Roofline | None, latency_ms: float
    ) -> tuple[dict[str, float], str, bool]:
        """Percent of peak (counters), its log line and whether it is above the peak
        (roofline.is_above_peak: clearly over 100 %): the task's work over the latency, held
        against this host's peaks measured with as many cores working as the evaluation had
        (one, when pinned; measured now if they never were) and, for memory, the bandwidth of
        the level its working set fits in; the line names each peak (cpu_peaks.
        measured_roofline)."""
        if roofline is None:
            return {}, NO_ROOFLINE_LINE, False
        if latency_ms <= 0:
            return {}, "no percent of peak: no latency was measured", False
        cores = len(self.cpus) if self.cpus else len(os.sched_getaffinity(0))
        try:
            measured = self.peaks.peaks(self.hardware, cores=cores, cpus=self.cpus)
        except PeakMeasurementError as exc:
            line = f"no percent of peak: this host's peaks could not be measured ({exc})"
            return {}, line, False
        counters, text, report = measured_roofline(measured, cores, roofline, latency_ms)
        line = ROOFLINE_LINE + text
        if float(report["roofline_fraction"]) > 1.0:
            # Measured peaks are lower bounds (a short, cached measurement), so a kernel just
            # over them is shown as such; only one clearly beyond them is untrusted.
            line += (
                f"; over 100 % of this host's measured peak (untrusted only above "
                f"{MEASURED_PEAK_SLACK:.0%}: re-measure with `accelopt backends --remeasure`)"
            )
        return counters, line, is_above_peak(report, slack=MEASURED_PEAK_SLACK)


MEASURED_PEAK_SLACK = 1.5
"""How far over a *measured* peak a result must be to be flagged above_peak (untrusted): a
peak taken once, briefly, on a shared host under-reads (throttling, a busy sibling thread), and
a correct kernel near it must not be thrown out of the search; a kernel half again over it
skips work or the roofline overstates it."""

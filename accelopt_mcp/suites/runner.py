"""Running a suite: one optimization per task case of a benchmark directory, under one settings
preset, ending in the percent-of-peak table (suites/table.py).

A suite is a stored record (store.base.SuiteRecord) that says what was run, with what and on
what, and holds every case's state; each step writes it, so a suite survives a crash of the
process that drives it and `accelopt suite resume` goes on from there:

1. baselines: each case's baseline kernel is profiled and stored (its percent of peak);
2. runs: each case becomes an optimization job (engine/jobs.py), which runs in a process of
   its own and outlives the driver; a job carries its suite and case (`suite_case`), so a
   driver killed between starting a job and writing its id finds the job again;
3. the table: once a case's run has ended, its best kernel is timed beside the baseline in the
   same rounds (comparing.compare_kernels), which gives the speedup its interval.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

import accelopt_mcp
from accelopt_mcp.backends.base import Baseline
from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.comparing import compare_kernels
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.jobs import FINAL_STATES, JobManager, OptimizeRequest
from accelopt_mcp.engine.runs import worker_id_of
from accelopt_mcp.models import Evaluation, Task
from accelopt_mcp.profiling import profile_kernel
from accelopt_mcp.store.base import KernelStore, SuiteRecord
from accelopt_mcp.suites.cases import discover_cases
from accelopt_mcp.suites.table import (
    KernelFigures,
    SpeedupFigure,
    SuiteCase,
    geomeans,
)
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

Say = Callable[[str], None]
_POLL_S = 1.0


class SuiteSpec(BaseModel):
    """A suite record's spec: how it runs, where, and its cases."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    preset: str | None = None
    settings: dict[str, Any]
    """The OptimizeConfig every case runs with."""
    baseline_only: bool = False
    parallel: int = 1
    """How many cases optimize at once."""
    about: dict[str, str] = Field(default_factory=dict)
    """What the table was measured on and with: hardware, peaks, models, code version."""
    cases: list[SuiteCase] = Field(default_factory=list)
    driver: str | None = None
    """The process driving it now or last (host|pid|start token, as a run's worker_id)."""

    def config(self) -> OptimizeConfig:
        return OptimizeConfig.model_validate(self.settings)


def spec_of(record: SuiteRecord) -> SuiteSpec:
    return SuiteSpec.model_validate(record.spec)


def code_version() -> str:
    """The package version, and the git commit where it runs from a checkout."""
    version = accelopt_mcp.__version__
    root = Path(accelopt_mcp.__file__).resolve().parent.parent
    if (root / ".git").exists():
        try:
            done = subprocess.run(
                ["git", "-C", str(root), "describe", "--always", "--dirty"],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError):
            return version
        if done.returncode == 0 and done.stdout.strip():
            return f"{version} ({done.stdout.strip()})"
    return version


def _models(config: OptimizeConfig) -> str:
    """Which model each role uses, as the models config says."""
    from accelopt_mcp.llm import load_role_configs
    from accelopt_mcp.llm.config import ROLES

    try:
        roles = load_role_configs(Path(config.models_config) if config.models_config else None)
    except (ValueError, OSError) as exc:
        return f"unknown ({exc})"
    return ", ".join(f"{role}: {roles.for_role(role).model}" for role in ROLES)


def create_suite(
    store: KernelStore,
    root: Path,
    *,
    name: str,
    source: str,
    config: OptimizeConfig,
    preset: str | None,
    baseline_only: bool,
    parallel: int = 1,
) -> SuiteRecord:
    """Store a new suite over the cases of `root` (nothing runs yet: run_suite does)."""
    if parallel < 1:
        raise ValueError(f"--parallel must be at least 1, got {parallel}")
    cases = discover_cases(root)
    about = {
        "hardware": backend_info(config.backend).name,
        "settings": (
            f"preset {preset or 'quick'}: T={config.iterations} B={config.beam} "
            f"N={config.plans} K={config.attempts}, backend {config.backend}"
        ),
        "code version": code_version(),
    }
    if not baseline_only:
        about["models"] = _models(config)
    spec = SuiteSpec(
        preset=preset,
        settings=config.model_dump(mode="json"),
        baseline_only=baseline_only,
        parallel=parallel,
        about=about,
        cases=cases,
    )
    record = SuiteRecord(
        id=str(uuid.uuid4()),
        name=name,
        source=source,
        backend=config.backend,
        status="running",
        spec=spec.model_dump(mode="json"),
    )
    return store.put_suite(record)


class SuiteDriver:
    """Drives one stored suite to its end (or to where it was stopped)."""

    def __init__(
        self,
        store: KernelStore,
        suite_id: str,
        *,
        store_url: str | None = None,
        say: Say | None = None,
        check_llm: bool = True,
        output_dir: Path | None = None,
    ) -> None:
        record = store.get_suite(suite_id)
        if record is None:
            raise LookupError(f"no suite {suite_id!r}; `accelopt suite list` shows them")
        self.store = store
        self.store_url = store_url
        self.record = record
        self.spec = spec_of(record)
        self.config = self.spec.config()
        self.say: Say = say or (lambda _line: None)
        self.check_llm = check_llm
        self.output_dir = output_dir
        self.peaks: dict[str, str] = {}

    def save(self, status: str | None = None) -> None:
        """Write the suite as this driver has it. A cancel stored meanwhile (cancel_suite
        writes the record from elsewhere) is kept: the driver's spec is the whole truth about
        the cases, the stored status about whether to go on."""
        if status != "cancelled" and self.cancelled():
            status = "cancelled"
        self.record = self.store.put_suite(
            self.record.model_copy(
                update={
                    "spec": self.spec.model_dump(mode="json"),
                    "status": status or self.record.status,
                }
            )
        )

    def cancelled(self) -> bool:
        """Whether someone cancelled the suite (cancel_suite) since it started here."""
        stored = self.store.get_suite(self.record.id)
        return stored is not None and stored.status == "cancelled"

    # ------------------------------------------------------------------ the steps

    def run(self) -> SuiteRecord:
        """Every step from where the suite stands; the record as it ends ('completed', or
        'cancelled' with the cases not run marked so)."""
        if not self.cancelled():
            self.spec.driver = worker_id_of(os.getpid())
            self.save("running")
            self.profile_baselines()
            if not self.spec.baseline_only:
                self.optimize()
        if self.cancelled():
            for case in self.spec.cases:
                case.ended = case.ended or "cancelled before it ran"
            self.save("cancelled")
            return self.record
        ended = all(case.ended is not None for case in self.spec.cases)
        self.save("completed" if ended else "interrupted")
        return self.record

    def profile_baselines(self) -> None:
        for case in self.spec.cases:
            if case.baseline is not None or case.ended is not None:
                continue
            if self.cancelled():
                return
            self.say(f"{case.key}: profiling the baseline")
            try:
                task = self._task(case)
                solution = load_solution(
                    Path(case.kernel_path), task, target_hardware=self._hardware()
                )
                outcome = profile_kernel(
                    task,
                    solution,
                    backend=self.config.backend,
                    config=self.config.benchmark,
                    store=self.store,
                    cluster=self.config.cluster,
                )
            except (ValueError, OSError, LookupError) as exc:
                case.ended = f"could not start: {exc}"
                case.error = str(exc)
                self.save()
                continue
            case.definition_name = task.definition.name
            case.baseline = figures_of(outcome.evaluation, outcome.solution_id)
            if self.spec.baseline_only:
                case.ended = "baseline only"
            elif case.baseline.status != "PASSED":
                case.ended = f"baseline {case.baseline.status}"
            self._note_peaks(outcome.evaluation)
            self.save()
            self.say(f"{case.key}: baseline {_short(case.baseline)}")

    def optimize(self) -> None:
        open_cases = [c for c in self.spec.cases if c.ended is None]
        if not open_cases:
            return
        with JobManager(
            self.store_url, output_dir=self.output_dir, max_parallel_jobs=self.spec.parallel
        ) as jobs:
            for case in open_cases:
                if self.cancelled():
                    break
                if case.run_id is None:
                    case.run_id = self._started_before(case)
                if case.run_id is None:
                    try:
                        case.run_id = jobs.start(
                            OptimizeRequest(
                                kernel_path=case.kernel_path,
                                task_path=case.task_path,
                                config=self.config,
                                suite_case=f"{self.record.id}/{case.key}",
                            ),
                            check_llm=self.check_llm,
                        )
                    except (ValueError, OSError, RuntimeError, LookupError) as exc:
                        # This case cannot run (its task, its backend here, its LLM); the
                        # others still can, and the table says why this one has no best.
                        case.ended = f"could not start: {exc}"
                        case.error = str(exc)
                        self.save()
                        continue
                    self.say(f"{case.key}: run {case.run_id} started")
                    self.save()
                elif jobs.resume_if_interrupted(case.run_id):
                    self.say(f"{case.key}: run {case.run_id} resumed")
            waiting = {c.run_id: c for c in open_cases if c.run_id is not None}
            while waiting:
                if self.cancelled():
                    for run_id in waiting:
                        jobs.cancel(run_id)
                for run_id, case in list(waiting.items()):
                    status = jobs.status(run_id)
                    if status.state == "interrupted":
                        jobs.resume_if_interrupted(run_id)
                    if status.state not in FINAL_STATES:
                        continue
                    del waiting[run_id]
                    self.finish_case(case, status.state, status.elapsed_s)
                    self.save()
                    self.say(f"{case.key}: {case.ended}, best {_short(case.best)}")
                if waiting:
                    time.sleep(_POLL_S)

    def finish_case(self, case: SuiteCase, state: str, elapsed_s: float) -> None:
        """A case whose run has ended: its costs, its best, and the best timed beside the
        baseline (elapsed_s: the run's own time, not the time it waited in the queue)."""
        fill_run_figures(self.store, case)
        case.wall_s = elapsed_s
        case.ended = state
        run = self.store.get_run(case.run_id or "")
        if run is None or case.baseline is None or case.baseline.solution_id is None:
            return
        best_id = run.best_solution_id or run.initial_solution_id
        if best_id is None:
            return
        if best_id == case.baseline.solution_id or best_id == run.initial_solution_id:
            # No attempt beat the baseline: the best is the baseline itself.
            case.best = case.baseline.model_copy()
            case.speedup = SpeedupFigure(speedup=1.0, ci_low=1.0, ci_high=1.0, beside=True)
            return
        best = self.store.get_solution(best_id)
        baseline = self.store.get_solution(case.baseline.solution_id)
        if best is None or baseline is None:
            return
        try:
            comparison = compare_kernels(
                self._task(case),
                [
                    Baseline(label="baseline", solution=baseline.solution),
                    Baseline(label="best", solution=best.solution),
                ],
                backend=self.config.backend,
                config=self.config.benchmark,
                cluster=self.config.cluster,
            )
        except (ValueError, OSError, RuntimeError) as exc:
            # The speedup then comes from the two medians, marked not timed beside.
            case.error = f"the best could not be timed beside the baseline: {exc}"
            comparison = None
        if comparison is None:
            self._speedup_from_medians(case, best_id)
            return
        measured = {k.label: k.evaluation for k in comparison.kernels}
        if "best" in measured:
            case.best = figures_of(measured["best"], best_id)
        for pair in comparison.pairs:
            if {pair.kernel, pair.baseline} != {"baseline", "best"}:
                continue
            if pair.kernel == "best":  # the best is the faster one
                low, high = pair.ci_low, pair.ci_high
                figure = SpeedupFigure(
                    speedup=pair.speedup, ci_low=low, ci_high=high, beside=comparison.interleaved
                )
            else:  # measured slower than the baseline here: the inverse
                figure = SpeedupFigure(
                    speedup=1 / pair.speedup if pair.speedup else 0.0,
                    # 1/inf is 0: an interval with no upper bound has no lower one inverted.
                    ci_low=1 / pair.ci_high if pair.ci_high else 0.0,
                    ci_high=1 / pair.ci_low if pair.ci_low else None,
                    beside=comparison.interleaved,
                )
            case.speedup = figure
        if case.speedup is None:
            self._speedup_from_medians(case, best_id)

    def _speedup_from_medians(self, case: SuiteCase, best_id: str) -> None:
        """The best's figures from its stored profile, and the ratio of the two medians (no
        interval: not timed in the same rounds)."""
        if case.best is None:
            for profile in self.store.list_profiles(solution_id=best_id, run_id=case.run_id):
                if profile.eval_status == "PASSED":
                    case.best = figures_of(profile.evaluation, best_id)
                    break
        base_ms = case.baseline.latency_ms if case.baseline else None
        if case.best is not None and case.best.latency_ms and base_ms:
            case.speedup = SpeedupFigure(speedup=base_ms / case.best.latency_ms)

    # ------------------------------------------------------------------ helpers

    def _note_peaks(self, evaluation: Evaluation) -> None:
        """The hardware and the peaks the percents are against, gathered over the cases (each
        evaluation names the compute peak that binds it: matmul for one, vector for
        another)."""
        counters = evaluation.hardware_counters
        if "peak_gflops" not in counters:
            return
        self.spec.about["hardware"] = evaluation.environment.hardware
        cores = counters.get("peak_cores")
        engine = "fp32 matmul" if counters.get("peak_matmul", 1.0) >= 0.5 else "elementwise"
        self.peaks[engine] = f"{engine} {counters['peak_gflops']:.3g} GFLOP/s"
        if "peak_gbytes_per_s" in counters:
            self.peaks["memory"] = f"memory {counters['peak_gbytes_per_s']:.3g} GB/s"
        where = f" ({cores:g} core{'s' if cores != 1 else ''})" if cores else ""
        order = ("fp32 matmul", "elementwise", "memory")
        shown = [self.peaks[k] for k in order if k in self.peaks]
        self.spec.about["peaks"] = ", ".join(shown) + where

    def _task(self, case: SuiteCase) -> Task:
        return load_task(Path(case.task_path))

    def _hardware(self) -> list[str]:
        return list(backend_info(self.config.backend).target_hardware)

    def _started_before(self, case: SuiteCase) -> str | None:
        """The run a driver killed before it wrote the id had started for this case."""
        if case.definition_name is None:
            return None
        tag = f"{self.record.id}/{case.key}"
        for run in self.store.list_runs(definition_name=case.definition_name, limit=200):
            request = run.config.get("request") if isinstance(run.config, dict) else None
            if isinstance(request, dict) and request.get("suite_case") == tag:
                return run.id
        return None


def figures_of(evaluation: Evaluation, solution_id: str | None) -> KernelFigures:
    counters = evaluation.hardware_counters
    percent = counters.get("roofline_pct_of_peak")
    latency = evaluation.performance.latency_ms if evaluation.performance else None
    return KernelFigures(
        solution_id=solution_id,
        latency_ms=latency,
        percent_of_peak=percent,
        status=str(evaluation.status),
        flags=list(evaluation.flags),
    )


def fill_run_figures(store: KernelStore, case: SuiteCase) -> None:
    """The case's LLM calls, tokens and cost, from its run as stored (its wall time is the
    run's own elapsed time, which finish_case takes from the job's status: the row's
    created..updated span would count the time it waited in the queue)."""
    if case.run_id is None:
        return
    run = store.get_run(case.run_id)
    if run is None:
        return
    case.tokens_in = run.tokens_in
    case.tokens_out = run.tokens_out
    case.cost_usd = run.cost_usd
    case.llm_calls = len(store.list_llm_calls(case.run_id))


def _short(figures: KernelFigures | None) -> str:
    if figures is None:
        return "-"
    if figures.status != "PASSED":
        return figures.status
    latency = f"{figures.latency_ms:.3g} ms" if figures.latency_ms else "-"
    if figures.percent_of_peak is None:
        return latency
    return f"{latency}, {figures.percent_of_peak:.1f}% of peak"


__all__ = [
    "SuiteDriver",
    "SuiteSpec",
    "create_suite",
    "geomeans",
    "spec_of",
]

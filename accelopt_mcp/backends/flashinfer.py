"""The `flashinfer` backend: Triton/CUDA/Python kernels on NVIDIA GPUs through flashinfer-bench.

flashinfer-bench 0.1.2 (the optional extra `accelopt-mcp[flashinfer]`) does the work: our
Definition/Workload/Solution are written as a FlashInfer-Trace directory, its Benchmark runs in a
sandboxed child process, and its Evaluation (the same schema as ours) comes back with roofline
counters added. It needs torch and CUDA; without a GPU the backend says so and refuses to run.

Tolerances and timing follow flashinfer-bench's defaults (element-wise rtol/atol 1e-2, 10 warm-up
runs, 50 iterations, 3 trials) unless the BenchmarkConfig sets them explicitly.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from accelopt_mcp.backends.base import (
    Availability,
    Backend,
    BackendInfo,
    BackendUnavailableError,
    Baseline,
)
from accelopt_mcp.backends.breakdown import breakdown_from, clean_text
from accelopt_mcp.backends.flashinfer_runner import FlashInferRunResult, FlashInferSettings
from accelopt_mcp.backends.roofline import is_above_peak, peak_counters, peak_for, percent_of_peak
from accelopt_mcp.isolation.sandbox import (
    SandboxResult,
    read_result_file,
    remove_abandoned_work_dirs,
    run_sandboxed,
    work_dir_prefix,
)
from accelopt_mcp.models import (
    BenchmarkConfig,
    Environment,
    Evaluation,
    EvaluationStatus,
    Language,
    Solution,
    Task,
    Trace,
)

INSTALL_HINT = "pip install 'accelopt-mcp[flashinfer]' on a host with an NVIDIA GPU and CUDA"
NO_CUDA = "flashinfer-bench needs CUDA: No CUDA devices available on this host"
FLASHINFER_LANGUAGES = frozenset(
    {Language.PYTHON, Language.TRITON, Language.CPP, Language.CUDA, Language.TILELANG}
)
_CUDA_PASSTHROUGH = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CC", "CXX")
_CUDA_ADDRESS_SPACE_MB = 1 << 24  # 16 TiB
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_PROBE = """
import importlib.util, json
found = {m: importlib.util.find_spec(m) is not None for m in ("torch", "flashinfer_bench")}
report = {"found": found, "cuda": False, "devices": [], "versions": {}}
if all(found.values()):
    import torch
    from importlib.metadata import version
    report["versions"] = {"torch": torch.__version__,
                          "flashinfer-bench": version("flashinfer-bench")}
    report["cuda"] = torch.cuda.is_available()
    if report["cuda"]:
        count = torch.cuda.device_count()
        report["devices"] = [torch.cuda.get_device_name(i) for i in range(count)]
print(json.dumps(report))
"""


class _Probe(BaseModel):
    found: dict[str, bool]
    cuda: bool
    devices: list[str]
    versions: dict[str, str]


def map_status(value: str) -> EvaluationStatus:
    """flashinfer-bench's status names are ours; anything else is a version mismatch."""
    try:
        return EvaluationStatus(value)
    except ValueError:
        known = ", ".join(s.value for s in EvaluationStatus)
        raise ValueError(
            f"flashinfer-bench returned status {value!r}, unknown to accelopt-mcp ({known}); "
            "is flashinfer-bench 0.1.2 installed?"
        ) from None


def write_trace_set(root: Path, task: Task, solution: Solution) -> dict[str, Path]:
    """Lay out one definition, its workload and a solution as flashinfer-bench reads them."""
    if solution.spec.language not in FLASHINFER_LANGUAGES:
        raise ValueError(
            f"solution {solution.name!r} is written in {solution.spec.language.value!r}; "
            f"flashinfer-bench runs {sorted(lang.value for lang in FLASHINFER_LANGUAGES)}"
        )
    if solution.definition != task.definition.name:
        raise ValueError(
            f"solution {solution.name!r} implements {solution.definition!r}, "
            f"not the task's definition {task.definition.name!r}"
        )
    definition = task.definition
    group = _file_name(definition.op_type)
    stem = _file_name(definition.name)
    paths = {
        "definition": root / "definitions" / group / f"{stem}.json",
        "workload": root / "workloads" / group / f"{stem}.jsonl",
        "solution": root / "solutions" / group / stem / f"{_file_name(solution.name)}.json",
    }
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    paths["definition"].write_text(definition.to_json(), encoding="utf-8")
    workload_trace = Trace(definition=definition.name, workload=task.workload)
    paths["workload"].write_text(
        workload_trace.model_dump_json(exclude_unset=True) + "\n", encoding="utf-8"
    )
    paths["solution"].write_text(solution.to_json(), encoding="utf-8")
    return paths


class FlashInferBackend(Backend):
    info = BackendInfo(
        name="flashinfer",
        summary="NVIDIA GPUs: Triton/CUDA/Python solutions through FlashInfer-Bench",
        prompt_family="gpu",
        device_kind="gpu",
        target_hardware=("NVIDIA_H100", "NVIDIA_H200"),
    )

    def __init__(
        self,
        device: str = "cuda:0",
        *,
        python: str = sys.executable,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        """device: the GPU this backend runs on ('cuda:N'); the child sees only that GPU.
        python: interpreter of the child (one with torch and flashinfer-bench installed)."""
        match = re.fullmatch(r"cuda:(\d+)", device)
        if match is None:
            raise ValueError(f"device must look like 'cuda:0', got {device!r}")
        self.device = device
        self.gpu_index = int(match.group(1))
        self.python = python
        self.extra_env = dict(extra_env or {})
        self._probe: _Probe | None = None
        remove_abandoned_work_dirs("flashinfer")

    def availability(self) -> Availability:
        probe = self._host_probe()
        missing = [name for name, ok in probe.found.items() if not ok]
        if missing:
            what = " and ".join(
                "flashinfer-bench" if m == "flashinfer_bench" else m for m in missing
            )
            return Availability(
                name=self.name, usable=False, reason=f"{what} not installed: {INSTALL_HINT}"
            )
        if not probe.cuda:
            return Availability(name=self.name, usable=False, reason=NO_CUDA)
        if self.gpu_index >= len(probe.devices):
            return Availability(
                name=self.name,
                usable=False,
                reason=f"{self.device} does not exist: this host has {len(probe.devices)} GPU(s)",
            )
        versions = ", ".join(f"{k} {v}" for k, v in probe.versions.items())
        return Availability(
            name=self.name,
            usable=True,
            hardware=probe.devices[self.gpu_index],
            reason=f"{probe.devices[self.gpu_index]} ({self.device}); {versions}",
        )

    def _host_probe(self) -> _Probe:
        if self._probe is None:
            done = run_sandboxed(
                [self.python, "-c", _PROBE],
                timeout_s=120,
                memory_limit_mb=_CUDA_ADDRESS_SPACE_MB,
                env=self._child_env(),
            )
            if not done.ok:
                raise BackendUnavailableError(
                    f"could not probe for flashinfer-bench ({done.describe()}): "
                    f"{done.stderr.strip()[-1000:]}"
                )
            self._probe = _Probe.model_validate_json(done.stdout.strip().splitlines()[-1])
        return self._probe

    def _evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig, baselines: Sequence[Baseline]
    ) -> Evaluation:
        availability = self.availability()
        if not availability.usable:
            raise BackendUnavailableError(availability.reason)
        settings = FlashInferSettings(
            definition=task.definition.name,
            solution=solution.name,
            workload_uuid=task.workload.uuid,
            benchmark=benchmark_settings(config),
        )
        with tempfile.TemporaryDirectory(prefix=work_dir_prefix("flashinfer")) as scratch:
            work = Path(scratch)
            # flashinfer-bench enforces its own per-solution timeout; ours bounds the whole run
            # (baseline, build, trials), so it is generous.
            sandbox, result_file = self._run_runner(
                work, task, solution, settings, timeout_s=max(600.0, 3 * config.timeout_seconds)
            )
            if not result_file.is_file():
                environment = Environment(hardware=availability.hardware or self.device)
                return Evaluation(
                    status=EvaluationStatus.TIMEOUT
                    if sandbox.timed_out
                    else EvaluationStatus.RUNTIME_ERROR,
                    environment=environment,
                    timestamp=_now(),
                    log=f"flashinfer-bench's process {sandbox.describe()}:\n"
                    f"{sandbox.stderr[-4000:]}",
                )
            try:
                result = FlashInferRunResult.model_validate_json(
                    read_result_file(result_file) or ""
                )
            except (ValidationError, RecursionError):  # oversized or garbled
                return Evaluation(
                    status=EvaluationStatus.RUNTIME_ERROR,
                    environment=Environment(hardware=availability.hardware or self.device),
                    timestamp=_now(),
                    log="flashinfer-bench's process left an unreadable or oversized result "
                    f"file ({sandbox.describe()}):\n{sandbox.stderr[-4000:]}",
                )
        if result.evaluation is not None:
            evaluation = to_evaluation(result.evaluation, task)
            if config.breakdown and evaluation.passed:
                # Only now, the verdict read and checked: the breakdown loads the solution into
                # its own process, whose output is never read for the verdict.
                evaluation = with_breakdown(
                    evaluation, self._breakdown(task, solution, config, settings)
                )
            return evaluation
        error = result.error or "no result"
        if error.startswith(("flashinfer-bench not installed", "No CUDA")):
            raise BackendUnavailableError(f"flashinfer backend: {error}. {INSTALL_HINT}")
        return Evaluation(
            status=EvaluationStatus.RUNTIME_ERROR,
            environment=Environment(hardware=availability.hardware or self.device),
            timestamp=_now(),
            log=error,
            flags=["backend_error"],
        )

    def _breakdown(
        self, task: Task, solution: Solution, config: BenchmarkConfig, settings: FlashInferSettings
    ) -> FlashInferRunResult:
        """The breakdown of one call, from a runner invocation of its own (own work directory,
        own result file) started after the evaluation's result was read: the solution runs
        inside that process and may rewrite anything it writes, so only its breakdown (or why
        there is none) is kept, and with_breakdown validates that."""
        with tempfile.TemporaryDirectory(prefix=work_dir_prefix("flashinfer")) as scratch:
            sandbox, result_file = self._run_runner(
                Path(scratch),
                task,
                solution,
                settings.model_copy(update={"breakdown": True}),
                # Two calls (a warm-up that may compile, then the traced one) and torch's start.
                timeout_s=max(300.0, 2 * config.timeout_seconds),
            )
            raw = None if sandbox.timed_out else read_result_file(result_file)
            try:
                found = FlashInferRunResult.model_validate_json(raw or "")
            except (ValidationError, RecursionError):  # missing, oversized or garbled
                return FlashInferRunResult(
                    breakdown_error=f"the breakdown's process left no readable result "
                    f"({sandbox.describe()})"
                )
        return FlashInferRunResult(breakdown=found.breakdown, breakdown_error=found.breakdown_error)

    def _run_runner(
        self,
        work: Path,
        task: Task,
        solution: Solution,
        settings: FlashInferSettings,
        *,
        timeout_s: float,
    ) -> tuple[SandboxResult, Path]:
        """One jailed invocation of flashinfer_runner in `work`: the trace set and the settings
        written there, the process run; returns how it ended and where its result file is
        (which it may not have written)."""
        root = work / "traces"
        write_trace_set(root, task, solution)
        settings_file, result_file = work / "settings.json", work / "result.json"
        settings_file.write_text(settings.model_dump_json(), encoding="utf-8")
        sandbox = run_sandboxed(
            [
                self.python,
                "-m",
                "accelopt_mcp.backends.flashinfer_runner",
                str(root),
                str(settings_file),
                str(result_file),
            ],
            timeout_s=timeout_s,
            # CUDA reserves virtual address space far beyond physical memory and fails to
            # start under an address-space limit, so the limit here is effectively lifted.
            memory_limit_mb=_CUDA_ADDRESS_SPACE_MB,
            cwd=work,
            env=self._child_env(),
            max_processes=4096,  # torch and triton compile with pools of workers
        )
        return sandbox, result_file

    def _child_env(self) -> dict[str, str]:
        # Only the chosen GPU is visible, so flashinfer-bench (which uses every GPU it sees)
        # stays on it.
        # The sandbox's allowlist drops library paths, which CUDA installs outside the wheels need.
        passed = {k: os.environ[k] for k in _CUDA_PASSTHROUGH if k in os.environ}
        return {**passed, "CUDA_VISIBLE_DEVICES": str(self.gpu_index), **self.extra_env}


def benchmark_settings(config: BenchmarkConfig) -> dict[str, float | int]:
    """flashinfer-bench BenchmarkConfig arguments: only what the caller set explicitly."""
    explicit = config.model_fields_set
    settings: dict[str, float | int] = {}
    if "warmup_runs" in explicit:
        settings["warmup_runs"] = config.warmup_runs
    if "iterations" in explicit:
        settings["iterations"] = config.iterations
    if "seeds" in explicit:
        settings["num_trials"] = len(config.seeds)
    if "rtol" in explicit:
        settings["rtol"] = float(config.rtol)
    if "atol" in explicit:
        settings["atol"] = float(config.atol) if config.atol > 0 else 1e-8
    if "timeout_seconds" in explicit:
        settings["timeout_seconds"] = max(1, round(config.timeout_seconds))
    return settings


def to_evaluation(raw: dict[str, Any], task: Task) -> Evaluation:
    """flashinfer-bench's Evaluation as ours, with roofline counters when the task has work
    figures and the GPU is in the peak table."""
    evaluation = Evaluation.model_validate({**raw, "status": map_status(str(raw.get("status")))})
    performance = evaluation.performance
    # The FlashInfer runner is sandboxed but not jailed (CUDA needs the driver's device nodes and
    # its caches; see the README): every result says so.
    if "not_isolated" not in evaluation.flags:
        evaluation = evaluation.model_copy(update={"flags": [*evaluation.flags, "not_isolated"]})
    if task.roofline is None or performance is None or performance.latency_ms <= 0:
        return evaluation
    try:
        peak = peak_for(evaluation.environment.hardware)
    except ValueError:
        return evaluation
    report = percent_of_peak(performance.latency_ms, task.roofline, peak)
    flags = [*evaluation.flags, *(["above_peak"] if is_above_peak(report) else [])]
    return evaluation.model_copy(
        update={"hardware_counters": peak_counters(report), "flags": flags}
    )


def with_breakdown(evaluation: Evaluation, result: FlashInferRunResult) -> Evaluation:
    """The evaluation with the runner's per-kernel breakdown (validated and capped), or a log
    line saying why there is none."""
    entries = breakdown_from(result.breakdown)
    if entries:
        return evaluation.model_copy(update={"breakdown": entries})
    why = result.breakdown_error or "the profiler saw no device kernel"
    # Written by the process the solution ran in: one printable line, bounded.
    line = f"no time breakdown: {clean_text(why, 300)}"
    return evaluation.model_copy(
        update={"log": f"{evaluation.log}\n{line}" if evaluation.log else line}
    )


def _file_name(name: str) -> str:
    return _SAFE_NAME.sub("_", name).strip("_") or "unnamed"


def _now() -> str:
    return datetime.now(UTC).isoformat()

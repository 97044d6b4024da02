"""The `nki` backend: NKI kernels on AWS Trainium through the Neuron SDK.

On a Trainium host (neuronxcc importable, a /dev/neuron* device, neuron-profile on PATH),
`evaluate` checks the kernel on every seed with `nki.baremetal` and times it from
`neuron-profile` traces (see nki_runner). Without a device there is no latency to report, and an
Evaluation cannot be PASSED without one, so `evaluate` refuses (BackendUnavailableError) and
`simulate` gives a correctness-only SimulationReport from `nki.simulate_kernel` instead.
Everything the kernel does runs in a sandboxed child process.
"""

from __future__ import annotations

import glob
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from accelopt_mcp.backends.base import (
    Availability,
    Backend,
    BackendInfo,
    BackendUnavailableError,
    Baseline,
)
from accelopt_mcp.backends.breakdown import breakdown_from
from accelopt_mcp.backends.neuron_profile import engine_breakdown
from accelopt_mcp.backends.nki_runner import NkiJob, NkiRunResult
from accelopt_mcp.backends.roofline import is_above_peak, peak_counters, percent_of_peak
from accelopt_mcp.isolation.sandbox import (
    SandboxResult,
    read_result_file,
    remove_abandoned_work_dirs,
    run_sandboxed,
    work_dir_prefix,
)
from accelopt_mcp.models import (
    BenchmarkConfig,
    Correctness,
    Environment,
    Evaluation,
    EvaluationStatus,
    Language,
    LatencyStats,
    Performance,
    Solution,
    Task,
)
from accelopt_mcp.tasks.inputs import InputError, stress_scales

INSTALL_HINT = (
    "neuronxcc comes from AWS's Neuron pip repository, not PyPI: pip install neuronx-cc "
    "--extra-index-url=https://pip.repos.neuron.amazonaws.com ; or use a Deep Learning AMI with "
    "the Neuron SDK (its /opt/aws_neuronx_venv_* environments have it)"
)
PROFILER_HINT = (
    "neuron-profile ships in the aws-neuronx-tools package (apt/yum from AWS's Neuron "
    "repository; /opt/aws/neuron/bin on a Neuron DLAMI): put it on PATH or pass neuron_profile="
)
_NKI_DEFAULT_SPREAD = 0.01  # AccelOpt re-measures NKI kernels while (max-min)/min > 1 %
_NKI_DEFAULT_TIMEOUT_S = 900.0  # a compile plus up to 3 x 12 profiled runs
_NKI_DEFAULT_MEMORY_MB = 16384  # neuronxcc alone needs several GiB


_PROBE = "import neuronxcc, neuronxcc.nki; print(getattr(neuronxcc, '__version__', '?'))"
_RUNNER = "accelopt_mcp.backends.nki_runner"


class SimulationReport(BaseModel):
    """Correctness of an NKI kernel in the simulator: no latency, so not an Evaluation."""

    status: EvaluationStatus
    """PASSED here means correct on every seed in the simulator, nothing about speed."""
    correctness: Correctness | None = None
    environment: Environment
    timestamp: str
    log: str = ""
    flags: list[str] = Field(default_factory=lambda: ["latency_unavailable"])

    @property
    def correct(self) -> bool:
        return self.status == EvaluationStatus.PASSED


class _HostState(BaseModel):
    neuronxcc_version: str | None
    neuronxcc_error: str | None
    devices: list[str]
    profiler: str | None


class NkiBackend(Backend):
    info = BackendInfo(
        name="nki",
        summary="AWS Trainium: NKI kernels through the Neuron SDK",
        prompt_family="nki",
        device_kind="neuron",
        target_hardware=("trainium",),
    )

    def __init__(
        self,
        core_id: int = 0,
        *,
        neuron_profile: str = "neuron-profile",
        hardware: str | None = None,
        device_glob: str = "/dev/neuron*",
        python: str = sys.executable,
        extra_env: dict[str, str] | None = None,
        retries: int = 2,
    ) -> None:
        """core_id: the NeuronCore this backend runs on (one evaluation at a time).
        hardware: 'trn1' or 'trn2'; None detects it from the EC2 instance type.
        python: interpreter of the child (one where neuronxcc and accelopt-mcp are installed).
        extra_env: variables added to the child's environment (e.g. PYTHONPATH)."""
        if core_id < 0:
            raise ValueError(f"core_id must be a NeuronCore index >= 0, got {core_id}")
        self.core_id = core_id
        self.neuron_profile = neuron_profile
        self.hardware = hardware
        self.device_glob = device_glob
        self.python = python
        self.extra_env = dict(extra_env or {})
        self.retries = retries
        self._state: _HostState | None = None
        remove_abandoned_work_dirs("nki")

    # ------------------------------------------------------------------ availability

    def availability(self) -> Availability:
        state = self._host_state()
        if state.neuronxcc_version is None:
            return Availability(
                name=self.name,
                usable=False,
                reason=f"neuronxcc is not installed ({state.neuronxcc_error}). {INSTALL_HINT}",
            )
        if not state.devices:
            return Availability(
                name=self.name,
                usable=False,
                reason=(
                    f"neuronxcc {state.neuronxcc_version} is installed but there is no Neuron "
                    f"device ({self.device_glob}): latency needs a trn1/trn2 instance. "
                    "Correctness-only checks run in the NKI simulator: NkiBackend.simulate()"
                ),
            )
        if state.profiler is None:
            return Availability(
                name=self.name,
                usable=False,
                reason=f"{self.neuron_profile!r} not found. {PROFILER_HINT}",
            )
        hardware, how = self._hardware()
        return Availability(
            name=self.name,
            usable=True,
            hardware=hardware,
            reason=(
                f"neuronxcc {state.neuronxcc_version}, {len(state.devices)} Neuron device(s), "
                f"NeuronCore {self.core_id}, {how}"
            ),
        )

    def _host_state(self) -> _HostState:
        if self._state is None:
            probe = run_sandboxed(
                [
                    self.python,
                    "-c",
                    _PROBE,
                ],
                timeout_s=120,
                memory_limit_mb=_NKI_DEFAULT_MEMORY_MB,
                env=self._child_env(),
            )
            version = probe.stdout.strip().splitlines()[-1] if probe.ok and probe.stdout else None
            error = None if version else (_last_line(probe.stderr) or probe.describe())
            path = self._child_env().get("PATH")
            self._state = _HostState(
                neuronxcc_version=version,
                neuronxcc_error=error,
                devices=sorted(glob.glob(self.device_glob)),
                profiler=shutil.which(self.neuron_profile, path=path),
            )
        return self._state

    def _hardware(self) -> tuple[str, str]:
        if self.hardware:
            return self.hardware, f"hardware {self.hardware} as configured"
        try:
            product = Path("/sys/devices/virtual/dmi/id/product_name").read_text().strip()
        except OSError:
            product = ""
        for family in ("trn2", "trn1"):
            if product.startswith(family):
                return family, f"instance type {product}"
        return "trn1", f"instance type {product or 'unknown'}: assuming trn1 (pass hardware=)"

    # ------------------------------------------------------------------ evaluation

    def _evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig, baselines: Sequence[Baseline]
    ) -> Evaluation:
        availability = self.availability()
        if not availability.usable:
            raise BackendUnavailableError(f"nki backend cannot profile here: {availability.reason}")
        result, sandbox = self._run(task, solution, config, mode="device")
        hardware = availability.hardware or "trn1"
        environment = Environment(hardware=hardware, libs=self._libs(result))
        stamp = _now()
        if result is None:
            return Evaluation(
                status=_sandbox_status(sandbox),
                environment=environment,
                timestamp=stamp,
                log=_sandbox_log(sandbox),
            )
        if result.status != EvaluationStatus.PASSED:
            return Evaluation(
                status=result.status,
                environment=environment,
                timestamp=stamp,
                log=result.log,
                correctness=_correctness(result)
                if result.status == EvaluationStatus.INCORRECT_NUMERICAL
                else None,
                flags=result.flags,
            )
        latencies = result.latencies_ms
        median = statistics.median(latencies)
        counters = dict(result.counters)
        # From the profile of the steadiest round (the counters the planner sees).
        breakdown = breakdown_from(engine_breakdown(counters, median)) if config.breakdown else []
        # The NKI runner is sandboxed (limits, no secrets in its environment) but not jailed:
        # the Neuron runtime needs the device nodes and the SDK's own files (see the README).
        flags = [*result.flags, "no_reference_latency", "not_isolated"]
        if task.roofline is not None:
            report = percent_of_peak(median, task.roofline, hardware)
            counters.update(peak_counters(report))
            if is_above_peak(report):
                flags.append("above_peak")
        return Evaluation(
            status=EvaluationStatus.PASSED,
            environment=environment,
            timestamp=stamp,
            log=result.log,
            correctness=_correctness(result),
            # The numpy reference runs on the host, so there is no reference latency on the
            # device to compare with; speedups are taken against the baseline kernel instead.
            performance=Performance(latency_ms=median),
            latency_stats=LatencyStats(
                mean_ms=statistics.fmean(latencies),
                median_ms=median,
                min_ms=min(latencies),
                max_ms=max(latencies),
                stdev_ms=statistics.pstdev(latencies),
                relative_spread=(max(latencies) - min(latencies)) / min(latencies),
                runs=len(latencies),
                measurement_rounds=result.measurement_rounds,
            ),
            hardware_counters=counters,
            breakdown=breakdown,
            flags=flags,
        )

    def simulate(
        self, task: Task, solution: Solution, config: BenchmarkConfig | None = None
    ) -> SimulationReport:
        """Correctness on every seed in the NKI simulator; needs neuronxcc but no device."""
        state = self._host_state()
        if state.neuronxcc_version is None:
            raise BackendUnavailableError(
                f"nki simulator needs neuronxcc ({state.neuronxcc_error}). {INSTALL_HINT}"
            )
        result, sandbox = self._run(task, solution, config or BenchmarkConfig(), mode="simulate")
        environment = Environment(hardware="nki-simulator", libs=self._libs(result))
        if result is None:
            return SimulationReport(
                status=_sandbox_status(sandbox),
                environment=environment,
                timestamp=_now(),
                log=_sandbox_log(sandbox),
            )
        keeps_errors = result.status in (
            EvaluationStatus.PASSED,
            EvaluationStatus.INCORRECT_NUMERICAL,
        )
        return SimulationReport(
            status=result.status,
            correctness=_correctness(result) if keeps_errors else None,
            environment=environment,
            timestamp=_now(),
            log=result.log,
            flags=sorted({"latency_unavailable", *result.flags}),
        )

    def _run(
        self, task: Task, solution: Solution, config: BenchmarkConfig, *, mode: str
    ) -> tuple[NkiRunResult | None, SandboxResult]:
        if solution.spec.language != Language.NKI:
            raise ValueError(
                f"solution {solution.name!r} is written in {solution.spec.language.value!r}; "
                "the nki backend runs solutions whose spec.language is 'nki'"
            )
        explicit = config.model_fields_set
        try:
            scales = stress_scales(task.definition.reference)
        except InputError as exc:
            # A malformed STRESS_SCALES is the task's fault, reported as a task_error is.
            raise ValueError(f"task {task.definition.name!r} cannot be run: {exc}") from None
        with tempfile.TemporaryDirectory(prefix=work_dir_prefix("nki")) as scratch:
            work = Path(scratch)
            task_file = work / "task.py"
            task_file.write_text(task.definition.reference, encoding="utf-8")
            kernel_dir = work / "kernel"
            for source in solution.sources:
                target = kernel_dir / source.path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(source.content, encoding="utf-8")
            artifacts = work / "artifacts"
            artifacts.mkdir()
            job = NkiJob(
                task_file=str(task_file),
                kernel_dir=str(kernel_dir),
                kernel_file=str(kernel_dir / solution.entry_file),
                entry_symbol=solution.entry_symbol,
                mode="device" if mode == "device" else "simulate",
                seeds=config.seeds,
                rtol=config.rtol,
                atol=config.atol,
                nonfinite=config.nonfinite,
                warmup_runs=config.warmup_runs,
                iterations=config.iterations,
                max_relative_spread=config.max_relative_spread
                if "max_relative_spread" in explicit
                else _NKI_DEFAULT_SPREAD,
                max_measurement_rounds=config.max_measurement_rounds,
                artifact_dir=str(artifacts),
                neuron_profile=self.neuron_profile,
                retries=self.retries,
                # Checked like the seeds, never timed (nki_runner._check_stress).
                stress_scales=scales,
            )
            job_file, result_file = work / "job.json", work / "result.json"
            job_file.write_text(job.model_dump_json(), encoding="utf-8")
            sandbox = run_sandboxed(
                [
                    self.python,
                    "-m",
                    "accelopt_mcp.backends.nki_runner",
                    str(job_file),
                    str(result_file),
                ],
                timeout_s=config.timeout_seconds
                if "timeout_seconds" in explicit
                else _NKI_DEFAULT_TIMEOUT_S,
                memory_limit_mb=config.memory_limit_mb
                if "memory_limit_mb" in explicit
                else _NKI_DEFAULT_MEMORY_MB,
                cwd=work,
                env=self._child_env(),
                # neuronx-cc compiles with many threads and helper processes; 1024 still stops
                # a fork bomb.
                max_processes=1024,
            )
            raw = None if sandbox.timed_out else read_result_file(result_file)
            try:
                result = NkiRunResult.model_validate_json(raw or "")
            except (ValidationError, RecursionError):  # missing, oversized or forged
                return None, sandbox
        if "backend_error" in result.flags:
            raise BackendUnavailableError(f"nki backend: {result.log} {INSTALL_HINT}")
        if "task_error" in result.flags:
            raise ValueError(f"task {task.definition.name!r} cannot be run: {result.log}")
        return result, sandbox

    def _child_env(self) -> dict[str, str]:
        # The Neuron runtime's libraries live outside the Python environment on some installs.
        passed = {k: os.environ[k] for k in ("LD_LIBRARY_PATH",) if k in os.environ}
        return {
            **passed,
            # AccelOpt's settings: no automatic downcasting, one NeuronCore per evaluation.
            "NEURON_CC_FLAGS": "--auto-cast=none",
            "NEURON_RT_NUM_CORES": "1",
            "NEURON_RT_VISIBLE_CORES": str(self.core_id),
            **self.extra_env,
        }

    @staticmethod
    def _libs(result: NkiRunResult | None) -> dict[str, str]:
        version = result.neuronxcc_version if result else None
        return {"neuronxcc": version} if version else {}


def _correctness(result: NkiRunResult) -> Correctness:
    nan = float("nan")
    return Correctness(
        max_relative_error=nan if result.max_relative_error is None else result.max_relative_error,
        max_absolute_error=nan if result.max_absolute_error is None else result.max_absolute_error,
        extra={"l2_relative_error": result.l2_relative_error},
    )


def _sandbox_status(sandbox: SandboxResult) -> EvaluationStatus:
    return EvaluationStatus.TIMEOUT if sandbox.timed_out else EvaluationStatus.RUNTIME_ERROR


def _sandbox_log(sandbox: SandboxResult) -> str:
    parts = [f"the profiling process {sandbox.describe()} before reporting a result"]
    if sandbox.memory_exceeded:
        parts.append("it ran out of memory")
    if sandbox.stderr.strip():
        parts.append(f"stderr:\n{sandbox.stderr[-4000:]}")
    return "\n".join(parts)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _now() -> str:
    return datetime.now(UTC).isoformat()

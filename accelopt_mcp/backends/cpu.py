"""The `cpu` backend: Python (NumPy / PyTorch-CPU) kernels checked and timed on this host.

Each evaluation is one sandboxed child (`cpu_runner`) in its own temp dir; this side writes the
job, maps how the child ended onto an Evaluation, and adds the figures the planner reads.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import os
import platform
import secrets
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from accelopt_mcp.backends.base import (
    Availability,
    Backend,
    BackendInfo,
    BackendUnavailableError,
)
from accelopt_mcp.isolation.jail import MODE_VARIABLE, jail_status
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
    Definition,
    Environment,
    Evaluation,
    EvaluationStatus,
    Language,
    LatencyStats,
    Performance,
    Solution,
    Task,
)
from accelopt_mcp.pysource import parse_python, source_imports_any
from accelopt_mcp.redaction import redact
from accelopt_mcp.tasks.inputs import InputError, input_plan

log = logging.getLogger(__name__)
RUNNER_MODULE = "accelopt_mcp.backends.cpu_runner"
TORCH = ("torch",)
MAX_LOG_CHARS = 16_000
STDERR_TAIL_CHARS = 4_000
# Generous per-core peaks (5 GHz, two 512-bit FMA units in fp32; a very fast memory system):
# a kernel claiming more is measuring something other than its work.
PEAK_FLOPS_PER_CORE = 5e9 * 64
PEAK_BYTES_PER_S = 200e9
# Keep freed memory in the heap instead of returning it to the OS: otherwise every fresh
# output array of a timed call is a new mmap whose page faults (zeroing, on a loaded host)
# cost as much as a small kernel and vary from call to call.
TIMING_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 31),
    "MALLOC_TOP_PAD_": str(64 << 20),
}


def host_hardware() -> str:
    """e.g. 'cpu/x86_64/Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz'."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu/{platform.machine()}/{model}"


def reference_style(reference: str) -> str:
    """'nkibench' when the reference draws its own inputs (`get_inputs`), else 'flashinfer'."""
    try:
        module = parse_python(reference)
    except SyntaxError:
        return "flashinfer"
    names = {n.name for n in module.body if isinstance(n, ast.FunctionDef)}
    return "nkibench" if "get_inputs" in names else "flashinfer"


def runner_argv(job: Path, result: Path) -> list[str]:
    # -I: the sandbox dir (where the candidate's files are) is not on sys.path, so a kernel
    # file cannot shadow numpy or our runner.
    return [sys.executable, "-I", "-m", RUNNER_MODULE, str(job), str(result)]


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


class CpuBackend(Backend):
    info = BackendInfo(
        name="cpu",
        summary="this host's CPU: Python/NumPy (or PyTorch-CPU) kernels",
        prompt_family="cpu",
        device_kind="cpu",
        target_hardware=("cpu",),
    )

    def __init__(self, cpus: set[int] | None = None) -> None:
        if cpus is not None:
            usable = os.sched_getaffinity(0)
            if not cpus or not cpus <= usable:
                raise ValueError(
                    f"cpus {sorted(cpus)} must be a non-empty subset of this host's usable "
                    f"cores {sorted(usable)}"
                )
        self.cpus = set(cpus) if cpus else None
        self.hardware = host_hardware()
        remove_abandoned_work_dirs("cpu")
        self.jail = "bwrap" if jail_status().kind == "bwrap" else "none"
        isolation_summary()

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

    def evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig | None = None
    ) -> Evaluation:
        config = config or BenchmarkConfig()
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
        with tempfile.TemporaryDirectory(
            prefix=work_dir_prefix("cpu"), ignore_cleanup_errors=True
        ) as tmp:
            work = Path(tmp)
            try:
                job = self._write_job(work, task, solution, config)
            except (InputError, ValueError) as exc:
                # The task, not the candidate, is at fault; say so instead of blaming the kernel.
                return self._evaluation(
                    EvaluationStatus.RUNTIME_ERROR, f"the task cannot be run: {exc}"
                )
            run = run_sandboxed(
                runner_argv(work / "job.json", work / "result.json"),
                timeout_s=config.timeout_seconds,
                memory_limit_mb=config.memory_limit_mb,
                cwd=work,
                env=TIMING_ENV,
                cpus=self.cpus,
            )
            result = _read_json(work / "result.json")
            if result is not None and result.get("nonce") != job["nonce"]:
                return self._evaluation(
                    EvaluationStatus.RUNTIME_ERROR,
                    _join(
                        [
                            "the result file was not written by the profiler (forged by the "
                            "kernel?); the evaluation is void"
                        ],
                        run,
                    ),
                    flags=["forged_result"],
                )
            stage = (_read_json(work / "progress.json") or {}).get("stage", "start-up")
        return self._to_evaluation(task, config, run, result, stage)

    def _write_job(
        self, work: Path, task: Task, solution: Solution, config: BenchmarkConfig
    ) -> dict[str, Any]:
        definition, workload = task.definition, task.workload
        style = reference_style(definition.reference)
        (work / "reference.py").write_text(definition.reference)
        kernel_dir = work / "solution"
        for source in solution.sources:
            target = kernel_dir / source.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source.content)
        use_torch = source_imports_any(definition.reference, TORCH) or any(
            source_imports_any(s.content, TORCH) for s in solution.sources if s.path.endswith(".py")
        )
        plan = input_plan(definition, workload) if style == "flashinfer" else None
        job = {
            "mode": "evaluate",
            "style": style,
            "reference_path": "reference.py",
            "kernel_dir": "solution",
            "entry_file": solution.entry_file,
            "entry_symbol": solution.entry_symbol,
            "destination_passing_style": solution.spec.destination_passing_style,
            "input_plan": plan,
            "output_plan": _output_plan(definition, workload.axes),
            "use_torch": use_torch,
            "cpus": sorted(self.cpus) if self.cpus else None,
            "memory_limit_mb": config.memory_limit_mb,
            # Added to the jail's own minimal environment (isolation.jail sets the rest, thread
            # counts included): the harness's allocator settings, so both time alike.
            "jail_env": TIMING_ENV,
            "jail": self.jail,
            "nonce": secrets.token_hex(16),
            **config.perf_fields(),
        }
        (work / "job.json").write_text(json.dumps(job))
        return job

    # ------------------------------------------------------------------ results

    def _evaluation(self, status: EvaluationStatus, log: str, **fields: Any) -> Evaluation:
        return Evaluation(
            status=status,
            environment=Environment(
                hardware=self.hardware,
                libs={"python": platform.python_version(), "numpy": np.__version__},
            ),
            timestamp=datetime.now(UTC).isoformat(),
            # A second line of defence: no secret leaves an evaluation, whatever printed it.
            log=_cap(redact(log)),
            **fields,
        )

    def _to_evaluation(
        self,
        task: Task,
        config: BenchmarkConfig,
        run: SandboxResult,
        result: dict[str, Any] | None,
        stage: str,
    ) -> Evaluation:
        if result is None:
            return self._evaluation(*_died(run, stage, config))
        flags = list(dict.fromkeys(result.get("flags", [])))
        isolation = result.get("isolation")
        if isinstance(isolation, dict) and not isolation.get("isolated"):
            flags.append("not_isolated")
        stderr = str(result.get("candidate_stderr") or "").strip()
        if stderr:
            run = run.model_copy(update={"stderr": f"{run.stderr}\n[kernel]\n{stderr}".strip()})
        error = result.get("error")
        if error:
            status = (
                EvaluationStatus.COMPILE_ERROR
                if error["kind"] == "compile"
                else EvaluationStatus.RUNTIME_ERROR
            )
            lines = [_error_line(error), error.get("traceback", "")]
            return self._evaluation(status, _join(lines, run), flags=flags)
        status = EvaluationStatus(result["status"])
        correctness = _correctness(result.get("correctness"))
        if status == EvaluationStatus.INCORRECT_NUMERICAL:
            return self._evaluation(
                status,
                _join([result.get("message", "")], run),
                correctness=correctness or Correctness(),
                flags=flags,
            )
        if status != EvaluationStatus.PASSED:
            return self._evaluation(status, _join([result.get("message", "")], run), flags=flags)
        assert correctness is not None
        kernel = _stats(result["kernel_rounds_ns"])
        reference = _stats(result["reference_rounds_ns"])
        latency_ms, reference_ms = kernel.median_ms, reference.median_ms
        counters = {
            "l2_rel_error": correctness.extra["l2_rel_error"] if correctness.extra else 0.0,
            "max_absolute_error": correctness.max_absolute_error,
            "latency_ms": latency_ms,
            "reference_latency_ms": reference_ms,
            "relative_spread": kernel.relative_spread,
            "measurement_rounds": float(kernel.measurement_rounds),
            "max_rss_mb": run.max_rss_mb,
            # Time inside the timed kernel calls, so the profiler's own overhead can be measured.
            "timed_calls": float(result.get("kernel_timed_calls", 0)),
            "timed_total_ms": result.get("kernel_timed_ns", 0) / 1e6,
            "reference_timed_total_ms": result.get("reference_timed_ns", 0) / 1e6,
            # The harness's round trip of an empty call, taken out of every timed sample.
            "harness_overhead_us": result.get("harness_overhead_ns", 0) / 1e3,
        }
        cores = len(self.cpus) if self.cpus else len(os.sched_getaffinity(0))
        if task.roofline is not None and latency_ms > 0:
            seconds = latency_ms / 1e3
            flops_per_s = task.roofline.flops / seconds
            bytes_per_s = task.roofline.bytes_moved / seconds
            peak_flops = PEAK_FLOPS_PER_CORE * cores
            counters |= {
                "gflops": flops_per_s / 1e9,
                "gbytes_per_s": bytes_per_s / 1e9,
                "flops_pct_of_peak": 100 * flops_per_s / peak_flops,
                "bandwidth_pct_of_peak": 100 * bytes_per_s / PEAK_BYTES_PER_S,
            }
            if flops_per_s > peak_flops or bytes_per_s > PEAK_BYTES_PER_S:
                flags.append("above_peak")
        log = [
            f"correct on {len(config.seeds)} seeds (L2-relative error "
            f"{counters['l2_rel_error']:.3g}); median {latency_ms:.4f} ms over {kernel.runs} "
            f"runs, reference {reference_ms:.4f} ms, speedup {reference_ms / latency_ms:.3f}x"
        ]
        if kernel.relative_spread > config.max_relative_spread:
            flags.append("noisy_timing")
            log.append(
                f"timing spread {kernel.relative_spread:.1%} stayed above "
                f"{config.max_relative_spread:.0%} after {kernel.measurement_rounds} rounds"
            )
        if "above_peak" in flags:
            log.append("claimed throughput exceeds this host's peak: check the kernel")
        return self._evaluation(
            EvaluationStatus.PASSED,
            "\n".join(log),
            correctness=correctness,
            performance=Performance(
                latency_ms=latency_ms,
                reference_latency_ms=reference_ms,
                speedup_factor=reference_ms / latency_ms if latency_ms > 0 else 0.0,
            ),
            latency_stats=kernel,
            hardware_counters={k: float(v) for k, v in counters.items()},
            flags=flags,
        )


# --------------------------------------------------------------------------- helpers


def _output_plan(definition: Definition, axes: dict[str, int]) -> list[dict[str, Any]]:
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


def _read_json(path: Path) -> dict[str, Any] | None:
    text = read_result_file(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _float(value: Any) -> float:
    return float(value) if value is not None else math.nan


def _correctness(data: dict[str, Any] | None) -> Correctness | None:
    if not data:
        return None
    extra = {k: _float(v) for k, v in data.items() if k not in ("max_absolute_error",)}
    return Correctness(
        max_relative_error=abs(_float(data.get("max_relative_error", 0.0))),
        max_absolute_error=abs(_float(data.get("max_absolute_error", 0.0))),
        extra=extra,
    )


def _stats(rounds: list[list[int]]) -> LatencyStats:
    """Statistics, in milliseconds, of every kept sample of every round: more rounds happen
    only when the first was noisy, and then more samples give a steadier median."""
    ms = [t / 1e6 for times in rounds for t in times]
    return LatencyStats(
        mean_ms=statistics.fmean(ms),
        median_ms=statistics.median(ms),
        min_ms=min(ms),
        max_ms=max(ms),
        stdev_ms=statistics.stdev(ms) if len(ms) > 1 else 0.0,
        relative_spread=(max(ms) - min(ms)) / min(ms) if min(ms) > 0 else 0.0,
        runs=len(ms),
        measurement_rounds=len(rounds),
    )


def _died(run: SandboxResult, stage: str, config: BenchmarkConfig) -> tuple[EvaluationStatus, str]:
    """Status and log for a child that ended without writing its result."""
    where = f"during {stage}"
    if run.timed_out:
        status = EvaluationStatus.TIMEOUT
        line = f"timed out after {config.timeout_seconds:g} s {where}"
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
    return status, _join([line], run)


def _error_line(error: dict[str, Any]) -> str:
    message: str = error["message"]
    if error["kind"] == "reference":
        message = f"the task's reference failed (not the candidate's fault): {message}"
    if "MemoryError" in message or "Unable to allocate" in message:
        message = f"ran out of memory: {message}"
    if "Resource temporarily unavailable" in message or "BlockingIOError" in message:
        message = f"hit the process limit (fork bomb?): {message}"
    return message


def _join(lines: list[str], run: SandboxResult) -> str:
    parts = [line for line in lines if line]
    if run.stderr.strip():
        parts.append("stderr (tail):\n" + run.stderr[-STDERR_TAIL_CHARS:])
    if run.stdout.strip():
        parts.append("stdout (tail):\n" + run.stdout[-STDERR_TAIL_CHARS // 2 :])
    if run.output_truncated:
        parts.append("(output was truncated by the sandbox)")
    return "\n".join(parts)


def _cap(log: str) -> str:
    if len(log) <= MAX_LOG_CHARS:
        return log
    half = MAX_LOG_CHARS // 2
    return f"{log[:half]}\n[... {len(log) - MAX_LOG_CHARS} characters dropped ...]\n{log[-half:]}"

"""Child-process side of the `nki` backend: check and time one NKI kernel against a numpy task.

Run as `python -m accelopt_mcp.backends.nki_runner JOB.json RESULT.json` inside the sandbox. The
task module is NKIBench-style: `get_inputs()`, `forward(*inputs)` and optionally
`transform_to_nki_inputs(inputs)` / `transform_nki_outputs(outputs, reference)`.

Correctness runs on every seed (device: `nki.baremetal`; no device: `nki.simulate_kernel`).
Timing (device only) follows AccelOpt: warm-up runs, then each timed run is a `baremetal` call
that saves a NEFF and an NTFF, read back with `neuron-profile view` for `total_time`; a round is
repeated while its relative spread is above the tolerance, and the steadiest round is kept.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import io
import re
import sys
import time
import tokenize
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, Field

from accelopt_mcp.backends.cpu_outcomes import MAX_STRESS_SETS
from accelopt_mcp.backends.neuron_profile import NeuronProfileError, run_neuron_profile
from accelopt_mcp.backends.nonfinite import comparable, nonfinite_problem
from accelopt_mcp.backends.stress import StressError, checked_stress_sets, scaled_input, scaled_name
from accelopt_mcp.models import EvaluationStatus

T = TypeVar("T")
ACCELOPT_COMPILE_OPTIONS = "--disable-dge --logical-nc-config=1"
_HALF_PRECISION = re.compile(r"float16|\bfp16\b|\bbf16\b")


class NkiJob(BaseModel):
    task_file: str
    kernel_dir: str
    kernel_file: str
    entry_symbol: str
    mode: Literal["device", "simulate"]
    seeds: list[int]
    rtol: float
    atol: float
    nonfinite: Literal["match", "ignore"] = "match"
    """Rule for positions where the reference is NaN/inf (backends.nonfinite)."""
    warmup_runs: int
    iterations: int
    max_relative_spread: float
    max_measurement_rounds: int
    artifact_dir: str
    neuron_profile: str = "neuron-profile"
    profile_timeout_s: float = 120.0
    retries: int = Field(default=2, ge=0)
    """Extra tries for a flaky device run or profiler call before giving up."""
    stress_scales: list[float] = Field(default_factory=list)
    """The task's STRESS_SCALES (tasks.inputs.stress_scales, read by the parent)."""
    compile_options: str = ACCELOPT_COMPILE_OPTIONS


class NkiRunResult(BaseModel):
    status: EvaluationStatus
    log: str = ""
    max_relative_error: float | None = None
    max_absolute_error: float | None = None
    l2_relative_error: float | None = None
    latencies_ms: list[float] = Field(default_factory=list)
    """The kept measurement round, one total_time per timed run."""
    measurement_rounds: int = 0
    counters: dict[str, float] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    neuronxcc_version: str | None = None


class _Failure(Exception):
    def __init__(self, status: EvaluationStatus, message: str, *flags: str) -> None:
        super().__init__(message)
        self.status = status
        self.flags = list(flags)


class _Errors:
    """Worst error figures over all outputs and seeds."""

    def __init__(self) -> None:
        self.max_relative = 0.0
        self.max_absolute = 0.0
        self.l2_relative = 0.0

    def absorb(self, l2: float, max_abs: float, max_rel: float) -> None:
        self.l2_relative = max(self.l2_relative, l2)
        self.max_absolute = max(self.max_absolute, max_abs)
        self.max_relative = max(self.max_relative, max_rel)


def run(job: NkiJob) -> NkiRunResult:
    log: list[str] = []
    errors = _Errors()
    result = NkiRunResult(status=EvaluationStatus.RUNTIME_ERROR)
    try:
        nki, result.neuronxcc_version = _import_nki()
        task = _load_task(job.task_file)
        kernel = _load_kernel(job)
        _reject_half_precision(job)
        call = _caller(nki, kernel, job)
        nki_inputs, expected = _check_seeds(job, task, call, errors, log)
        _check_stress(job, task, call, errors, log)
        if job.mode == "simulate":
            log.append("correct in the NKI simulator; latency needs a Neuron device")
            result.flags.append("latency_unavailable")
        else:
            _measure(job, task, call, nki_inputs, expected, errors, result, log)
        result.status = EvaluationStatus.PASSED
    except _Failure as failure:
        result.status = failure.status
        result.flags.extend(failure.flags)
        log.append(str(failure))
    result.l2_relative_error = errors.l2_relative
    result.max_absolute_error = errors.max_absolute
    result.max_relative_error = errors.max_relative
    result.log = "\n".join(log)
    return result


# --------------------------------------------------------------------------- loading


def _import_nki() -> tuple[Any, str | None]:
    try:
        import neuronxcc
        from neuronxcc import nki
    except ImportError as exc:
        raise _Failure(
            EvaluationStatus.RUNTIME_ERROR,
            f"neuronxcc is not importable in the profiling process: {exc}",
            "backend_error",
        ) from exc
    return nki, getattr(neuronxcc, "__version__", None)


def _load_module(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a module from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _load_task(path: str) -> ModuleType:
    try:
        task = _load_module("accelopt_task", path)
    except Exception:
        raise _Failure(
            EvaluationStatus.RUNTIME_ERROR,
            "the task's reference module failed to import (a problem with the task, not the "
            f"kernel):\n{_short_traceback()}",
            "task_error",
        ) from None
    missing = [
        name for name in ("get_inputs", "forward") if not callable(getattr(task, name, None))
    ]
    if missing:
        raise _Failure(
            EvaluationStatus.RUNTIME_ERROR,
            f"the task module defines no {' or '.join(missing)}: the nki backend needs an "
            "NKIBench-style numpy task (get_inputs() and forward(*inputs))",
            "task_error",
        )
    return task


def _load_kernel(job: NkiJob) -> Callable[..., Any]:
    sys.path.insert(0, job.kernel_dir)
    try:
        module = _load_module("accelopt_kernel", job.kernel_file)
    except Exception:
        raise _Failure(
            EvaluationStatus.COMPILE_ERROR,
            f"the kernel module failed to import:\n{_short_traceback()}",
        ) from None
    kernel: object = getattr(module, job.entry_symbol, None)
    if not callable(kernel):
        raise _Failure(
            EvaluationStatus.COMPILE_ERROR,
            f"the kernel module defines no function {job.entry_symbol!r}",
        )
    return kernel


def _code_without_comments(source: str) -> str:
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        return " ".join(t.string for t in tokens if t.type != tokenize.COMMENT)
    except (tokenize.TokenError, SyntaxError):
        return source


def _reject_half_precision(job: NkiJob) -> None:
    # AccelOpt's rule: a kernel may not reach its speed by computing in 16-bit floats when the
    # task itself is in full precision; 2e-5 tolerances would often not catch it.
    kernel_code = _code_without_comments(Path(job.kernel_file).read_text(encoding="utf-8"))
    task_code = _code_without_comments(Path(job.task_file).read_text(encoding="utf-8"))
    found = _HALF_PRECISION.search(kernel_code)
    if found and not _HALF_PRECISION.search(task_code):
        raise _Failure(
            EvaluationStatus.INCORRECT_DTYPE,
            f"the kernel uses 16-bit floats ({found.group(0)!r}) where the task is full "
            "precision; keep float32 (a downcast is not an accepted optimization)",
        )


# --------------------------------------------------------------------------- running


def _caller(nki: Any, kernel: Callable[..., Any], job: NkiJob) -> Callable[..., Any]:
    def call(inputs: list[Any], neff: str | None = None, ntff: str | None = None) -> Any:
        if job.mode == "simulate":
            return nki.simulate_kernel(kernel, *inputs)
        options: dict[str, Any] = {"additional_compile_opt": job.compile_options}
        if neff:
            options.update(save_neff_name=neff, save_trace_name=ntff)
        return nki.baremetal(kernel, **options)(*inputs)

    return call


def _prepare(task: ModuleType, seed: int) -> tuple[list[Any], Any]:
    np.random.seed(seed)
    inputs = list(task.get_inputs())
    # The reference sees its own copy, so a kernel that writes into its inputs changes nothing.
    expected = task.forward(*copy.deepcopy(inputs))
    transform = getattr(task, "transform_to_nki_inputs", None)
    nki_inputs = list(transform(inputs)) if callable(transform) else inputs
    return nki_inputs, expected


def _check_seeds(
    job: NkiJob, task: ModuleType, call: Callable[..., Any], errors: _Errors, log: list[str]
) -> tuple[list[Any], Any]:
    nki_inputs: list[Any] = []
    expected: Any = None
    artifacts = Path(job.artifact_dir)
    for index, seed in enumerate(job.seeds):
        try:
            nki_inputs, expected = _prepare(task, seed)
        except Exception:
            raise _Failure(
                EvaluationStatus.RUNTIME_ERROR,
                f"the task's get_inputs/forward failed for seed {seed}:\n{_short_traceback()}",
                "task_error",
            ) from None
        first = index == 0
        try:
            if first and job.mode == "device":
                raw = call(
                    nki_inputs, str(artifacts / "kernel.neff"), str(artifacts / "kernel.ntff")
                )
            else:
                raw = call(nki_inputs)
        except Exception:
            # NKI traces and compiles on the first call, so a failure there is the kernel not
            # compiling; later calls run an already compiled kernel.
            status = EvaluationStatus.COMPILE_ERROR if first else EvaluationStatus.RUNTIME_ERROR
            what = "compiling/running" if first else "running"
            raise _Failure(
                status, f"{what} the kernel failed (seed {seed}):\n{_short_traceback()}"
            ) from None
        _compare(task, raw, expected, job, errors, f"seed {seed}")
        log.append(f"seed {seed}: correct (L2-relative error {errors.l2_relative:.3g})")
    return nki_inputs, expected


def _stress_sets(job: NkiJob, task: ModuleType) -> list[tuple[str, list[Any]]]:
    """The task's stress sets (its stress_inputs(), then its STRESS_SCALES applied to the first
    seed's inputs), checked like the cpu backend's: at most MAX_STRESS_SETS, each at most
    twice the first seed's bytes. The task's fault (task_error) when they are not."""
    sets: list[tuple[str, list[Any]]] = []
    declare = getattr(task, "stress_inputs", None)
    try:
        if declare is not None:
            np.random.seed(0)
            sets = checked_stress_sets(declare())
        np.random.seed(job.seeds[0])
        base = list(task.get_inputs())
    except StressError as exc:
        raise _Failure(EvaluationStatus.RUNTIME_ERROR, f"the task's {exc}", "task_error") from None
    except Exception:
        raise _Failure(
            EvaluationStatus.RUNTIME_ERROR,
            f"the task's stress_inputs() failed:\n{_short_traceback()}",
            "task_error",
        ) from None
    sets += [(scaled_name(s), [scaled_input(v, s) for v in base]) for s in job.stress_scales]
    if len(sets) > MAX_STRESS_SETS:
        raise _Failure(
            EvaluationStatus.RUNTIME_ERROR,
            f"the task declares {len(sets)} stress sets (stress_inputs() and STRESS_SCALES "
            f"together); at most {MAX_STRESS_SETS}",
            "task_error",
        )
    budget = 2 * sum(np.asarray(v).nbytes for v in base) + (1 << 20)
    for name, inputs in sets:
        if len(inputs) != len(base) or sum(np.asarray(v).nbytes for v in inputs) > budget:
            raise _Failure(
                EvaluationStatus.RUNTIME_ERROR,
                f"the task's stress set {name!r} does not take get_inputs()' {len(base)} "
                "inputs, or holds more than twice their bytes",
                "task_error",
            )
    return sets


def _check_stress(
    job: NkiJob, task: ModuleType, call: Callable[..., Any], errors: _Errors, log: list[str]
) -> None:
    """Every stress set, like a seed (never timed): failing one is the comparison's verdict,
    with the set's name in the message."""
    for name, inputs in _stress_sets(job, task):
        where = f"stress set {name!r}"
        try:
            expected = task.forward(*copy.deepcopy(inputs))
            transform = getattr(task, "transform_to_nki_inputs", None)
            nki_inputs = list(transform(inputs)) if callable(transform) else inputs
        except Exception:
            raise _Failure(
                EvaluationStatus.RUNTIME_ERROR,
                f"the task's forward failed on {where}:\n{_short_traceback()}",
                "task_error",
            ) from None
        try:
            raw = call(nki_inputs)
        except Exception:
            raise _Failure(
                EvaluationStatus.RUNTIME_ERROR,
                f"running the kernel failed ({where}):\n{_short_traceback()}",
            ) from None
        _compare(task, raw, expected, job, errors, where)
        log.append(f"{where}: correct")


def _compare(
    task: ModuleType, raw: Any, expected: Any, job: NkiJob, errors: _Errors, where: str
) -> None:
    transform = getattr(task, "transform_nki_outputs", None)
    try:
        outputs = transform(raw, expected) if callable(transform) else raw
    except Exception:
        raise _Failure(
            EvaluationStatus.INCORRECT_SHAPE,
            f"{where}: the task's transform_nki_outputs rejected the kernel's outputs:\n"
            f"{_short_traceback()}",
        ) from None
    got, want = _as_list(outputs), _as_list(expected)
    if len(got) != len(want):
        raise _Failure(
            EvaluationStatus.INCORRECT_SHAPE,
            f"{where}: the kernel returned {len(got)} outputs, the reference {len(want)}",
        )
    for position, (out, ref) in enumerate(zip(got, want, strict=True)):
        out, ref = np.asarray(out), np.asarray(ref)
        label = f"{where}, output {position}"
        if out.shape != ref.shape:
            raise _Failure(
                EvaluationStatus.INCORRECT_SHAPE,
                f"{label}: shape {out.shape}, the reference has {ref.shape}",
            )
        if out.dtype != ref.dtype:
            raise _Failure(
                EvaluationStatus.INCORRECT_DTYPE,
                f"{label}: dtype {out.dtype}, the reference has {ref.dtype}",
            )
        out64, ref64 = out.astype(np.float64), ref.astype(np.float64)
        problem = nonfinite_problem(out64, ref64, job.nonfinite)
        if problem is not None:
            errors.l2_relative = errors.max_absolute = errors.max_relative = float("nan")
            raise _Failure(EvaluationStatus.INCORRECT_NUMERICAL, f"{label}: {problem[1]}")
        # Positions where the reference is NaN/inf now agree (or are ignored): out of the norms,
        # where inf - inf would be NaN and inf > inf False, a pass for anything.
        out64, ref64 = comparable(out64, ref64)
        diff = out64 - ref64
        ref_norm = float(np.linalg.norm(ref64))
        diff_norm = float(np.linalg.norm(diff))
        max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
        scale = np.abs(ref64) + np.finfo(np.float64).tiny
        max_rel = float(np.max(np.abs(diff) / scale)) if diff.size else 0.0
        l2 = diff_norm / ref_norm if ref_norm > 0 else diff_norm
        errors.absorb(l2, max_abs, max_rel)
        if diff_norm > job.rtol * ref_norm + job.atol:
            raise _Failure(
                EvaluationStatus.INCORRECT_NUMERICAL,
                f"{label}: L2-relative error {l2:.3g} exceeds the tolerance {job.rtol:g} "
                f"(max absolute error {max_abs:.3g})",
            )


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple | list) else [value]


# --------------------------------------------------------------------------- timing


def _measure(
    job: NkiJob,
    task: ModuleType,
    call: Callable[..., Any],
    nki_inputs: list[Any],
    expected: Any,
    errors: _Errors,
    result: NkiRunResult,
    log: list[str],
) -> None:
    artifacts = Path(job.artifact_dir)
    best: tuple[float, list[float], dict[str, float]] | None = None
    for round_index in range(1, job.max_measurement_rounds + 1):
        for _ in range(job.warmup_runs):
            _with_retries(job, log, "warm-up run", lambda: call(nki_inputs))
        latencies: list[float] = []
        counters: dict[str, float] = {}
        for run_index in range(job.iterations):
            stem = artifacts / f"r{round_index}_{run_index}"
            neff, ntff = f"{stem}.neff", f"{stem}.ntff"
            raw = _with_retries(
                job, log, "timed run", functools.partial(call, nki_inputs, neff, ntff)
            )
            # A kernel could pass the seeds and then return something else while timed.
            _compare(task, raw, expected, job, errors, f"timed run {run_index + 1}")
            summary = _with_retries(
                job,
                log,
                "neuron-profile",
                functools.partial(
                    run_neuron_profile,
                    Path(neff),
                    Path(ntff),
                    executable=job.neuron_profile,
                    timeout_s=job.profile_timeout_s,
                ),
            )
            latencies.append(summary.latency_ms)
            counters = summary.counters
        spread = (max(latencies) - min(latencies)) / min(latencies)
        log.append(f"round {round_index}: {len(latencies)} runs, relative spread {spread:.2%}")
        result.measurement_rounds = round_index
        if best is None or spread < best[0]:
            best = (spread, latencies, counters)
        if spread <= job.max_relative_spread:
            break
    assert best is not None
    spread, result.latencies_ms, result.counters = best
    if spread > job.max_relative_spread:
        result.flags.append("unstable_latency")
        log.append(
            f"latency spread stayed above {job.max_relative_spread:.1%} after "
            f"{job.max_measurement_rounds} rounds; kept the steadiest round ({spread:.2%})"
        )


def _with_retries(job: NkiJob, log: list[str], what: str, action: Callable[[], T]) -> T:
    for attempt in range(job.retries + 1):
        try:
            return action()
        except _Failure:
            raise
        except NeuronProfileError as exc:
            failure: _Failure = _Failure(
                EvaluationStatus.RUNTIME_ERROR,
                f"{what} failed after {attempt + 1} tries: {exc}",
                "profiler_error",
            )
            detail = str(exc)
        except Exception:
            failure = _Failure(
                EvaluationStatus.RUNTIME_ERROR,
                f"{what} failed after {attempt + 1} tries:\n{_short_traceback()}",
            )
            detail = traceback.format_exc().strip().splitlines()[-1]
        if attempt == job.retries:
            raise failure
        log.append(f"{what} failed (try {attempt + 1} of {job.retries + 1}), retrying: {detail}")
        time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _short_traceback(limit: int = 4000) -> str:
    text = traceback.format_exc()
    return text if len(text) <= limit else "..." + text[-limit:]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m accelopt_mcp.backends.nki_runner JOB.json RESULT.json")
        return 2
    job = NkiJob.model_validate_json(Path(argv[0]).read_text(encoding="utf-8"))
    result = run(job)
    Path(argv[1]).write_text(result.model_dump_json(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

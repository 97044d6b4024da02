"""The profiling child of the cpu backend: `python -m accelopt_mcp.backends.cpu_runner JOB RESULT`.

It imports the reference and the candidate from files the parent wrote into the sandbox
directory, checks the candidate on every seed, times both, checks every output produced while
timing, and writes a plain JSON result. The parent never reads the candidate's stdout; a child
that dies before writing RESULT is judged from how it died and from the last stage recorded in
`progress.json`.

Deliberately NumPy-only at import time (no pydantic): interpreter start-up is part of every
evaluation's overhead.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import math
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from accelopt_mcp.tasks.inputs import generate_inputs, needs_torch

PROGRESS_FILE = "progress.json"
TORCH_HINT = "this task needs PyTorch: pip install torch==2.13.0"
MAX_TRACEBACK_CHARS = 4000
TARGET_SAMPLE_NS = 1_000_000
MAX_BATCH = 32


class StageError(Exception):
    """Ends the run with an error of a given kind: compile, runtime, reference or setup."""

    def __init__(self, kind: str, message: str, tb: str = "") -> None:
        super().__init__(message)
        self.kind, self.message, self.tb = kind, message, tb


class Verdict(Exception):
    """Ends the run with a failed correctness check."""

    def __init__(
        self, status: str, message: str, correctness: dict[str, float] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.correctness = status, message, correctness


def _stage(name: str) -> None:
    Path(PROGRESS_FILE).write_text(json.dumps({"stage": name}))


def _short_traceback() -> str:
    """The current exception's traceback without this runner's own frames."""
    exc = sys.exc_info()[1]
    if exc is None:
        return ""
    summary = traceback.TracebackException.from_exception(exc)
    summary.stack = traceback.StackSummary.from_list(
        [
            frame
            for frame in summary.stack
            if frame.filename != __file__ and not frame.filename.startswith("<frozen")
        ]
    )
    text = "".join(summary.format())
    return text if len(text) <= MAX_TRACEBACK_CHARS else "...\n" + text[-MAX_TRACEBACK_CHARS:]


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- values


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def _dtype_name(value: Any) -> str:
    if _is_torch(value):
        return str(value.dtype).removeprefix("torch.")
    if isinstance(value, np.ndarray | np.generic):
        return value.dtype.name
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float32"
    return type(value).__name__


def _to_numpy(value: Any) -> np.ndarray:
    if _is_torch(value):
        tensor = value.detach().cpu()
        if not tensor.dtype.is_floating_point or tensor.dtype.itemsize >= 4:
            array: np.ndarray = tensor.numpy()
        else:
            array = tensor.float().numpy()
        return array
    return np.asarray(value)


def _copy(value: Any) -> Any:
    if _is_torch(value):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _as_list(outputs: Any) -> list[Any]:
    if isinstance(outputs, tuple | list):
        return list(outputs)
    return [outputs]


def _describe(value: Any) -> dict[str, Any]:
    """Shape (None for a scalar) and dtype name of one input or output."""
    shape = None if isinstance(value, bool | int | float) else list(_to_numpy(value).shape)
    return {"shape": shape or None, "dtype": _dtype_name(value)}


# --------------------------------------------------------------------------- comparison


def _compare(out: Any, ref: Any, index: int, rtol: float, atol: float) -> dict[str, float]:
    """Errors of one output against the reference; raises Verdict when it is wrong."""
    out_np, ref_np = _to_numpy(out), _to_numpy(ref)
    if out_np.shape != ref_np.shape:
        raise Verdict(
            "INCORRECT_SHAPE",
            f"output {index} has shape {list(out_np.shape)}, expected {list(ref_np.shape)}",
        )
    if _dtype_name(out) != _dtype_name(ref):
        raise Verdict(
            "INCORRECT_DTYPE",
            f"output {index} has dtype {_dtype_name(out)}, expected {_dtype_name(ref)}",
        )
    # float32 outputs are compared in float32 (plenty for a relative error >= 1e-7 and half
    # the memory traffic); everything else in float64.
    work: type[np.floating[Any]] = np.float32 if ref_np.dtype == np.float32 else np.float64
    out_w = out_np.astype(work, copy=False)
    ref_w = ref_np.astype(work, copy=False)
    errors = {
        "l2_rel_error": math.inf,
        "max_absolute_error": math.inf,
        "max_relative_error": math.inf,
    }
    ref_finite = np.isfinite(ref_w)
    all_ref_finite = bool(ref_finite.all())
    if not np.isfinite(out_w).all():
        bad = int((~np.isfinite(out_w) & ref_finite).sum())
        if bad:
            errors["nonfinite"] = float(bad)
            raise Verdict(
                "INCORRECT_NUMERICAL",
                f"output {index} has {bad} NaN/inf values where the reference is finite",
                errors,
            )
    if not all_ref_finite:
        out_w = np.where(ref_finite, out_w, 0)
        ref_w = np.where(ref_finite, ref_w, 0)
    diff = np.abs(out_w - ref_w).ravel()
    flat_ref = ref_w.ravel()
    diff_norm = math.sqrt(float(np.dot(diff, diff)))
    ref_norm = math.sqrt(float(np.dot(flat_ref, flat_ref)))
    errors["l2_rel_error"] = (
        diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    )
    errors["max_absolute_error"] = float(diff.max()) if diff.size else 0.0
    errors["max_relative_error"] = (
        float((diff / (np.abs(flat_ref) + work(1e-8))).max()) if diff.size else 0.0
    )
    if diff_norm > rtol * ref_norm + atol * math.sqrt(max(diff.size, 1)):
        raise Verdict(
            "INCORRECT_NUMERICAL",
            f"output {index} is off: L2-relative error {errors['l2_rel_error']:.3g} "
            f"exceeds rtol {rtol:g} (max abs error {errors['max_absolute_error']:.3g})",
            errors,
        )
    return errors


def _compare_all(outs: list[Any], refs: list[Any], rtol: float, atol: float) -> dict[str, float]:
    if len(outs) != len(refs):
        raise Verdict(
            "INCORRECT_SHAPE", f"the kernel returned {len(outs)} outputs, expected {len(refs)}"
        )
    worst = {"l2_rel_error": 0.0, "max_absolute_error": 0.0, "max_relative_error": 0.0}
    for index, (out, ref) in enumerate(zip(outs, refs, strict=True)):
        errors = _compare(out, ref, index, rtol, atol)
        worst = {k: max(worst[k], errors[k]) for k in worst}
    return worst


def _same_outputs(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(_to_numpy(x), _to_numpy(y), equal_nan=True)
        for x, y in zip(a, b, strict=True)
    )


# --------------------------------------------------------------------------- the task


class Harness:
    """Calls the reference and the candidate the way the task format says."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.style = job["style"]
        self.use_torch = bool(job.get("use_torch"))
        if self.style == "flashinfer" and needs_torch(job.get("input_plan") or []):
            self.use_torch = True
        self.torch: ModuleType | None = None
        if self.use_torch:
            try:
                import torch
            except ImportError as exc:
                raise StageError("setup", TORCH_HINT) from exc
            self.torch = torch
        _stage("reference import")
        try:
            self.reference = _load_module(Path(job["reference_path"]), "accelopt_reference")
        except ModuleNotFoundError as exc:
            hint = f"; {TORCH_HINT}" if exc.name == "torch" else ""
            raise StageError("reference", f"the reference cannot be imported: {exc}{hint}") from exc
        except BaseException as exc:
            raise StageError(
                "reference", f"the reference cannot be imported: {exc!r}", _short_traceback()
            ) from exc
        name = "forward" if self.style == "nkibench" else "run"
        reference_fn = getattr(self.reference, name, None)
        if not callable(reference_fn):
            raise StageError("reference", f"the reference defines no function `{name}`")
        self.reference_fn: Callable[..., Any] = reference_fn
        self.to_kernel_inputs = getattr(self.reference, "transform_to_nki_inputs", None)
        self.from_kernel_outputs = getattr(self.reference, "transform_nki_outputs", None)

    def inputs(self, seed: int) -> list[Any]:
        random.seed(seed)
        np.random.seed(seed)
        if self.torch is not None:
            self.torch.manual_seed(seed)
        if self.style == "nkibench":
            try:
                return list(self.reference.get_inputs())
            except BaseException as exc:
                raise StageError(
                    "reference", f"get_inputs() failed: {exc!r}", _short_traceback()
                ) from exc
        return generate_inputs(self.job["input_plan"], seed, as_torch=self.torch is not None)

    def reference_outputs(self, inputs: list[Any]) -> list[Any]:
        try:
            return _as_list(self.reference_fn(*[_copy(v) for v in inputs]))
        except BaseException as exc:
            raise StageError(
                "reference", f"the reference raised {exc!r}", _short_traceback()
            ) from exc

    def kernel_call(
        self, kernel: Callable[..., Any], inputs: list[Any]
    ) -> tuple[Callable[[], Any], list[Any]]:
        """A zero-argument call of the kernel on fresh copies of `inputs` (prepared now, so the
        copying stays outside any timer) and the list its outputs will be read from."""
        args = [_copy(v) for v in inputs]
        if self.to_kernel_inputs is not None:
            args = list(self.to_kernel_inputs(args))
        buffers: list[Any] = []
        if self.job.get("destination_passing_style"):
            buffers = [self._empty(spec) for spec in self.job["output_plan"]]
        call_args = [*args, *buffers]
        return (lambda: kernel(*call_args)), buffers

    def kernel_outputs(self, returned: Any, buffers: list[Any], refs: list[Any]) -> list[Any]:
        outputs = buffers if buffers else _as_list(returned)
        if self.from_kernel_outputs is not None:
            ref = refs[0] if len(refs) == 1 else tuple(refs)
            outputs = _as_list(self.from_kernel_outputs(returned if not buffers else outputs, ref))
        return outputs

    def _empty(self, spec: dict[str, Any]) -> Any:
        shape = tuple(spec["shape"] or ())
        if self.torch is not None:
            return self.torch.empty(shape, dtype=getattr(self.torch, spec["dtype"]))
        return np.empty(shape, dtype=spec["dtype"])


def _load_kernel(job: dict[str, Any]) -> Callable[..., Any]:
    _stage("kernel import")
    kernel_dir = Path(job["kernel_dir"]).resolve()
    sys.path.insert(0, str(kernel_dir))
    entry = kernel_dir / job["entry_file"]
    try:
        module = _load_module(entry, Path(job["entry_file"]).stem.replace(".", "_"))
    except SyntaxError as exc:
        raise StageError("compile", f"syntax error: {exc}", _short_traceback()) from exc
    except ModuleNotFoundError as exc:
        hint = f"; {TORCH_HINT}" if exc.name == "torch" else ""
        raise StageError("compile", f"import error: {exc}{hint}", _short_traceback()) from exc
    except BaseException as exc:
        raise StageError(
            "compile", f"the kernel module failed to load: {exc!r}", _short_traceback()
        ) from exc
    kernel: object = getattr(module, job["entry_symbol"], None)
    if not callable(kernel):
        defined = sorted(
            n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
        )
        raise StageError(
            "compile",
            f"{job['entry_file']} defines no function `{job['entry_symbol']}` "
            f"(callables found: {defined})",
        )
    return kernel


# --------------------------------------------------------------------------- timing


def _spread(times: list[int]) -> float:
    return (max(times) - min(times)) / max(min(times), 1)


def _runqueue_wait_ns() -> int | None:
    """Time this thread has spent runnable but not running (waiting for a core), or None
    where the kernel does not expose it."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _measure(
    job: dict[str, Any],
    make_call: Callable[[int], tuple[Callable[[], Any], Any]],
    check: Callable[[int, Any, Any], None] | None,
    totals: dict[str, int],
) -> list[list[int]]:
    """Rounds of timed samples (ns per call); call i uses the inputs of seed i mod the number
    of seeds.

    A sample is the mean of a batch of back-to-back calls, each on its own fresh inputs, sized
    so that a sample lasts about TARGET_SAMPLE_NS: one call of a microsecond kernel is mostly
    timer and scheduler noise. Time the calling thread spent waiting for its core (another
    process had it) is taken out of the sample: it measures the neighbour, not the kernel. The
    result never drops below the process's CPU time spread over its allowed cores, so a kernel
    cannot shrink its figure by making its own thread wait. Stops at the first round whose
    spread is within tolerance, or after the last round."""
    cores = len(os.sched_getaffinity(0))
    per_call_ns = 0
    for i in range(max(job["warmup_runs"], 1)):
        call, _ = make_call(i)
        start = time.perf_counter_ns()
        call()
        per_call_ns = time.perf_counter_ns() - start
    batch = max(1, min(MAX_BATCH, TARGET_SAMPLE_NS // max(per_call_ns, 1)))
    rounds: list[list[int]] = []
    counter = 0
    for _ in range(job["max_measurement_rounds"]):
        samples: list[int] = []
        gc.collect()
        gc.freeze()  # what exists now is never garbage: later collections skip it
        gc.disable()
        try:
            for _ in range(job["iterations"]):
                calls = [make_call(counter + j) for j in range(batch)]
                returned = [None] * batch
                wait_start = _runqueue_wait_ns()
                cpu_start = time.process_time_ns()
                start = time.perf_counter_ns()
                for j, (call, _) in enumerate(calls):
                    returned[j] = call()
                elapsed = time.perf_counter_ns() - start
                cpu = time.process_time_ns() - cpu_start
                wait_end = _runqueue_wait_ns()
                waited = 0
                if wait_start is not None and wait_end is not None:
                    waited = min(max(wait_end - wait_start, 0), elapsed - cpu // cores)
                    waited = max(waited, 0)
                samples.append((elapsed - waited) // batch)
                totals["timed_ns"] = totals.get("timed_ns", 0) + elapsed
                totals["timed_calls"] = totals.get("timed_calls", 0) + batch
                totals["waited_ns"] = totals.get("waited_ns", 0) + waited
                if check is not None:
                    for j, (_, context) in enumerate(calls):
                        check(counter + j, returned[j], context)
                counter += batch
        finally:
            gc.enable()
        rounds.append(samples)
        if _spread(samples) <= job["max_relative_spread"]:
            break
    return rounds


# --------------------------------------------------------------------------- modes


def describe(job: dict[str, Any]) -> dict[str, Any]:
    """Shapes and dtypes of an NKIBench task's inputs and outputs (seed 0)."""
    harness = Harness(job)
    _stage("describe")
    inputs = harness.inputs(0)
    outputs = harness.reference_outputs(inputs)
    return {
        "inputs": [_describe(v) for v in inputs],
        "outputs": [_describe(v) for v in outputs],
        "has_transforms": harness.to_kernel_inputs is not None
        or harness.from_kernel_outputs is not None,
        "roofline": _declared_roofline(harness.reference),
    }


def _declared_roofline(module: Any) -> dict[str, Any] | None:
    """The task's own `roofline()` -> {"flops", "bytes_moved", "compute_unit"?}, if it has one."""
    declare = getattr(module, "roofline", None)
    if not callable(declare):
        return None
    declared = declare()
    if not isinstance(declared, dict):
        raise StageError("describe", "roofline() must return a dict with flops and bytes_moved")
    return {k: declared[k] for k in ("flops", "bytes_moved", "compute_unit") if k in declared}


def evaluate(job: dict[str, Any], result: dict[str, Any]) -> None:
    harness = Harness(job)
    kernel = _load_kernel(job)
    rtol, atol = job["rtol"], job["atol"]
    seeds: list[int] = job["seeds"]
    seed_inputs: list[list[Any]] = []
    seed_refs: list[list[Any]] = []
    seed_outs: list[list[Any]] = []
    worst = {"l2_rel_error": 0.0, "max_absolute_error": 0.0, "max_relative_error": 0.0}
    for seed in seeds:
        _stage(f"correctness seed {seed}")
        inputs = harness.inputs(seed)
        refs = harness.reference_outputs(inputs)
        call, buffers = harness.kernel_call(kernel, inputs)
        _stage(f"kernel call seed {seed}")
        try:
            returned = call()
            outs = harness.kernel_outputs(returned, buffers, refs)
        except BaseException as exc:
            raise StageError(
                "runtime", f"the kernel raised {exc!r} on seed {seed}", _short_traceback()
            ) from exc
        try:
            errors = _compare_all(outs, refs, rtol, atol)
        except Verdict as verdict:
            for prev_outs, prev_refs in zip(seed_outs, seed_refs, strict=True):
                if _same_outputs(outs, prev_outs) and not _same_outputs(refs, prev_refs):
                    result["flags"].append("constant_output")
                    verdict.message += (
                        "; the kernel returned the same output for different inputs while the "
                        "reference changed (a cached or constant answer)"
                    )
                    break
            verdict.message = f"seed {seed}: {verdict.message}"
            raise
        worst = {k: max(worst[k], errors[k]) for k in worst}
        seed_inputs.append(inputs)
        seed_refs.append(refs)
        seed_outs.append([_copy(o) for o in outs])
    result["correctness"] = worst

    n = len(seeds)
    if job.get("time_reference", True):
        _stage("timing reference")

        def reference_call(i: int) -> tuple[Callable[[], Any], None]:
            args = [_copy(v) for v in seed_inputs[i % n]]
            return (lambda: harness.reference_fn(*args)), None

        try:
            result["reference_rounds_ns"] = _measure(job, reference_call, None, {})
        except BaseException as exc:
            raise StageError(
                "reference", f"the reference raised {exc!r} while being timed", _short_traceback()
            ) from exc

    _stage("timing kernel")

    def kernel_call(i: int) -> tuple[Callable[[], Any], Any]:
        return harness.kernel_call(kernel, seed_inputs[i % n])

    def check_timed(i: int, returned: Any, buffers: Any) -> None:
        refs = seed_refs[i % n]
        outs = harness.kernel_outputs(returned, buffers, refs)
        if _same_outputs(outs, seed_outs[i % n]):
            return  # bit-identical to the output already checked for this seed
        try:
            _compare_all(outs, refs, rtol, atol)
        except Verdict as verdict:
            result["flags"].append("timed_output_mismatch")
            verdict.message = (
                f"timed run {i} (inputs of seed {seeds[i % n]}): {verdict.message}; the kernel "
                "was correct in the correctness pass but not while being timed"
            )
            raise

    try:
        totals: dict[str, int] = {}
        result["kernel_rounds_ns"] = _measure(job, kernel_call, check_timed, totals)
        result["kernel_timed_ns"] = totals.get("timed_ns", 0)
        result["kernel_timed_calls"] = totals.get("timed_calls", 0)
        result["kernel_waited_ns"] = totals.get("waited_ns", 0)
    except (Verdict, StageError):
        raise
    except BaseException as exc:
        raise StageError(
            "runtime", f"the kernel raised {exc!r} while being timed", _short_traceback()
        ) from exc


def _finite(value: Any) -> Any:
    """JSON has no inf/NaN: send them as strings the parent turns back into floats."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m accelopt_mcp.backends.cpu_runner JOB.json RESULT.json\n")
        return 2
    runner_pid = os.getpid()
    job_path, result_path = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    job = json.loads(job_path.read_text())
    # The nonce proves to the parent that RESULT was written here, not forged by the kernel
    # (which shares this directory); it leaves the job file before any candidate code runs.
    nonce = job.pop("nonce", None)
    job_path.write_text(json.dumps(job))
    result: dict[str, Any] = {"status": None, "flags": [], "error": None}
    try:
        if job.get("mode") == "describe":
            result["describe"] = describe(job)
        else:
            evaluate(job, result)
        result["status"] = "PASSED"
    except Verdict as verdict:
        result["status"] = verdict.status
        result["message"] = verdict.message
        if verdict.correctness is not None:
            result["correctness"] = verdict.correctness
    except StageError as error:
        result["error"] = {"kind": error.kind, "message": error.message, "traceback": error.tb}
    except BaseException as exc:  # anything else is a bug in a harness hook: report, do not die
        result["error"] = {
            "kind": "runtime",
            "message": f"unexpected failure: {exc!r}",
            "traceback": _short_traceback(),
        }
    if os.getpid() != runner_pid:
        # A process the kernel forked ran on into our code: only the runner itself reports.
        os._exit(0)
    result["nonce"] = nonce
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_finite(result)))
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

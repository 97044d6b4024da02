"""The trusted harness of the cpu backend: `python -m accelopt_mcp.backends.cpu_runner JOB RESULT`.

Our code only. It never imports the candidate: the candidate kernel runs in a jailed process
of its own (cpu_candidate.py inside accelopt_mcp.isolation.jail), and the task's reference is
timed in a second jailed process with the same protocol, so neither ever shares an interpreter
with this one or with the other. Nor does it import the task: a third jail (cpu_task.py, whose
jailed side is `serve_task` below) runs the task's module for its inputs and transforms.
This process has the inputs drawn (the fixed seeds, then fresh ones from seeds nobody can predict),
writes them into each jail's input file while that jail is frozen, keeps the clock around each
call (less the calibrated round trip of an empty call), freezes the jail the moment it says it
is done and only then reads its outputs, checks every output against the reference output for
its own input, and writes a plain JSON result. A child that dies before writing RESULT is judged
by the parent from how it died and from the last stage recorded in `progress.json`.

Deliberately NumPy-only at import time (no pydantic): interpreter start-up is part of every
evaluation's overhead.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import math
import mmap
import os
import random
import secrets
import select
import shutil
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from accelopt_mcp.backends.cpu_candidate import (
    ACK_OK,
    ACK_READY,
    FAILED_NOT_ARRAYS,
    MESSAGE,
    OP_CALL,
    OP_PING,
    ArenaError,
    read_arena,
    read_header,
    snapshot_arena,
    storage_dtype,
    write_arena,
)

# Re-exported: callers and tests name them as this module's.
from accelopt_mcp.backends.cpu_outcomes import StageError as StageError
from accelopt_mcp.backends.cpu_outcomes import Verdict as Verdict
from accelopt_mcp.backends.nonfinite import comparable, nonfinite_problem
from accelopt_mcp.tasks.inputs import generate_inputs, needs_torch

if TYPE_CHECKING:
    from accelopt_mcp.backends.cpu_task import JailedHarness

PROGRESS_FILE = "progress.json"
TORCH_HINT = "this task needs PyTorch: pip install torch==2.13.0"
MAX_TRACEBACK_CHARS = 4000
TARGET_SAMPLE_NS = 1_000_000
MAX_BATCH = 32


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


def _compare(
    out: Any,
    ref: Any,
    index: int,
    rtol: float,
    atol: float,
    out_dtype: str | None = None,
    ref_dtype: str | None = None,
    nonfinite: str = "match",
) -> dict[str, float]:
    """Errors of one output against the reference; raises Verdict when it is wrong. The dtype
    names, when given, are those the values had before they crossed an arena (a torch
    bfloat16 travels as float32). `nonfinite` is the rule for positions where the reference
    is NaN or inf (backends.nonfinite)."""
    out_np, ref_np = _to_numpy(out), _to_numpy(ref)
    out_dtype = out_dtype or _dtype_name(out)
    ref_dtype = ref_dtype or _dtype_name(ref)
    if out_np.shape != ref_np.shape:
        raise Verdict(
            "INCORRECT_SHAPE",
            f"output {index} has shape {list(out_np.shape)}, expected {list(ref_np.shape)}",
        )
    if out_dtype != ref_dtype:
        raise Verdict(
            "INCORRECT_DTYPE", f"output {index} has dtype {out_dtype}, expected {ref_dtype}"
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
    problem = nonfinite_problem(out_w, ref_w, nonfinite)
    if problem is not None:
        errors["nonfinite"] = float(problem[0])
        raise Verdict("INCORRECT_NUMERICAL", f"output {index} has {problem[1]}", errors)
    out_w, ref_w = comparable(out_w, ref_w)
    diff = np.abs(out_w - ref_w).ravel()
    flat_ref = ref_w.ravel()
    # Norms in float64: a float32 dot product of large values overflows to inf, and inf > inf
    # is False, which would pass any finite output.
    diff64 = diff.astype(np.float64, copy=False)
    ref64 = flat_ref.astype(np.float64, copy=False)
    diff_norm = math.sqrt(float(np.dot(diff64, diff64)))
    ref_norm = math.sqrt(float(np.dot(ref64, ref64)))
    if not math.isfinite(ref_norm) or not math.isfinite(diff_norm):
        raise Verdict(
            "INCORRECT_NUMERICAL",
            f"output {index} cannot be compared: its error norm is not finite",
            errors,
        )
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


def _compare_all(
    outs: list[Any],
    refs: list[Any],
    rtol: float,
    atol: float,
    out_dtypes: list[str] | None = None,
    ref_dtypes: list[str] | None = None,
    nonfinite: str = "match",
) -> dict[str, float]:
    if len(outs) != len(refs):
        raise Verdict(
            "INCORRECT_SHAPE", f"the kernel returned {len(outs)} outputs, expected {len(refs)}"
        )
    worst = {"l2_rel_error": 0.0, "max_absolute_error": 0.0, "max_relative_error": 0.0}
    for index, (out, ref) in enumerate(zip(outs, refs, strict=True)):
        out_dtype = out_dtypes[index] if out_dtypes and len(out_dtypes) == len(outs) else None
        ref_dtype = ref_dtypes[index] if ref_dtypes and len(ref_dtypes) == len(refs) else None
        errors = _compare(out, ref, index, rtol, atol, out_dtype, ref_dtype, nonfinite)
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

    def candidate_inputs(self, inputs: list[Any]) -> list[Any]:
        """The inputs as the candidate is called with them (the task's transform applied).
        Without a transform they are the reference's own values: the arena write copies them
        anyway, and a copy here would leave the caches in another state before the kernel's
        call than before the reference's (a measured 4 % handicap for identical code)."""
        if self.to_kernel_inputs is None:
            return list(inputs)
        return list(self.to_kernel_inputs([_copy(v) for v in inputs]))

    def candidate_outputs(self, outputs: list[Any], refs: list[Any]) -> list[Any]:
        """The candidate's outputs in the reference's layout (the task's transform applied)."""
        if self.from_kernel_outputs is None:
            return outputs
        ref = refs[0] if len(refs) == 1 else tuple(refs)
        returned = outputs[0] if len(outputs) == 1 else tuple(outputs)
        try:
            return _as_list(self.from_kernel_outputs(returned, ref))
        except Exception as exc:  # the kernel's outputs do not fit the task's transform
            raise Verdict(
                "INCORRECT_SHAPE",
                f"the task's output transform cannot take the kernel's outputs: {exc!r}",
            ) from None


# --------------------------------------------------------------------------- the jails

CANDIDATE_FILE = Path(__file__).with_name("cpu_candidate.py")
CANDIDATE_IN_JAIL = "/opt/accelopt/cpu_candidate.py"
PING_ROUNDS = 16
FRESH_CORRECTNESS_SETS = 2
ARENA_SLACK_BYTES = 1 << 20
STOP_TIMEOUT_S = 2.0
"""How long a jailed runner may take to stop itself after answering (an honest one takes
microseconds; a busy host can delay it by a few scheduler slices)."""


def work_quota_mb(memory_limit_mb: int) -> int:
    """The most a jailed process may write into its work folder, all files together: a
    quarter of memory_limit_mb (the folder is a tmpfs charged to the same memory group, so the
    quota must leave room for the process itself to be told apart from the memory limit)."""
    return max(16, memory_limit_mb // 4)


class CallFailed(Exception):
    """The jailed process raised, returned something that is not arrays, or died."""

    def __init__(
        self, message: str, *, died: bool = False, code: int = 0, timed_out: bool = False
    ) -> None:
        super().__init__(message)
        self.message, self.died, self.code, self.timed_out = message, died, code, timed_out


class JailedRunner:
    """One jailed process (the candidate, or the reference being timed) and the harness's end
    of its pipes and arena files. It is frozen whenever it is not being timed."""

    def __init__(
        self,
        role: str,
        folder: Path,
        entry: Path,
        symbol: str,
        job: dict[str, Any],
        *,
        arena_bytes: int,
        destination_passing_style: bool = False,
    ) -> None:
        self.role = role
        self.folder = folder
        # The arenas are sealed memfds handed over as descriptors: nothing in the jail's folder
        # for it to swap for a symlink, and it cannot shrink them under our mappings (SIGBUS).
        self._arena_fds = [_sealed_memfd(f"accelopt-arena-{name}", arena_bytes) for name in "io"]
        fd_in, fd_out = self._arena_fds
        ctl_r, self._ctl = os.pipe()
        self._ack, ack_w = os.pipe()
        # Imported here: the jailed task helper imports this module and starts no jail.
        from accelopt_mcp.isolation.jail import jail_status, python_for_jail, spawn_jailed

        spec = {
            "entry": str(entry),
            "symbol": symbol,
            "use_torch": bool(job.get("use_torch")),
            "destination_passing_style": destination_passing_style,
            "output_plan": job.get("output_plan"),
            # It stops itself (and the rest of its jail) at every answer: see `freeze`.
            "stop_at_reply": True,
            "stop_jail": jail_status().kind == "bwrap",
        }
        cpus = set(job["cpus"]) if job.get("cpus") else None
        self.memory_limit_mb = int(job.get("memory_limit_mb", 4096))
        try:
            self.process = spawn_jailed(
                [
                    python_for_jail(),
                    "-I",
                    CANDIDATE_IN_JAIL,
                    str(ctl_r),
                    str(ack_w),
                    str(fd_in),
                    str(fd_out),
                    _padded(spec),
                ],
                work_dir=folder,
                read_only=[(CANDIDATE_FILE, CANDIDATE_IN_JAIL)],
                writable=[folder],
                pass_fds=(ctl_r, ack_w, fd_in, fd_out),
                env={k: str(v) for k, v in (job.get("jail_env") or {}).items()},
                cpus=cpus,
                memory_limit_mb=int(job.get("memory_limit_mb", 4096)),
                max_processes=int(job.get("jail_max_processes", 64)),
                # Everything written into the folder, all files together (a tmpfs, whose pages
                # count against memory_limit_mb as well).
                work_quota_mb=work_quota_mb(int(job.get("memory_limit_mb", 4096))),
            )
        finally:
            os.close(ctl_r)
            os.close(ack_w)
        self.arena_in = mmap.mmap(fd_in, arena_bytes)
        self.arena_out = mmap.mmap(fd_out, arena_bytes)
        self._frozen = False
        self.call_timeout_s = float(job.get("timeout_seconds", 60.0))
        """The longest one answer may take: timeout_seconds for the import and the first call,
        then what the first call's time calls for (Session._scale_call_limit)."""
        self.limit_reason = "timeout_seconds"
        self.last_foreign_ns = 0
        """Time inside the last `call`'s timed windows that went to other programs (taken out
        of what `call` returns)."""
        self.last_wall_ns = 0
        """The last `call`'s timed windows, wall clock."""
        self.accounted = True
        """Whether the jail's CPU time could be read for every call (else wall clock only)."""
        self.last_ping_foreign_ns = 0
        """What the last empty call's window gave to others: where this harness shares the
        jail's core, its own steps (thaw, request, reading the ack) while the jail waits."""
        # Unpredictable, so that no ack can be forged in advance for a request to come.
        self._sequence = secrets.randbits(30)

    # -- protocol

    def _request(self, op: int) -> int:
        """Send one request; its sequence number, which the ack must echo."""
        readable, _, _ = select.select([self._ack], [], [], 0)
        if readable:
            # An ack nobody asked for: answers queued in advance would shrink the timings.
            raise CallFailed(f"the {self.role} sent an unrequested reply (protocol violation)")
        self._sequence += 1
        os.write(self._ctl, MESSAGE.pack(op, self._sequence))
        return self._sequence

    def _read_ack(self, sequence: int | None = None) -> tuple[int, int]:
        data = b""
        deadline = time.monotonic() + self.call_timeout_s
        while len(data) < MESSAGE.size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._ack], [], [], left)[0]:
                # One call that never answers must not take the whole evaluation (its rivals'
                # results included) down with it: this process is ended and judged alone.
                self.process.kill()
                # A jail stuck at its memory limit (reclaiming, its OOM killer not yet done)
                # hangs: the limit is the reason, not the clock.
                self.check_limits()
                raise CallFailed(
                    f"the {self.role} did not answer within {self.call_timeout_s:g} s "
                    f"({self.limit_reason}; a hang, or far too slow: a slow kernel needs a "
                    "larger timeout_seconds, CLI --timeout)",
                    died=True,
                    timed_out=True,
                )
            chunk = os.read(self._ack, MESSAGE.size - len(data))
            if not chunk:
                raise CallFailed(self._death(), died=True)
            data += chunk
        status, value = MESSAGE.unpack(data)
        if sequence is not None and status == ACK_OK and value != sequence:
            raise CallFailed(
                f"the {self.role} answered request {value} to request {sequence} "
                "(protocol violation)"
            )
        return int(status), int(value)

    def _death(self) -> str:
        with contextlib.suppress(Exception):  # still running: judged as it is
            self.process.wait(timeout=5)
        try:
            self.check_limits()
        except CallFailed as exc:  # the reason it died, rather than the signal it died of
            return exc.message
        return self._death_plain()

    def _death_plain(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except Exception:  # still running but closed its end: it is broken either way
            code = None
        tail = self.process.stderr_tail(2000).strip()
        if code is None:
            how = "closed its pipe"
        elif code >= 0:
            how = f"exited with code {code}" + (
                " (os._exit or a hard exit in the kernel?)" if code else ""
            )
        else:
            from accelopt_mcp.isolation.sandbox import describe_signal

            how = describe_signal(-code, memory_exceeded=self.process.memory_exceeded)
            if self.process.fork_limit_hit:
                how += "; it also hit the process limit (fork bomb?)"
        return f"the {self.role} process {how}" + (f"; its stderr:\n{tail}" if tail else "")

    def _error_text(self) -> str:
        try:
            header = read_header(self.arena_out)
        except ArenaError as exc:
            return f"(its error report is unreadable: {exc})"
        return str(header.get("error") or "(no error text)")

    def wait_ready(self) -> None:
        """Until the kernel module is imported; CallFailed when it is not importable."""
        status, _ = self._read_ack()
        if status != ACK_READY:
            self.check_limits()
            raise CallFailed(self._error_text())
        self.freeze()
        self.check_limits()

    def check_limits(self) -> None:
        """CallFailed when the jail as a whole went past memory_limit_mb (its cgroup: every
        process, its children's too, and its tmpfs files) or filled its work folder's quota,
        whatever the call itself answered: the group's OOM killer may have ended only a child."""
        process = self.process
        if process.memory_limit_hit:
            peak = process.memory_peak_mb
            held = f" (peak {peak:.0f} MB)" if peak is not None else ""
            raise CallFailed(
                f"the {self.role} hit the memory limit: its processes and their /tmp, /dev/shm "
                f"and work-folder files together reached memory_limit_mb{held}; raise "
                "memory_limit_mb (the benchmark config) if it really needs more",
                died=True,
            )
        if process.work_quota_hit:
            quota = work_quota_mb(self.memory_limit_mb)
            raise CallFailed(
                f"the {self.role} filled its work folder's quota ({quota} MB written there in "
                "all, a quarter of memory_limit_mb); raise memory_limit_mb for a larger one",
                died=True,
            )

    def freeze(self) -> None:
        """Called after each answer. The jailed side stops itself the moment it has
        answered, with every thread and process of its jail (cpu_candidate's reply); this
        waits for that stop before freezing, so that nothing of the kernel runs between its
        "done" and the freeze, and fails a kernel that does not stop (one that patched the
        runner's reply, or keeps a process running past it)."""
        if self._frozen:
            return
        deadline = time.monotonic() + STOP_TIMEOUT_S
        spins = 0
        while not self.process.program_stopped():
            if self.process.returncode is not None:
                break  # it exited instead: judged by what it left
            if time.monotonic() > deadline:
                self.process.kill()
                self.check_limits()
                forks = (
                    "; it also hit the process limit (fork bomb?)"
                    if self.process.fork_limit_hit
                    else ""
                )
                raise CallFailed(
                    f"the {self.role} did not stop when it answered (within "
                    f"{STOP_TIMEOUT_S:g} s): something in its jail kept running past its "
                    f"'done' (a patched runner, or a process that resumes the others){forks}",
                    died=True,
                )
            spins += 1
            if spins > 50:
                time.sleep(0.0001)
            else:
                os.sched_yield()
        self.process.freeze()
        self._frozen = True

    def thaw(self) -> None:
        if self._frozen:
            self.process.thaw()
            self.process.continue_program()
            self._frozen = False

    def ping(self) -> int:
        """The round trip of an empty call, ns: the same clock, thaw, request, ack, freeze and
        contention steps as one timed call. Measured on the reference jail only, which runs our
        runner and the task's code: a candidate could answer pings slowly to inflate what is
        subtracted."""
        elapsed, foreign, _, _ = self._timed(OP_PING)
        self.last_ping_foreign_ns = foreign
        return elapsed - foreign

    def _timed(self, op: int) -> tuple[int, int, int, int]:
        """One timed request: (wall ns from before the thaw to the ack, of which ns that went
        to other programs, ack status, ack value). The process is frozen again on return.

        What went to others: the time the jail's threads and this harness were runnable but
        waiting for a CPU, never more than the window less what the jail's tasks ran (all of
        them, exited ones included). A kernel cannot pass its own work off as someone else's:
        its threads' time on a CPU counts as its own, and time asleep is no wait. The counters
        are read while it is frozen (before the thaw, after the freeze): no untimed CPU for
        the kernel. Every contestant, the reference included, is measured this one way."""
        usage_before = self.process.cpu_usage_ns()
        wait_before = self.process.run_queue_wait_ns() + _own_wait_ns()
        start = time.perf_counter_ns()
        self.thaw()
        sequence = self._request(op)
        status, value = self._read_ack(sequence)
        elapsed = time.perf_counter_ns() - start
        harness_wait = _own_wait_ns()
        # The clock stops at "done", and so does the kernel: its runner stops itself, every
        # thread and process of its jail with it, in the same breath as it answers (see
        # `freeze`, which waits for that stop and fails a kernel that prevents it, then
        # freezes). It gets no untimed CPU to finish work in the background or to evict the
        # caches the next contestant will use; what it wrote by then is what is judged.
        # Waiting for the stop is kept off the clock: on a busy host it would add the
        # scheduler's noise to every call of every contestant.
        self.freeze()
        usage_after = self.process.cpu_usage_ns()
        waited = self.process.run_queue_wait_ns() + harness_wait - wait_before
        if usage_before is None or usage_after is None:
            self.accounted = False
            return elapsed, 0, status, value
        ran = usage_after - usage_before
        return elapsed, min(max(0, waited), max(0, elapsed - ran)), status, value

    def call(self, sets: list[list[Any]]) -> tuple[int, list[list[Any]], list[list[str]]]:
        """Time len(sets) calls, one input set per round trip: (total ns less the time that
        went to other programs, outputs, dtype names).

        Each set is written while the process is frozen, so it never sees an input before its
        own call is on the clock (no work ahead, no batching across calls); the clock runs from
        before the thaw to "done"; the process is frozen at "done" and its outputs read then:
        work meant to go on after "done" (a background thread, a lazy object) never runs
        untimed, and what it had not written by then fails the comparison."""
        total = 0
        outputs: list[list[Any]] = []
        names: list[list[str]] = []
        self.last_foreign_ns = self.last_wall_ns = 0
        for values in sets:
            try:
                elapsed, out, out_names = self._call_one(values)
            except (OSError, TimeoutError) as exc:
                # A closed pipe, a jail that cannot be frozen or thawed: this process's fault
                # or its end, never a reason to void the others' results.
                raise CallFailed(f"the {self.role} could not be called: {exc!r}") from None
            self.check_limits()
            total += elapsed
            outputs.append(out)
            names.append(out_names)
        return total, outputs, names

    def _call_one(self, values: list[Any]) -> tuple[int, list[Any], list[str]]:
        """One call on one input set: (ns it took less what went to other programs, outputs,
        their dtype names)."""
        write_arena(self.arena_in, [values])
        elapsed, foreign, status, code = self._timed(OP_CALL)
        self.last_foreign_ns += foreign
        self.last_wall_ns += elapsed
        if status != ACK_OK:
            if code == FAILED_NOT_ARRAYS:
                raise Verdict("INCORRECT_DTYPE", self._error_text())
            raise CallFailed(self._error_text(), code=code)
        try:
            raw = snapshot_arena(self.arena_out)
            sets, names, _ = read_arena(raw, copy=False, expected_sets=1)
        except ArenaError as exc:
            raise Verdict(
                "INCORRECT_SHAPE", f"the {self.role}'s outputs are malformed: {exc}"
            ) from None
        return elapsed - foreign, sets[0], names[0]

    def close(self) -> None:
        # Killed as it stands, frozen since its last checked answer: never thawed to be asked
        # to quit, which would let its processes run (and allocate) after the last look at
        # its limits. SIGKILL lands before a thawed process runs another instruction.
        self.process.kill()
        for handle in (self.arena_in, self.arena_out):
            with contextlib.suppress(Exception):
                handle.close()
        for fd in (self._ctl, self._ack, *self._arena_fds):
            with contextlib.suppress(OSError):
                os.close(fd)


def _load_average() -> float:
    """The host's one-minute load average (runnable tasks), 0.0 when unreadable."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def _own_wait_ns() -> int:
    """Nanoseconds this thread has spent runnable but waiting for a CPU (0 if unknown)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _padded(spec: dict[str, Any]) -> str:
    """The jailed runner's spec as JSON of one fixed length: the reference's and the kernels'
    command lines (paths, symbol names) differ in length, which shifts where a process's stack
    and environment start, which showed as a steady few-percent difference between identical
    code run as the reference and run as a kernel."""
    text = json.dumps(spec)
    size = max(2048, 1 << (len(text) + 16).bit_length())
    return json.dumps({**spec, "pad": "x" * max(0, size - len(text) - 12)})[:size].ljust(size)


def _sealed_memfd(name: str, size: int) -> int:
    """An anonymous shared-memory file of `size` bytes that nobody can shrink or grow."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


def _as_arena_values(values: list[Any]) -> list[Any]:
    """Inputs as the arena carries them: NumPy arrays and Python scalars."""
    out: list[Any] = []
    for value in values:
        if isinstance(value, bool | int | float):
            out.append(value)
        elif _is_torch(value):
            out.append(_to_numpy(value))
        else:
            out.append(np.asarray(value))
    return out


def _set_bytes(values: list[Any]) -> int:
    return sum(np.asarray(v).nbytes for v in values if not isinstance(v, bool | int | float))


# --------------------------------------------------------------------------- modes


def describe(job: dict[str, Any]) -> dict[str, Any]:
    """Shapes and dtypes of an NKIBench task's inputs and outputs (seed 0), learnt in a jail:
    the task is code from outside (cpu_task.py). What comes back is unchecked JSON; the
    caller (tasks/probe.py) validates it."""
    from accelopt_mcp.backends.cpu_task import JailedHarness

    harness = JailedHarness(job, Path.cwd() / "task_jail")
    try:
        _stage("describe")
        return harness.describe()
    finally:
        harness.close()


def describe_harness(harness: Harness) -> dict[str, Any]:
    """describe's answer, computed inside the task's jail (cpu_task.serve)."""
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


def serve_task(argv: list[str]) -> int:
    """The task's jail (cpu_task.JailedHarness): import the task here, inside the jail, and
    answer the harness's requests (the protocol is in cpu_task's docstring)."""
    from accelopt_mcp.backends.cpu_task import ArenaFile, receive_message, send_message

    ctl, ack, fd_in, fd_out = (int(a) for a in argv[:4])
    spec = json.loads(argv[4])
    arena_in, arena_out = ArenaFile(fd_in), ArenaFile(fd_out)
    try:
        harness = Harness(spec)
    except StageError as error:
        send_message(
            ack, {"ok": False, "kind": error.kind, "message": error.message, "traceback": error.tb}
        )
        return 1
    send_message(
        ack,
        {
            "ok": True,
            "has_to": harness.to_kernel_inputs is not None,
            "has_from": harness.from_kernel_outputs is not None,
        },
    )
    while True:
        try:
            request = receive_message(ctl)
        except (EOFError, ValueError):
            return 0
        op = request.get("op")
        try:
            if op == "quit":
                return 0
            if op == "describe":
                send_message(ack, {"ok": True, "describe": describe_harness(harness)})
                continue
            if op == "inputs":
                values = _as_arena_values(harness.inputs(int(request["seed"])))
            elif op == "to_kernel":
                sets = arena_in.read(request.get("bytes"), expected_sets=1)
                values = _as_arena_values(harness.candidate_inputs(sets[0]))
            elif op == "from_kernel":
                sets = arena_in.read(request.get("bytes"), expected_sets=2)
                values = _as_arena_values(harness.candidate_outputs(sets[0], sets[1]))
            else:
                raise ValueError(f"unknown request {op!r}")
            send_message(ack, {"ok": True, "bytes": arena_out.write([values])})
        except Verdict as verdict:
            send_message(ack, {"ok": False, "verdict": True, "message": verdict.message})
        except StageError as error:
            send_message(
                ack,
                {"ok": False, "kind": error.kind, "message": error.message, "traceback": error.tb},
            )
        except BaseException as exc:
            send_message(
                ack,
                {
                    "ok": False,
                    "kind": "reference",
                    "message": f"the task's code failed ({op}): {exc!r}",
                    "traceback": _short_traceback(),
                },
            )


REFERENCE = "reference"
PRIMARY = "candidate"
CONTENDED_SHARE = 0.05
"""The host reads as busy when, over all contestants' timed calls, more than this share of the
time went to other programs (taken out of the samples, but their caches were shared)."""
STEAL_LIMIT = 0.05
STOP_RESAMPLES = 1000
LOOK_GROWTH = 1.5
"""Sampling looks at whether its question is answered each time the rounds have grown by half
since the last look (30, 45, 68, ... rounds): a dozen looks at most in an evaluation."""
LOOK_SET_ROUNDS = 3
"""A look may come before a pass's minimum once every live process set has this many rounds:
a kernel of seconds per call is not held to `iterations` rounds per set once it is clear."""
LOOKS = 12
"""Every look is a chance for a kernel no different from its rival to seem clear of 1.0 by
luck; the looks share the 5 % error between them: an interval must clear a threshold at
confidence 1 - 0.05 / LOOKS to stop sampling (the reported interval stays at 95 %)."""
BLOCK_SECONDS = 0.25
MIN_ROUNDS = 8
CALL_LIMIT_FACTOR = 20
"""After its first call, a contestant's calls may each take this many times as long as that
one did (never less than CALL_LIMIT_FLOOR_S, never more than timeout_seconds): a kernel that
hangs in round 5 is given up on in seconds, not a minute."""
CALL_LIMIT_FLOOR_S = 5.0
SLOW_CALL_NS = 500_000_000
"""A contestant whose calls take longer than this gets no warm-up calls: the correctness
calls before them have warmed it, and each would cost as much as a timed round."""
MAX_ROUNDS_PER_PASS = 400
MAX_LIVE_JAILS = 24
"""Processes (all frozen but the one being timed) kept alive at once; more sets than fit are
opened after closing the oldest."""


class _Clock:
    """The time cap on sampling, and /proc/stat's steal time over it."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + seconds
        self._stat = _cpu_times()
        self.capped = False

    def expired(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.capped = True
        return self.capped

    def steal_fraction(self) -> float:
        now = _cpu_times()
        if not now or not self._stat:
            return 0.0
        delta = [b - a for a, b in zip(self._stat, now, strict=False)]
        total = sum(delta)
        return delta[7] / total if total > 0 and len(delta) > 7 else 0.0


def _cpu_times() -> list[int]:
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def evaluate(job: dict[str, Any], result: dict[str, Any]) -> None:
    if job.get("jail") == "none":
        # The parent chose to run without a jail (ACCELOPT_JAIL=none, or none can run there);
        # this process's environment is the sandbox's allowlist, so the choice travels here.
        os.environ["ACCELOPT_JAIL"] = "none"
    from accelopt_mcp.backends.cpu_task import JailedHarness

    work = Path.cwd()
    # The task's own code (top level, get_inputs, transforms) runs only in this jail.
    harness = JailedHarness(job, work / "task_jail")
    try:
        _evaluate(job, result, harness, work)
    finally:
        harness.close()


def _evaluate(
    job: dict[str, Any], result: dict[str, Any], harness: JailedHarness, work: Path
) -> None:
    reference_dir = work / "reference_jail"
    reference_dir.mkdir(exist_ok=True)
    shutil.copy(job["reference_path"], reference_dir / "reference.py")

    # The first fixed seed sizes the arenas (one set per call, inputs or outputs).
    _stage("inputs")
    probe_inputs = harness.inputs(job["seeds"][0])
    set_bytes = max(_set_bytes(_as_arena_values(probe_inputs)), 1)
    output_bytes = sum(
        math.prod(o["shape"] or [1]) * storage_dtype(o["dtype"]).itemsize
        for o in job.get("output_plan") or []
        if o.get("shape") is not None
    )
    # One input (and output) set per call: room for the larger, with headroom for a kernel
    # that returns more than it should (refused by shape, not by a full arena).
    arena_bytes = min(
        job.get("max_arena_bytes", 256 << 20),
        4 * max(set_bytes, output_bytes) + ARENA_SLACK_BYTES,
    )
    Session(job, harness, result, reference_dir, arena_bytes).run()


def live_jails(kernels: int, max_sets: int) -> int:
    """How many jails an evaluation of `kernels` kernels keeps alive at most (the reference's
    included)."""
    contestants = kernels + 1
    return contestants * min(max_sets, max(1, MAX_LIVE_JAILS // contestants))


class ProcessSet:
    """One fresh process for the reference and for every live kernel, timed together."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.runners: dict[str, JailedRunner] = {}
        self.round_trip = 0.0
        self.own_share_ns = 0.0
        """Of an empty call's window, what read as others' time: this harness's own steps
        when it shares the core. Taken out of the samples like any other program's time,
        but not counted as the host being busy."""


class Session:
    """One evaluation's timing: the reference and every kernel (the candidate, and the
    baselines it is compared with) in interleaved rounds, over several sets of fresh
    processes, until the confidence intervals are narrow enough or the time cap is spent.

    In "primary" mode the first kernel is the candidate being evaluated: its failure ends the
    evaluation with that verdict. Any other kernel that fails (a baseline, or any kernel of a
    comparison) is dropped with its own outcome and the others go on."""

    def __init__(
        self,
        job: dict[str, Any],
        harness: JailedHarness,
        result: dict[str, Any],
        reference_dir: Path,
        arena_bytes: int,
    ) -> None:
        self.job = job
        self.harness = harness
        self.result = result
        self.reference_dir = reference_dir
        self.arena_bytes = arena_bytes
        self.kernels: dict[str, dict[str, Any]] = {k["label"]: k for k in job["kernels"]}
        if REFERENCE in self.kernels:
            raise StageError("setup", f"no kernel may be labelled {REFERENCE!r}")
        self.primary = bool(job.get("primary", True))
        self.live = list(self.kernels)
        self.flags: dict[str, list[str]] = {label: [] for label in self.kernels}
        if self.primary:
            # The candidate's flags are the result's: verdicts raised through main() keep them.
            self.flags[self.live[0]] = result["flags"]
        self.outcomes: dict[str, dict[str, Any]] = {}
        self.worst: dict[str, dict[str, float]] = {}
        self.seen: dict[str, list[tuple[list[Any], list[Any]]]] = {}
        self.samples: dict[str, list[float]] = {REFERENCE: [], **{k: [] for k in self.kernels}}
        self.block_of: list[int] = []
        self.per_call: dict[str, list[int]] = {}
        self.call_limit: dict[str, float] = {}
        """Per contestant, the longest one call may take once its first call is timed."""
        self.batch = 1
        self.foreign: dict[str, list[float]] = {REFERENCE: [], **{k: [] for k in self.kernels}}
        """Per contestant and timed round: the share of its window that went to other programs
        (taken out of its sample; reported)."""
        self.accounted = True
        """Whether every jail's CPU time could be read (else samples are wall clock)."""
        self.load_before = _load_average()
        self.stderr: dict[str, str] = {}
        self.timed_ns: dict[str, int] = {}
        self.timed_calls = 0
        self.round_trips: list[float] = []
        self.sets: list[ProcessSet] = []
        """The live process sets (older ones may have been closed; their samples stay)."""
        self.opened = 0
        self.per_set: dict[int, int] = {}
        self.rounds_done = 0
        self.next_look = 0
        self.answered = False
        """Whether sampling stopped because the question was answered."""
        """Rounds before the next look at whether the question is answered (LOOK_GROWTH)."""
        # Its own generator: the task's input drawing reseeds the `random` module.
        self.shuffler = random.Random(secrets.randbits(64))
        self.clock: _Clock | None = None
        self.analysis: Any = None

    # -- failures

    def _fail(self, label: str, exc: CallFailed | Verdict | StageError) -> None:
        """A kernel failed: the evaluation ends (the primary candidate) or it is dropped."""
        if isinstance(exc, CallFailed):
            kind = "timeout" if exc.timed_out else "runtime"
            exc = StageError(kind, f"the kernel failed: {exc.message}")
        if self.primary and label == PRIMARY:
            raise exc
        outcome: dict[str, Any] = {"flags": self.flags[label]}
        if isinstance(exc, Verdict):
            outcome |= {"status": exc.status, "message": exc.message}
            if exc.correctness is not None:
                outcome["correctness"] = exc.correctness
        else:
            outcome |= {
                "status": None,
                "error": {"kind": exc.kind, "message": exc.message, "traceback": exc.tb},
            }
        self.outcomes[label] = outcome
        self.live.remove(label)
        self.samples.pop(label, None)
        for pset in self.sets:
            runner = pset.runners.pop(label, None)
            if runner is not None:
                tail = runner.process.stderr_tail(4000).strip()
                if tail:
                    outcome["stderr"] = tail
                runner.close()
                self._note_peak(label, runner)

    def _reference(
        self, pset: ProcessSet, sets: list[list[Any]]
    ) -> tuple[int, list[list[Any]], list[list[str]]]:
        try:
            return pset.runners[REFERENCE].call(sets)
        except CallFailed as exc:
            raise StageError("reference", f"the reference failed: {exc.message}") from None
        except Verdict as verdict:  # the task's fault, not the candidate's
            raise StageError("reference", f"the reference failed: {verdict.message}") from None

    def _kernel(
        self, pset: ProcessSet, label: str, sets: list[list[Any]], what: str
    ) -> tuple[int, list[list[Any]], list[list[str]]]:
        harness = self.harness
        try:
            return pset.runners[label].call(
                [_as_arena_values(harness.candidate_inputs(s)) for s in sets]
            )
        except CallFailed as exc:
            kind = "timeout" if exc.timed_out else "runtime"
            raise StageError(kind, f"the kernel failed {what}: {exc.message}") from None

    # -- the whole evaluation

    def run(self) -> None:
        job = self.job
        target = float(job.get("target_ci", 0.01))
        min_sets = int(job.get("min_processes", 3))
        max_sets = max(min_sets, int(job.get("max_processes", 8)))
        rounds = int(job["iterations"])
        try:
            self._open_sets(min_sets)
            first = True
            while self.live and self.sets:
                # A pass: `iterations` rounds per initial set, going to the sets with the fewest
                # samples first, so that a set opened late catches up.
                self._pass(rounds * min_sets, BLOCK_SECONDS * (min_sets if first else 1))
                first = False
                if self.clock is not None and self.clock.capped:
                    break
                if self.answered or self._should_stop():
                    break
                if self.opened >= max_sets or (self.clock is not None and self.clock.expired()):
                    break
                self._open_sets(1)
        finally:
            for pset in self.sets:
                self._close_set(pset)
            self.sets.clear()
            if self.primary and PRIMARY in self.stderr:
                self.result["candidate_stderr"] = self.stderr[PRIMARY].strip()
        self._report(target)

    def _close_set(self, pset: ProcessSet) -> None:
        for label, runner in pset.runners.items():
            if label != REFERENCE:
                # What each kernel printed, every process's (the newest last, capped).
                tail = runner.process.stderr_tail(4000).strip()
                if tail:
                    self.stderr[label] = (self.stderr.get(label, "") + "\n" + tail)[-4000:]
            runner.close()
            self._note_peak(label, runner)
        pset.runners.clear()

    def _note_peak(self, label: str, runner: JailedRunner) -> None:
        """The largest memory peak of any of `label`'s jails (its memory cgroup: every process
        and tmpfs page together), for the evaluation's measurement."""
        peak = runner.process.memory_peak_mb
        if peak is not None:
            peaks = self.result.setdefault("jail_memory_peak_mb", {})
            peaks[label] = max(peak, peaks.get(label, 0.0))
        # What held memory_limit_mb: the jail's memory cgroup, or RLIMIT_AS per process.
        self.result.setdefault("jail_memory_limit_by", {})[label] = runner.process.memory_limit_by

    def _open_sets(self, count: int) -> None:
        """Start `count` sets of fresh processes (the reference and every live kernel, all at
        once), then check and warm each. Processes stay alive, frozen, while the other sets
        are timed; beyond MAX_LIVE_JAILS the oldest set is closed (its samples stay)."""
        job, harness = self.job, self.harness
        live_cap = max(1, MAX_LIVE_JAILS // (1 + len(self.kernels)))
        new: list[ProcessSet] = []
        _stage(f"jail start (process set {self.opened + 1})")
        for _ in range(min(count, live_cap)):
            while self.sets and len(self.sets) >= live_cap:
                self._close_set(self.sets.pop(0))
            pset = ProcessSet(self.opened)
            self.opened += 1
            new.append(pset)
            # Listed before its processes start, so that a failure half-way closes them too.
            self.sets.append(pset)
            pset.runners[REFERENCE] = JailedRunner(
                REFERENCE,
                self.reference_dir,
                self.reference_dir / "reference.py",
                "forward" if harness.style == "nkibench" else "run",
                job,
                arena_bytes=self.arena_bytes,
            )
            for label in self.live:
                spec = self.kernels[label]
                folder = Path(spec["kernel_dir"]).resolve()
                pset.runners[label] = JailedRunner(
                    PRIMARY if label == PRIMARY and self.primary else f"kernel {label}",
                    folder,
                    folder / spec["entry_file"],
                    spec["entry_symbol"],
                    job,
                    arena_bytes=self.arena_bytes,
                    destination_passing_style=bool(spec.get("destination_passing_style")),
                )
            if pset.index == 0:
                processes = [runner.process for runner in pset.runners.values()]
                self.result["isolation"] = {
                    "isolated": all(p.isolated for p in processes),
                    "freeze_method": processes[-1].freeze_method,
                }
        for pset in new:
            self._ready(pset)
        for pset in new:
            if not self.live:
                return
            _stage(f"calibration (process set {pset.index + 1})")
            # Calibrated on the reference jail: the same runner, thaw and freeze as the
            # kernels', but code we trust; a candidate could answer pings slowly to shrink its
            # own figures.
            trips, own = [], []
            for _ in range(PING_ROUNDS):
                trips.append(pset.runners[REFERENCE].ping())
                own.append(pset.runners[REFERENCE].last_ping_foreign_ns)
            pset.round_trip = statistics.median(trips)
            pset.own_share_ns = statistics.median(own)
            self.round_trips.append(pset.round_trip)
            self._correctness(pset)
            if not self.live:
                return
            if pset.index == 0:
                fastest = max(1, min(min(times) for times in self.per_call.values()))
                self.batch = max(1, min(MAX_BATCH, TARGET_SAMPLE_NS // fastest))
            _stage(f"warm-up (process set {pset.index + 1})")
            for _ in range(job["warmup_runs"]):
                sets = [_as_arena_values(harness.inputs(secrets.randbits(31)))]
                if self._needs_warmup(REFERENCE):
                    self._reference(pset, sets)
                for label in list(self.live):
                    if not self._needs_warmup(label):
                        continue
                    try:
                        self._kernel(pset, label, sets, "during warm-up")
                    except (Verdict, StageError) as exc:
                        self._fail(label, exc)
        if self.clock is None:
            self.clock = _Clock(float(job.get("max_timing_seconds", 20.0)))

    def _needs_warmup(self, label: str) -> bool:
        times = self.per_call.get(label) or [0]
        return min(times) <= SLOW_CALL_NS

    def _ready(self, pset: ProcessSet) -> None:
        _stage("reference import")
        try:
            pset.runners[REFERENCE].wait_ready()
        except CallFailed as exc:
            raise StageError(
                "reference", f"the reference cannot be imported: {exc.message}"
            ) from None
        _stage("kernel import")
        for label in list(self.live):
            try:
                pset.runners[label].wait_ready()
            except CallFailed as exc:
                if pset.index == 0:
                    self._fail(label, StageError("compile", exc.message))
                else:
                    self._fail(
                        label,
                        StageError(
                            "runtime",
                            f"the kernel imported once but not in process set {pset.index + 1}: "
                            f"{exc.message}",
                        ),
                    )

    def _correctness(self, pset: ProcessSet) -> None:
        """The fixed seeds, then fresh sets no one could know in advance (one fresh set in
        later process sets). Every output is checked against the reference output for its own
        input."""
        harness, job = self.harness, self.job
        first = pset.index == 0
        fixed: list[int] = job["seeds"] if first else []
        fresh = [secrets.randbits(31) for _ in range(FRESH_CORRECTNESS_SETS if first else 1)]
        for index, seed in enumerate([*fixed, *fresh]):
            if index < len(fixed):
                label_text = f"seed {seed}"
            else:
                label_text = f"fresh input set {index - len(fixed) + 1}"
                if not first:
                    label_text += f" of process set {pset.index + 1}"
            _stage(f"correctness {label_text}")
            inputs = [_as_arena_values(harness.inputs(seed))]
            ref_ns, refs, ref_names = self._reference(pset, inputs)
            self.per_call.setdefault(REFERENCE, []).append(ref_ns)
            self._scale_call_limit(pset, REFERENCE)
            for label in list(self.live):
                try:
                    cand_ns, outs, out_names = self._kernel(pset, label, inputs, f"on {label_text}")
                    self.per_call.setdefault(label, []).append(cand_ns)
                    self._scale_call_limit(pset, label)
                    self._check(
                        label,
                        outs[0],
                        refs[0],
                        out_names[0],
                        ref_names[0],
                        label_text,
                        # Only where the fixed seeds were just passed: in a later process set
                        # a failure on fresh inputs says nothing about following them.
                        fresh_input=first and index >= len(fixed),
                        fixed_count=len(job["seeds"]),
                    )
                except (Verdict, StageError) as exc:
                    self._fail(label, exc)
        for label in self.live:
            self._worst(label)

    def _scale_call_limit(self, pset: ProcessSet, label: str) -> None:
        """From its first timed call on, a contestant's calls are bounded by what that call
        took (CALL_LIMIT_FACTOR, floor and cap), in this and every later process set."""
        if label not in self.call_limit:
            full = float(self.job.get("timeout_seconds", 60.0))
            first_s = self.per_call[label][0] / 1e9
            self.call_limit[label] = min(full, max(CALL_LIMIT_FLOOR_S, CALL_LIMIT_FACTOR * first_s))
        runner = pset.runners.get(label)
        if runner is not None and runner.call_timeout_s != self.call_limit[label]:
            runner.call_timeout_s = self.call_limit[label]
            runner.limit_reason = (
                "timeout_seconds"
                if runner.call_timeout_s >= float(self.job.get("timeout_seconds", 60.0))
                else f"{CALL_LIMIT_FACTOR}x its first call, at least {CALL_LIMIT_FLOOR_S:g} s"
            )

    def _worst(self, label: str) -> dict[str, float]:
        """The kernel's worst errors so far (all zero before its first check)."""
        return self.worst.setdefault(
            label, {"l2_rel_error": 0.0, "max_absolute_error": 0.0, "max_relative_error": 0.0}
        )

    def _check(
        self,
        label: str,
        outs: list[Any],
        refs: list[Any],
        out_names: list[str],
        ref_names: list[str],
        what: str,
        *,
        fresh_input: bool,
        fixed_count: int,
    ) -> None:
        harness, job = self.harness, self.job
        outs_ref_layout = harness.candidate_outputs(outs, refs)
        seen = self.seen.setdefault(label, [])
        try:
            errors = _compare_all(
                outs_ref_layout,
                refs,
                job["rtol"],
                job["atol"],
                out_names,
                ref_names,
                nonfinite=job.get("nonfinite", "match"),
            )
        except Verdict as verdict:
            for prev_outs, prev_refs in seen:
                if _same_outputs(outs_ref_layout, prev_outs) and not _same_outputs(refs, prev_refs):
                    self.flags[label].append("constant_output")
                    verdict.message += (
                        "; the kernel returned the same output for different inputs while the "
                        "reference changed (a cached or constant answer)"
                    )
                    break
            if fresh_input:
                self.flags[label].append("input_independent_output")
                verdict.message += (
                    f"; it was correct on the {fixed_count} fixed seeds but not on inputs drawn "
                    "for this evaluation alone (an answer that does not follow its input)"
                )
            verdict.message = f"{what}: {verdict.message}"
            raise
        worst = self._worst(label)
        for key in worst:
            worst[key] = max(worst[key], errors[key])
        seen.append((outs_ref_layout, refs))

    def _pass(self, rounds: int, min_seconds: float) -> None:
        """At least `rounds` rounds (and `min_seconds` of them), each on the live process set
        with the fewest samples: every contestant once per round, on the same fresh inputs,
        in a random order. Every round is kept, and no contestant's figures decide anything
        about the others': what went to other programs is taken out of each call alike
        (JailedRunner._timed), so a busy host costs precision, not fairness, and a kernel has
        no re-take to buy."""
        harness, job = self.harness, self.job
        assert self.clock is not None
        taken = 0
        started = time.monotonic()
        # Starting a set of processes costs a few hundred ms, and within-process noise shrinks
        # with rounds while between-process noise shrinks only with sets, so a cheap round is
        # repeated until the pass has paid for what it cost to start its sets.
        while (
            self.live
            and self.sets
            and taken < MAX_ROUNDS_PER_PASS
            and (taken < rounds or time.monotonic() - started < min_seconds)
        ):
            # The cap never leaves fewer rounds than an interval needs.
            if self.clock.expired() and self.rounds_done >= MIN_ROUNDS:
                return
            pset = min(self.sets, key=lambda s: (self.per_set.get(s.index, 0), s.index))
            sets = [
                _as_arena_values(harness.inputs(secrets.randbits(31))) for _ in range(self.batch)
            ]
            # A fresh random order every round: a rotation would have each contestant follow
            # the same predecessor every time, and whatever one leaves behind (caches, clock
            # frequency) would land on the same rival every round.
            order = [REFERENCE, *self.live]
            self.shuffler.shuffle(order)
            timed: dict[str, tuple[int, list[list[Any]], list[list[str]]]] = {}
            failed = False
            for role in order:
                runner = pset.runners[role]
                if role == REFERENCE:
                    # The reference failing is the task's fault: it ends the evaluation.
                    timed[role] = self._reference(pset, sets)
                else:
                    try:
                        timed[role] = self._kernel(
                            pset, role, sets, f"in timed round {self.rounds_done + 1}"
                        )
                    except (Verdict, StageError) as exc:
                        self._fail(role, exc)
                        failed = True
                        break
                others = max(0.0, runner.last_foreign_ns - pset.own_share_ns * len(sets))
                self.foreign[role].append(others / max(runner.last_wall_ns, 1))
                self.accounted = self.accounted and runner.accounted
            if failed:
                continue
            _, refs, ref_names = timed[REFERENCE]
            for label in list(self.live):
                _, outs, out_names = timed[label]
                for j in range(len(sets)):
                    try:
                        _compare_all(
                            harness.candidate_outputs(outs[j], refs[j]),
                            refs[j],
                            job["rtol"],
                            job["atol"],
                            out_names[j],
                            ref_names[j],
                            nonfinite=job.get("nonfinite", "match"),
                        )
                    except Verdict as verdict:
                        self.flags[label].append("timed_output_mismatch")
                        verdict.message = (
                            f"timed call {j} of round {self.rounds_done + 1} (fresh inputs): "
                            f"{verdict.message}; the kernel was correct in the correctness pass "
                            "but not while being timed"
                        )
                        self._fail(label, verdict)
                        failed = True
                        break
            if failed:
                continue
            for role in [REFERENCE, *self.live]:
                elapsed = timed[role][0]
                net = max(elapsed - int(pset.round_trip) * len(sets), len(sets))
                self.samples[role].append(net / len(sets))
                self.timed_ns[role] = self.timed_ns.get(role, 0) + elapsed
            self.block_of.append(pset.index)
            self.per_set[pset.index] = self.per_set.get(pset.index, 0) + 1
            self.timed_calls += len(sets)
            self.rounds_done += 1
            taken += 1
            # Past the pass's minimum, the rest of it only buys precision: none is needed once
            # the question is answered.
            if (taken >= rounds or self._every_set_has(LOOK_SET_ROUNDS)) and self._should_stop():
                return

    # -- statistics

    def _decisive(self, analysis: Any) -> list[Any]:
        """The speedup intervals the caller reads: the candidate's over the reference and each
        baseline (in a comparison, every pair)."""
        return [analysis.speedups[pair] for pair in self._pairs() if pair in analysis.speedups]

    def _every_set_has(self, rounds: int) -> bool:
        return all(self.per_set.get(pset.index, 0) >= rounds for pset in self.sets)

    def _should_stop(self) -> bool:
        """A look, when one is due (LOOK_GROWTH): is the question answered?"""
        if self.rounds_done < max(MIN_ROUNDS, self.next_look):
            return False
        self.next_look = math.ceil(self.rounds_done * LOOK_GROWTH)
        level = float(self.job.get("confidence", 0.95))
        usual = self._analyse(STOP_RESAMPLES)
        strict = self._analyse(STOP_RESAMPLES, confidence=1 - (1 - level) / LOOKS)
        self.answered = usual is not None and strict is not None and self._answered(usual, strict)
        return self.answered

    def _answered(self, analysis: Any, strict: Any = None) -> bool:
        """Whether sampling has answered what it was asked, for every speedup the caller reads:
        its interval is within ±target_ci, or it lies wholly on one side of every ratio in
        decide_at (say 1.0: "faster or slower?"; a run's thresholds: "does it clear 1.04x?").
        An interval that still straddles one of them needs more samples; the median
        latencies' own intervals (which differ between processes far more than a paired
        ratio does) are reported, not sampled down. Never before MIN_ROUNDS. `strict`: the same
        samples' intervals at the stricter level a threshold must be cleared at while sampling
        (LOOKS); the width target is judged at the usual level."""
        if self.rounds_done < MIN_ROUNDS:
            return False
        target = float(self.job.get("target_ci", 0.01))
        intervals = self._decisive(analysis)
        if not intervals:
            return bool(analysis.widest() <= target)
        clearing = self._decisive(strict) if strict is not None else intervals
        thresholds = [float(t) for t in self.job.get("decide_at") or []]
        for interval, cleared in zip(intervals, clearing, strict=True):
            if interval.relative_half_width <= target:
                continue
            if not thresholds or any(cleared.low <= t <= cleared.high for t in thresholds):
                return False
        return True

    def _pairs(self) -> list[tuple[str, str]]:
        if self.primary:
            if PRIMARY not in self.live:
                return []
            return [(PRIMARY, other) for other in [REFERENCE, *self.live] if other != PRIMARY]
        pairs = [(label, REFERENCE) for label in self.live]
        pairs += [(a, b) for a in self.live for b in self.live if a != b]
        return pairs

    def _analyse(self, resamples: int, confidence: float | None = None) -> Any:
        from accelopt_mcp.stats import analyse

        if not self.block_of:
            return None
        names = [REFERENCE, *self.live]
        self.analysis = analyse(
            {name: self.samples[name] for name in names},
            self.block_of,
            confidence=confidence or float(self.job.get("confidence", 0.95)),
            resamples=resamples,
            pairs=self._pairs(),
        )
        return self.analysis

    def _set_medians(self, name: str, sets: list[int]) -> list[float]:
        """The median of one contestant's samples in each process set, in `sets` order."""
        values = np.asarray(self.samples[name])
        blocks = np.asarray(self.block_of)
        return [float(np.median(values[blocks == k])) for k in sets]

    def _report(self, target: float) -> None:
        from accelopt_mcp.stats import drift

        result = self.result
        result["harness_overhead_ns"] = (
            int(statistics.median(self.round_trips)) if self.round_trips else 0
        )
        kernels: dict[str, Any] = {}
        for label in self.kernels:
            if label in self.outcomes:
                kernels[label] = self.outcomes[label]
            else:
                kernels[label] = {
                    "status": "PASSED",
                    "flags": self.flags[label],
                    "correctness": self.worst.get(label),
                }
        result["kernels"] = kernels
        if self.primary and PRIMARY in self.worst:
            result["correctness"] = self.worst[PRIMARY]
        analysis = self._analyse(RESAMPLES_FINAL) if self.live else None
        if analysis is None:
            return
        clock = self.clock
        steal = clock.steal_fraction() if clock is not None else 0.0
        # Each sample relative to its own process set's median: differences between processes
        # are not drift in time.
        sets = sorted(set(self.block_of))
        set_medians = {name: self._set_medians(name, sets) for name in [REFERENCE, *self.live]}
        reference = dict(zip(sets, set_medians[REFERENCE], strict=True))
        shift = drift(
            [v / reference[b] for v, b in zip(self.samples[REFERENCE], self.block_of, strict=True)]
        )
        rounds = len(self.block_of)
        decisive = self._decisive(analysis)
        widest = max(i.relative_half_width for i in decisive) if decisive else analysis.widest()
        medians = [s.median.relative_half_width for s in analysis.summaries.values()]
        shares = {name: self.foreign[name] for name in [REFERENCE, *self.live]}
        every = [v for values in shares.values() for v in values]
        foreign_share = float(np.mean(every)) if every else 0.0
        contended = foreign_share > CONTENDED_SHARE or steal > STEAL_LIMIT
        result["analysis"] = {
            "blocks": analysis.blocks,
            "rounds": rounds,
            "calls_per_sample": self.batch,
            "target_ci": target,
            "widest": widest,
            "widest_median": max(medians, default=math.inf),
            "target_met": widest <= target,
            "decide_at": [float(t) for t in self.job.get("decide_at") or []],
            "answered": self.answered,
            "time_capped": bool(clock and clock.capped),
            "summaries": {
                name: {
                    "median": s.median.estimate,
                    "low": s.median.low,
                    "high": s.median.high,
                    "q1": s.q1,
                    "q3": s.q3,
                    "min": s.minimum,
                    "max": s.maximum,
                    "mean": s.mean,
                    "stdev": s.stdev,
                    "samples": s.samples,
                }
                for name, s in analysis.summaries.items()
            },
            "block_medians": set_medians,
            "speedups": [
                {"kernel": a, "baseline": b, "estimate": i.estimate, "low": i.low, "high": i.high}
                for (a, b), i in analysis.speedups.items()
            ],
            "contention": {
                "steal_fraction": steal,
                "drift": shift,
                "contended": contended,
                "foreign_share": foreign_share,
                "foreign_share_by_contestant": {
                    name: float(np.median(values)) if values else 0.0
                    for name, values in shares.items()
                },
                "busy_rounds_by_contestant": {
                    name: sum(v > CONTENDED_SHARE for v in values)
                    for name, values in shares.items()
                },
                "accounted": self.accounted,
                "load_before": self.load_before,
                "load_after": _load_average(),
            },
        }
        result["timed_calls"] = self.timed_calls
        result["timed_ns"] = self.timed_ns


RESAMPLES_FINAL = 2000


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

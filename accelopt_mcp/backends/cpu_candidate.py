"""The jailed side of a cpu evaluation: import one kernel, call it when told, write its outputs.

Run as a file inside the jail (`python -I cpu_candidate.py CTL ACK IN OUT SPEC`, all four
numbers file descriptors: two pipes and two sealed memfds), so it
imports nothing of the project: the jail shows it this file, the interpreter, NumPy and its own
work dir. Everything here may be overwritten by the kernel it imports — it shares this
interpreter — so nothing here is trusted: the harness (cpu_runner.py) keeps the clock, holds the
reference outputs and checks what lands in the output file, and it freezes this process
whenever it is not timing a call.

Protocol (little-endian uint32 pairs on two pipes; a request carries a sequence number that
its ACK OK echoes):
- after importing the kernel: ACK (READY, 0) or (FAILED, n) with an error text in OUT;
- CALL: the IN file holds the input sets (the harness sends one per call); call the kernel on
  each, write the output sets to OUT, then ACK (OK, seq), or (FAILED, n) when the kernel
  raised or returned something that is not arrays;
- PING: ACK (OK, seq) at once (the harness calibrates its round trip with it);
- PROFILE: call the kernel once on the one set in IN under a line tracer (`traced_call`) and
  write its report (not the outputs) to OUT's header as "breakdown", then ACK (OK, seq); the
  harness asks for it only after the timed rounds, and whatever comes back is hostile data to
  it (the kernel shares this interpreter and can forge or suppress the report);
- QUIT: exit.
After every ACK it stops itself (SIGSTOP) with the rest of its jail; the harness waits for
that stop, freezes the jail, and sends SIGCONT after the next thaw (cpu_candidate_parent's
JailedRunner).

Arena files (IN and OUT): an 8-byte header length, a JSON header, then the data, each array at
a 64-byte aligned offset: {"sets": [[{"dtype": "float32", "shape": [2, 3], "offset": 4096},
{"scalar": 1.5}, ...], ...], "error": "..."}. The harness writes IN and reads OUT through
`read_arena`, which trusts nothing it reads.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
import json
import linecache
import math
import mmap
import os
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

OP_CALL, OP_PING, OP_QUIT, OP_PROFILE = 1, 2, 3, 4
ACK_READY, ACK_OK, ACK_FAILED = 1, 2, 3
MESSAGE = struct.Struct("<II")
HEADER_LEN = struct.Struct("<Q")
ALIGN = 64
MAX_HEADER_BYTES = 1 << 20
MAX_NDIM = 8
MAX_ERROR_CHARS = 4000
# dtypes an arena may hold; a torch output of another float dtype travels as float32 with its
# torch dtype name, so the harness can still check the dtype.
ARENA_DTYPES = frozenset(
    {"float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"}
)
TORCH_FLOAT_NAMES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})


FAILED_IMPORT, FAILED_RAISED, FAILED_NOT_ARRAYS = 1, 2, 3
"""The value of an ACK_FAILED: why the call failed."""


def storage_dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype an arena stores a value of dtype `name` in."""
    return np.dtype("float32" if name in TORCH_FLOAT_NAMES else name)


class ArenaError(ValueError):
    """An arena's header or data is not what the protocol allows."""


class NotArrays(TypeError):
    """The kernel returned something other than arrays."""


def _kernel_traceback(exc: BaseException) -> str:
    """The exception's traceback without this file's own frames: the kernel's are what count."""
    summary = traceback.TracebackException.from_exception(exc)
    summary.stack = traceback.StackSummary.from_list(
        [frame for frame in summary.stack if frame.filename != __file__]
    )
    return "".join(summary.format())[-MAX_ERROR_CHARS:]


# --------------------------------------------------------------------------- arenas


def _aligned(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


def _layout(
    sets: Sequence[Sequence[Any]], dtype_names: Sequence[Sequence[str]] = ()
) -> tuple[bytes, list[tuple[int, np.ndarray[Any, Any]]], int, int]:
    """(header, arrays with their data offsets, where data starts, bytes in all) of `sets`."""
    entries: list[list[dict[str, Any]]] = []
    placed: list[tuple[int, np.ndarray[Any, Any]]] = []
    offset = 0
    for s, values in enumerate(sets):
        row: list[dict[str, Any]] = []
        for v, value in enumerate(values):
            if isinstance(value, bool | int | float):
                row.append({"scalar": value})
                continue
            array = np.ascontiguousarray(value)
            name = dtype_names[s][v] if dtype_names else array.dtype.name
            row.append({"dtype": name, "shape": list(array.shape), "offset": offset})
            placed.append((offset, array))
            offset = _aligned(offset + array.nbytes)
        entries.append(row)
    header = json.dumps({"sets": entries}).encode()
    data_start = _aligned(HEADER_LEN.size + len(header))
    return header, placed, data_start, data_start + offset


def arena_bytes(sets: Sequence[Sequence[Any]]) -> int:
    """How many bytes `write_arena` needs for `sets` (to map no more than that)."""
    return _layout(sets)[3]


def write_arena(
    buffer: mmap.mmap, sets: Sequence[Sequence[Any]], *, dtype_names: Sequence[Sequence[str]] = ()
) -> None:
    """Lay out `sets` (lists of numpy arrays or Python scalars) in `buffer`. dtype_names, when
    given, overrides the recorded dtype of each array (torch dtypes travelling as float32)."""
    header, placed, data_start, total = _layout(sets, dtype_names)
    if total > len(buffer):
        raise ArenaError(f"the outputs need {total} bytes; the output file holds {len(buffer)}")
    for start, array in placed:
        view = np.frombuffer(buffer, dtype=np.uint8, count=array.nbytes, offset=data_start + start)
        view[:] = array.reshape(-1).view(np.uint8)
    buffer[: HEADER_LEN.size] = HEADER_LEN.pack(len(header))
    buffer[HEADER_LEN.size : HEADER_LEN.size + len(header)] = header


def write_breakdown(buffer: mmap.mmap, report: dict[str, Any]) -> None:
    """The PROFILE request's answer: `report` in the header, no sets (no outputs to judge)."""
    header = json.dumps({"sets": [], "breakdown": report}).encode()
    if HEADER_LEN.size + len(header) > min(len(buffer), MAX_HEADER_BYTES):
        header = json.dumps({"sets": [], "error": "the breakdown does not fit"}).encode()
    buffer[: HEADER_LEN.size] = HEADER_LEN.pack(len(header))
    buffer[HEADER_LEN.size : HEADER_LEN.size + len(header)] = header


def write_error(buffer: mmap.mmap, message: str) -> None:
    header = json.dumps({"sets": [], "error": message[-MAX_ERROR_CHARS:]}).encode()
    header = header[: len(buffer) - HEADER_LEN.size]
    buffer[: HEADER_LEN.size] = HEADER_LEN.pack(len(header))
    buffer[HEADER_LEN.size : HEADER_LEN.size + len(header)] = header


Buffer = mmap.mmap | bytes


def snapshot_arena(buffer: mmap.mmap) -> bytes:
    """The bytes of the arena that its header says are in use, read once: what the harness
    judges (the writer cannot change a copy), and what it compares the arena with later."""
    (length,) = HEADER_LEN.unpack_from(buffer, 0)
    if not 0 < length <= min(MAX_HEADER_BYTES, len(buffer) - HEADER_LEN.size):
        raise ArenaError(f"the header length {length} is out of range")
    head = bytes(buffer[: HEADER_LEN.size + length])
    _, _, used = read_arena(head, layout_only=True, size=len(buffer))
    return head + bytes(buffer[len(head) : used])


def read_header(buffer: Buffer, size: int | None = None) -> dict[str, Any]:
    """The arena's JSON header, checked for size and shape (`size`: the arena's, when
    `buffer` holds only its first bytes)."""
    (length,) = HEADER_LEN.unpack_from(buffer, 0)
    if not 0 < length <= min(MAX_HEADER_BYTES, (size or len(buffer)) - HEADER_LEN.size):
        raise ArenaError(f"the header length {length} is out of range")
    try:
        header = json.loads(bytes(buffer[HEADER_LEN.size : HEADER_LEN.size + length]))
    except (ValueError, RecursionError) as exc:
        raise ArenaError(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("sets"), list):
        raise ArenaError("the header has no list of sets")
    return header


def read_arena(
    buffer: Buffer,
    *,
    copy: bool = True,
    expected_sets: int | None = None,
    layout_only: bool = False,
    size: int | None = None,
) -> tuple[list[list[Any]], list[list[str]], int]:
    """(sets of arrays/scalars, their dtype names, bytes the arena uses). Arrays are copies
    unless copy=False (or views of an immutable `bytes` snapshot). Everything is checked
    before anything is copied: the number of sets (when expected), each entry's dtype, shape
    and bounds, that no two arrays overlap and that together they fit in the arena, so a
    hostile header cannot make the reader copy more than the arena holds. Raises ArenaError."""
    size = size or len(buffer)
    header = read_header(buffer, size)
    if expected_sets is not None and len(header["sets"]) != expected_sets:
        raise ArenaError(f"{len(header['sets'])} output sets for {expected_sets} calls")
    (length,) = HEADER_LEN.unpack_from(buffer, 0)
    data_start = _aligned(HEADER_LEN.size + length)
    used = data_start
    spans: list[tuple[int, int]] = []
    layout: list[list[tuple[Any, str, int, int, list[int]]]] = []
    for row in header["sets"]:
        if not isinstance(row, list):
            raise ArenaError("a set is not a list")
        checked = [_check_entry(entry, data_start, size) for entry in row]
        spans += [(start, end) for _, _, start, end, _ in checked if end > start]
        layout.append(checked)
        used = max([used, *(end for _, _, _, end, _ in checked)])
    spans.sort()
    if any(b_start < a_end for (_, a_end), (b_start, _) in itertools.pairwise(spans)):
        raise ArenaError("two outputs overlap in the output file")
    if layout_only:
        return [], [], used
    sets: list[list[Any]] = []
    names: list[list[str]] = []
    for checked in layout:
        values: list[Any] = []
        row_names: list[str] = []
        for scalar, name, start, end, shape in checked:
            if start == end and scalar is not None:
                values.append(scalar)
            else:
                storage = storage_dtype(name)
                count = (end - start) // storage.itemsize
                array = np.frombuffer(buffer, dtype=storage, count=count, offset=start)
                array = array.reshape(shape)
                values.append(array.copy() if copy else array)
            row_names.append(name)
        sets.append(values)
        names.append(row_names)
    return sets, names, used


def _check_entry(entry: Any, data_start: int, size: int) -> tuple[Any, str, int, int, list[int]]:
    """(scalar or None, dtype name, start, end, shape) of one entry, checked."""
    if not isinstance(entry, dict):
        raise ArenaError("an output entry is not an object")
    if "scalar" in entry:
        value = entry["scalar"]
        if not isinstance(value, bool | int | float):
            raise ArenaError("a scalar output is not a number")
        return value, type(value).__name__, 0, 0, []
    name, shape, offset = entry.get("dtype"), entry.get("shape"), entry.get("offset")
    if name not in ARENA_DTYPES and name not in TORCH_FLOAT_NAMES:
        raise ArenaError(f"dtype {name!r} is not one an output may have")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise ArenaError(f"shape {shape!r} is not a list of at most {MAX_NDIM} sizes")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ArenaError(f"offset {offset!r} is not a byte offset")
    storage = storage_dtype(str(name))
    start = data_start + offset
    end = start + math.prod(shape) * storage.itemsize
    if end > size:
        raise ArenaError("an output runs past the end of the output file")
    return None, str(name), start, end, list(shape)


# --------------------------------------------------------------------------- the candidate


TORCH_HINT = "this task needs PyTorch: pip install torch==2.13.0"


def _import_failure(exc: BaseException) -> str:
    """What went wrong importing the kernel, first line first."""
    if isinstance(exc, SyntaxError):
        head = f"syntax error: {exc}"
    elif isinstance(exc, ModuleNotFoundError):
        head = f"import error: {exc}" + (f"; {TORCH_HINT}" if exc.name == "torch" else "")
    elif isinstance(exc, ImportError) and "defines no function" in str(exc):
        return str(exc)
    else:
        head = f"the kernel module failed to load: {exc!r}"
    return f"{head}\n{_kernel_traceback(exc)}"


def _load(path: Path, symbol: str) -> Callable[..., Any]:
    sys.path.append(str(path.parent))  # sibling modules of a multi-file solution; never first
    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    function: object = getattr(module, symbol, None)
    if not callable(function):
        defined = sorted(n for n, v in vars(module).items() if callable(v) and n[:1] != "_")
        raise ImportError(
            f"{path.name} defines no function `{symbol}` (callables found: {defined})"
        )
    return function


def _outputs(returned: Any, buffers: list[Any], torch: Any) -> tuple[list[Any], list[str]]:
    """The kernel's outputs as plain arrays (or scalars) with their dtype names."""
    values = (
        buffers if buffers else list(returned) if isinstance(returned, tuple | list) else [returned]
    )
    arrays: list[Any] = []
    names: list[str] = []
    for index, value in enumerate(values):
        if torch is not None and isinstance(value, torch.Tensor):
            name = str(value.dtype).removeprefix("torch.")
            tensor = value.detach().cpu()
            if name in TORCH_FLOAT_NAMES:
                tensor = tensor.float()
            arrays.append(tensor.numpy())
            names.append(name)
        elif type(value) is np.ndarray or isinstance(value, np.generic):
            array = np.asarray(value)
            arrays.append(array)
            names.append(array.dtype.name)
        elif type(value) in (bool, int, float):
            arrays.append(value)
            names.append(type(value).__name__)
        else:
            raise NotArrays(
                f"output {index} is a {type(value).__module__}.{type(value).__qualname__}, "
                "not a NumPy array: return plain arrays"
            )
    return arrays, names


# --------------------------------------------------------------------------- the line tracer

TRACE_TOP = 12
"""Lines reported by one traced call (the largest; the harness keeps no more)."""
TRACE_TEXT_CHARS = 80
"""A source line is trimmed to this many characters in its entry."""


def traced_call(
    call: Callable[[], Any], folder: str, entry: str, cap_s: float
) -> tuple[Any, dict[str, Any]]:
    """Call `call()` once under sys.settrace and report, per source line of the kernel's own
    files (those under `folder`), its self time: the time from that line's start to the next
    event in a file of the kernel, so time in NumPy, in C and in any library a line calls is
    that line's, while a call into one of the kernel's own helper functions is charged to the
    helper's lines, not to the line that called it (shares add up to at most 1). After `cap_s`
    seconds tracing stops and the rest of the call runs untraced ("capped").

    Returns (what the call returned, {"total_ms", "capped", "lines": [{"file", "line", "text",
    "ms", "calls"}, ...] largest first, at most TRACE_TOP}). The tracer's own time between two
    events is kept out of every line's. Nothing here can be trusted by the harness."""
    clock = time.perf_counter
    folder = os.path.realpath(folder) + os.sep
    ours: dict[str, bool] = {}
    spent: dict[tuple[str, int], list[float]] = {}
    stack: list[tuple[str, int]] = []
    state = {"last": 0.0, "capped": False}
    deadline = clock() + cap_s

    def own(filename: str) -> bool:
        known = ours.get(filename)
        if known is None:
            known = ours[filename] = os.path.realpath(filename).startswith(folder)
        return known

    def charge(now: float) -> None:
        if stack:
            slot = spent.setdefault(stack[-1], [0.0, 0])
            slot[0] += now - state["last"]

    def stop() -> None:
        # Nothing after this is charged to any line: the rest of the call is the cap's note.
        state["capped"] = True
        stack.clear()
        sys.settrace(None)

    def local(frame: Any, event: str, arg: Any) -> Any:
        if state["capped"]:
            # Frames traced before the cap keep this function as their f_trace (a trace
            # function returning None does not clear it), and a kernel may even have
            # installed it as the thread's tracer (sys.settrace(frame.f_trace)): past the
            # cap it drops tracing again at once, so the call runs at full speed.
            frame.f_trace = None
            sys.settrace(None)
            return None
        now = clock()
        charge(now)
        if event == "line" and stack:
            key = (frame.f_code.co_filename, frame.f_lineno)
            stack[-1] = key
            spent.setdefault(key, [0.0, 0])[1] += 1
        elif event == "return" and stack:
            stack.pop()
        if now > deadline and not state["capped"]:
            stop()
            return None
        state["last"] = clock()
        return local

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        if event != "call" or state["capped"] or not own(frame.f_code.co_filename):
            return None
        now = clock()
        charge(now)
        stack.append((frame.f_code.co_filename, frame.f_lineno))
        state["last"] = clock()
        return local

    start = clock()
    state["last"] = start
    sys.settrace(on_call)
    try:
        returned = call()
    finally:
        sys.settrace(None)
        end = clock()
        charge(end)
    lines = []
    # A frame's time before its first line (calls 0: the `def` line) is a few microseconds.
    ran = sorted((item for item in spent.items() if item[1][1] > 0), key=lambda i: -i[1][0])
    for (filename, lineno), (seconds, calls) in ran[:TRACE_TOP]:
        text = linecache.getline(filename, lineno).strip()[:TRACE_TEXT_CHARS]
        name = os.path.relpath(filename, folder) if own(filename) else os.path.basename(filename)
        lines.append(
            {"file": name, "line": lineno, "text": text, "ms": seconds * 1e3, "calls": calls}
        )
    return returned, {
        "total_ms": (end - start) * 1e3,
        "capped": state["capped"],
        "entry": entry,
        "lines": lines,
    }


def _in_bwrap_namespace() -> bool:
    """Whether pid 1 here is bubblewrap's: this process is in a pid namespace of its own."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0", 1)[0]) == b"bwrap" and os.getpid() != 1
    except OSError:
        return False


def main(argv: list[str]) -> int:
    ctl, ack, fd_in, fd_out = (int(a) for a in argv[:4])
    spec = json.loads(argv[4])
    arena_in = mmap.mmap(fd_in, 0)
    arena_out = mmap.mmap(fd_out, 0)

    # Stopped at every answer: what else the kernel has running (its other threads and, in a
    # jail's own pid namespace, its other processes) gets no CPU between its "done" and the
    # harness's freeze. The harness waits for the stop (and fails a kernel that prevents it),
    # then freezes, and sends SIGCONT after the next thaw. Never kill(-1) outside a private
    # pid namespace: there it would reach every process of this uid on the host.
    stop_all = bool(spec.get("stop_jail")) and _in_bwrap_namespace()
    write, kill, pid = os.write, os.kill, os.getpid()

    def reply(status: int, value: int = 0) -> None:
        write(ack, MESSAGE.pack(status, value))
        if spec.get("stop_at_reply"):
            if stop_all:
                with contextlib.suppress(ProcessLookupError):  # there is no other
                    kill(-1, signal.SIGSTOP)  # Linux: all but pid 1 and the caller
            kill(pid, signal.SIGSTOP)  # every thread of this process, this one included

    torch: Any = None
    try:
        if spec.get("use_torch"):
            import torch as torch_module

            torch = torch_module
        kernel = _load(Path(spec["entry"]), spec["symbol"])
    except BaseException as exc:
        write_error(arena_out, _import_failure(exc))
        reply(ACK_FAILED, FAILED_IMPORT)
        return 1
    output_plan: list[dict[str, Any]] = spec.get("output_plan") or []
    destination_passing = bool(spec.get("destination_passing_style"))
    # Destination-passing kernels write into buffers we hand them: one set per call of a batch
    # (made once, before any call is timed), so that one call's outputs never alias another's.
    buffer_sets: list[list[Any]] = []

    def buffers_for(index: int) -> list[Any]:
        while len(buffer_sets) <= index:
            made: list[Any] = [
                np.empty(tuple(o["shape"] or ()), dtype=o["dtype"]) for o in output_plan
            ]
            if torch is not None:
                made = [torch.from_numpy(b) for b in made]
            buffer_sets.append(made)
        return buffer_sets[index]

    reply(ACK_READY)
    while True:
        message = os.read(ctl, MESSAGE.size)
        if len(message) < MESSAGE.size:
            return 0  # the harness is gone
        op, sequence = MESSAGE.unpack(message)
        if op == OP_QUIT:
            return 0
        if op == OP_PING:
            reply(ACK_OK, sequence)
            continue
        if op == OP_PROFILE:
            try:
                chosen, _, _ = read_arena(arena_in, copy=False, expected_sets=1)
                args = chosen[0]
                if torch is not None:
                    args = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
                extra = buffers_for(0) if destination_passing else []
                entry = Path(spec["entry"])
                _, report = traced_call(
                    functools.partial(kernel, *args, *extra),
                    str(entry.parent),
                    entry.name,
                    float(spec.get("trace_cap_s", 2.0)),
                )
                write_breakdown(arena_out, report)
            except BaseException as exc:
                write_error(arena_out, _kernel_traceback(exc))
                reply(ACK_FAILED, FAILED_RAISED)
                continue
            reply(ACK_OK, sequence)
            continue
        try:
            chosen, _, _ = read_arena(arena_in, copy=False)
            buffers = [buffers_for(j) if destination_passing else [] for j in range(len(chosen))]
            results: list[list[Any]] = []
            result_names: list[list[str]] = []
            for args, own in zip(chosen, buffers, strict=True):
                if torch is not None:
                    args = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
                returned = kernel(*args, *own)
                arrays, names = _outputs(returned, own, torch)
                results.append(arrays)
                result_names.append(names)
            write_arena(arena_out, results, dtype_names=result_names)
        except NotArrays as exc:
            write_error(arena_out, str(exc))
            reply(ACK_FAILED, FAILED_NOT_ARRAYS)
            continue
        except BaseException as exc:
            write_error(arena_out, _kernel_traceback(exc))
            reply(ACK_FAILED, FAILED_RAISED)
            continue
        reply(ACK_OK, sequence)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

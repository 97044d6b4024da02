"""The task's own code (an NKIBench module's top level, get_inputs(), layout transforms,
roofline()) run in a jail of its own, never in the trusted harness.

A task is code too: a task file reached through a tool may be anybody's, so the harness
(cpu_runner.py, which runs as the caller, root on a server) never imports it. Instead a jailed
helper imports it (cpu_task_harness's `serve_task`, started by `JailedHarness`) and answers the
harness's requests: draw the inputs for a seed, apply the task's input or output transform,
describe the task.
Arrays travel through sealed memfd arenas read with `read_arena` (which trusts nothing), and
everything else as one capped JSON message per reply, which the harness checks.

The helper is frozen between requests, so nothing the task starts runs while a contestant is
being timed; its requests are made outside every timed call, as the in-process hooks were.
FlashInfer tasks' inputs are drawn by our own code from the input plan (no task code), here.

Protocol: each message is a 4-byte little-endian length and that many bytes of JSON, harness
to helper on CTL and helper to harness on ACK. The helper first sends its import report
({"ok": true, "has_to": bool, "has_from": bool} or {"ok": false, "kind", "message",
"traceback"}); then one reply per request {"op": "describe" | "inputs" (with "seed") |
"stress_names" | "stress" (with "index") | "to_kernel" | "from_kernel" | "quit"}:
{"ok": true, ...} with any arrays in OUT, or {"ok": false, ...} (with "verdict": true when
the output transform refused the kernel's outputs).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import select
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import accelopt_mcp
from accelopt_mcp.backends.cpu_candidate import (
    TORCH_HINT,
    ArenaError,
    arena_bytes,
    read_arena,
    write_arena,
)
from accelopt_mcp.backends.cpu_outcomes import (
    MAX_STRESS_NAME_CHARS,
    MAX_STRESS_SETS,
    StageError,
    Verdict,
)

LENGTH = struct.Struct("<I")
MAX_REPLY_BYTES = 1 << 20
MAX_TEXT_CHARS = 4000
LIBRARY_IN_JAIL = "/opt/accelopt/lib"
"""Where the jail sees this package (read-only), so the helper runs our harness code."""
REFERENCE_FILE = "reference.py"
_BOOT = (
    "import sys; sys.path.insert(0, {lib!r}); "
    "from accelopt_mcp.backends.cpu_task_harness import serve_task; "
    "sys.exit(serve_task(sys.argv[1:]))"
)


def _sealed_memfd(name: str, size: int) -> int:
    """An anonymous shared-memory file of `size` bytes that nobody can shrink or grow (the
    same seals as cpu_candidate_parent's arenas; a copy, since the jailed helper imports this
    module and needs nothing of that one)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


class ArenaFile:
    """A sealed memfd that carries one message's arrays, mapped only as far as that message
    needs and only while it is written or read. Both ends run under RLIMIT_AS, which counts
    every mapped byte, and the file is sized for the largest set an evaluation allows: mapped
    whole, two of them would not fit a jail's memory_limit_mb."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size

    def write(self, sets: list[list[Any]]) -> int:
        """Lay out `sets`; the number of bytes used (what the reader maps)."""
        need = arena_bytes(sets)
        if need > self.size:
            raise ArenaError(f"the values need {need} bytes; the arena holds {self.size}")
        with mmap.mmap(self.fd, need) as view:
            write_arena(view, sets)
        return need

    def read(self, used: Any, expected_sets: int) -> list[list[Any]]:
        """Copies of the `expected_sets` sets in the first `used` bytes (a number the other
        side sent: checked like the rest)."""
        if isinstance(used, bool) or not isinstance(used, int) or not 0 < used <= self.size:
            raise ArenaError(f"a message of {used!r} bytes does not fit a {self.size}-byte arena")
        with mmap.mmap(self.fd, used, prot=mmap.PROT_READ) as view:
            sets, _, _ = read_arena(view, expected_sets=expected_sets)
        return sets


class TaskJailError(ValueError):
    """The helper broke the protocol, died or hung: the task's fault (a reference error)."""


def send_message(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    os.write(fd, LENGTH.pack(len(data)) + data)


def _read_exactly(fd: int, count: int, deadline: float | None) -> bytes:
    data = b""
    while len(data) < count:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, count - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def receive_message(fd: int, deadline: float | None = None) -> dict[str, Any]:
    """One message; TaskJailError when it is too long, not JSON or not an object."""
    (length,) = LENGTH.unpack(_read_exactly(fd, LENGTH.size, deadline))
    if length > MAX_REPLY_BYTES:
        raise TaskJailError(f"the task's process sent a {length}-byte reply (at most 1 MiB)")
    try:
        message = json.loads(_read_exactly(fd, length, deadline))
    except (ValueError, RecursionError) as exc:
        raise TaskJailError(f"the task's process sent a reply that is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise TaskJailError("the task's process sent a reply that is not a JSON object")
    return message


def _text(value: Any) -> str:
    """A string from the jail, capped (it may be anything)."""
    return str(value)[-MAX_TEXT_CHARS:] if value is not None else ""


# --------------------------------------------------------------------------- the harness side


class JailedHarness:
    """What cpu_session's Session needs of the task (style, inputs, transforms), with every
    line of the task's code run in the jailed helper. Raises cpu_outcomes' StageError (kind
    "reference") for whatever the task's code does wrong, and its Verdict when the output
    transform refuses a kernel's outputs."""

    def __init__(self, job: dict[str, Any], folder: Path) -> None:
        from accelopt_mcp.isolation.jail import spawn_jailed
        from accelopt_mcp.isolation.jail_probe import python_for_jail
        from accelopt_mcp.tasks.inputs import needs_torch

        self.job = job
        self.style = str(job["style"])
        self.use_torch = bool(job.get("use_torch")) or (
            self.style == "flashinfer" and needs_torch(job.get("input_plan") or [])
        )
        if self.use_torch:
            try:
                import torch  # noqa: F401  (our side converts FlashInfer inputs to torch)
            except ImportError as exc:
                raise StageError("setup", TORCH_HINT) from exc
        self.timeout_s = float(job.get("timeout_seconds", 60.0))
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(job["reference_path"], folder / REFERENCE_FILE)
        # Room for one input set, or a kernel's outputs with the reference's: the runners'
        # arenas are never larger than max_arena_bytes. Unused pages cost nothing.
        size = 2 * int(job.get("max_arena_bytes", 256 << 20)) + (1 << 20)
        self._fds = [_sealed_memfd(f"accelopt-task-{name}", size) for name in "io"]
        ctl_r, self._ctl = os.pipe()
        self._ack, ack_w = os.pipe()
        spec = {
            "style": self.style,
            "use_torch": self.use_torch,
            "reference_path": REFERENCE_FILE,
            "input_plan": job.get("input_plan"),
        }
        package = Path(accelopt_mcp.__file__).resolve().parent
        try:
            self.process = spawn_jailed(
                [
                    python_for_jail(),
                    "-I",
                    "-c",
                    _BOOT.format(lib=LIBRARY_IN_JAIL),
                    str(ctl_r),
                    str(ack_w),
                    *(str(fd) for fd in self._fds),
                    json.dumps(spec),
                ],
                work_dir=folder,
                read_only=[(package, f"{LIBRARY_IN_JAIL}/accelopt_mcp")],
                writable=[folder],
                pass_fds=(ctl_r, ack_w, *self._fds),
                env={k: str(v) for k, v in (job.get("jail_env") or {}).items()},
                cpus=set(job["cpus"]) if job.get("cpus") else None,
                memory_limit_mb=int(job.get("memory_limit_mb", 4096)),
                max_processes=int(job.get("jail_max_processes", 64)),
            )
        finally:
            os.close(ctl_r)
            os.close(ack_w)
        self.arena_in = ArenaFile(self._fds[0])
        self.arena_out = ArenaFile(self._fds[1])
        self._frozen = False
        hello = self._reply("import the task")
        if not hello.get("ok"):
            self.close()
            raise self._stage_error(hello, "the reference cannot be imported")
        self.has_to = hello.get("has_to") is True
        self.has_from = hello.get("has_from") is True
        self._freeze()

    # -- talking to the helper

    def _freeze(self) -> None:
        if not self._frozen:
            self.process.freeze()
            self._frozen = True

    def _reply(self, what: str) -> dict[str, Any]:
        try:
            return receive_message(self._ack, time.monotonic() + self.timeout_s)
        except TimeoutError:
            self.process.kill()
            raise StageError(
                "reference",
                f"the task's code did not answer within {self.timeout_s:g} s ({what}; "
                "timeout_seconds, CLI --timeout)",
            ) from None
        except EOFError:
            tail = _text(self.process.stderr_tail(2000)).strip()
            raise StageError(
                "reference",
                f"the task's process died ({what})" + (f"; its stderr:\n{tail}" if tail else ""),
            ) from None
        except TaskJailError as exc:
            self.process.kill()
            raise StageError("reference", f"{exc} ({what})") from None

    def _stage_error(self, reply: dict[str, Any], default: str) -> Exception:
        kind = reply.get("kind")
        # The helper names the stage; only ours are believed ("setup" is a missing torch).
        kind = kind if kind in ("reference", "setup", "describe") else "reference"
        return StageError(
            kind, _text(reply.get("message")) or default, _text(reply.get("traceback"))
        )

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        """Thaw, ask, read the reply, freeze: the task's code runs only while asked."""
        what = str(request["op"])
        self.process.thaw()
        self._frozen = False
        try:
            send_message(self._ctl, request)
        except OSError as exc:
            raise StageError("reference", f"the task's process is gone ({what}): {exc}") from None
        reply = self._reply(what)
        self._freeze()
        return reply

    def _arrays(self, request: dict[str, Any]) -> list[Any]:
        reply = self._request(request)
        if not reply.get("ok"):
            if reply.get("verdict") is True:
                raise Verdict("INCORRECT_SHAPE", _text(reply.get("message")))
            raise self._stage_error(reply, f"the task's code failed ({request['op']})")
        try:
            sets = self.arena_out.read(reply.get("bytes"), expected_sets=1)
        except ArenaError as exc:
            raise StageError(
                "reference", f"the task's {request['op']} values are malformed: {exc}"
            ) from None
        return sets[0]

    # -- what the Session asks

    def inputs(self, seed: int) -> list[Any]:
        if self.style == "flashinfer":
            from accelopt_mcp.tasks.inputs import generate_inputs

            # Our own code from the plan: no task code, and safetensors files stay outside.
            return generate_inputs(self.job["input_plan"], seed, as_torch=self.use_torch)
        return self._arrays({"op": "inputs", "seed": int(seed)})

    def stress_names(self) -> list[str]:
        """The names of the input sets the task's stress_inputs() declares (NKIBench tasks;
        none for the others), checked here again: the helper's reply is the task's text."""
        if self.style != "nkibench":
            return []
        reply = self._request({"op": "stress_names"})
        if not reply.get("ok"):
            raise self._stage_error(reply, "stress_inputs() failed")
        names = reply.get("names")
        if (
            not isinstance(names, list)
            or len(names) > MAX_STRESS_SETS
            or not all(
                isinstance(n, str) and 0 < len(n) <= MAX_STRESS_NAME_CHARS and n.isprintable()
                for n in names
            )
            or len(set(names)) != len(names)
        ):
            raise StageError("reference", "the task's process sent malformed stress set names")
        return names

    def stress_inputs(self, index: int) -> list[Any]:
        """The inputs of stress set `index` (of stress_names())."""
        return self._arrays({"op": "stress", "index": int(index)})

    def candidate_inputs(self, inputs: list[Any]) -> list[Any]:
        """The inputs as the candidate is called with them. Without a transform they are the
        reference's own values (see cpu_task_harness: a copy would leave the caches in another
        state before the kernel's call than before the reference's)."""
        if not self.has_to:
            return list(inputs)
        used = self.arena_in.write([inputs])
        return self._arrays({"op": "to_kernel", "bytes": used})

    def candidate_outputs(self, outputs: list[Any], refs: list[Any]) -> list[Any]:
        """The candidate's outputs in the reference's layout (Verdict when they do not fit)."""
        if not self.has_from:
            return outputs
        try:
            used = self.arena_in.write([outputs, refs])
        except ArenaError as exc:
            raise Verdict("INCORRECT_SHAPE", f"the kernel's outputs are too large: {exc}") from None
        return self._arrays({"op": "from_kernel", "bytes": used})

    def describe(self) -> dict[str, Any]:
        """The task's shapes, dtypes, transforms and roofline, as the jail reports them
        (unchecked: the caller validates)."""
        reply = self._request({"op": "describe"})
        if not reply.get("ok"):
            raise self._stage_error(reply, "describing the task failed")
        described = reply.get("describe")
        if not isinstance(described, dict):
            raise StageError("describe", "the task's process sent no description")
        return described

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.process.thaw()
        with contextlib.suppress(OSError):
            send_message(self._ctl, {"op": "quit"})
        with contextlib.suppress(Exception):
            self.process.wait(timeout=2)
        with contextlib.suppress(Exception):
            self.process.kill()
        for fd in (self._ctl, self._ack, *self._fds):
            with contextlib.suppress(OSError):
                os.close(fd)

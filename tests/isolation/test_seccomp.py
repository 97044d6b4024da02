"""The jail's seccomp filter and its clean /proc/1/cmdline, against real jailed programs that
try each refused call (both kinds: bwrap, and the kind "none" fallback)."""

from __future__ import annotations

import json
import platform
import struct
import sys
from pathlib import Path

import pytest

from accelopt_mcp.isolation import seccomp
from accelopt_mcp.isolation.jail import spawn_jailed
from accelopt_mcp.isolation.jail_probe import jail_status, python_for_jail

needs_jail = pytest.mark.skipif(
    jail_status().kind != "bwrap", reason=f"no jail here: {jail_status().reason}"
)
needs_table = pytest.mark.skipif(
    platform.machine() not in seccomp.FILTER_ARCHS, reason="no syscall table for this machine"
)

# Tries every refused call and reports, per call, "ok" or the errno name it got. The call
# numbers are the machine's own (the filter's table), so a wrong table shows as "ok".
PROBE = r"""
import ctypes, errno, json, os, sys, threading
nr = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    ctypes.set_errno(0)
    got = libc.syscall(ctypes.c_long(nr[name]), *(ctypes.c_long(a) for a in args))
    return "ok" if got >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
def unshare(flags):
    ctypes.set_errno(0)
    ok = libc.unshare(ctypes.c_int(flags)) == 0
    return "ok" if ok else errno.errorcode.get(ctypes.get_errno(), "?")
out = {"unshare(CLONE_NEWUSER)": unshare(0x10000000)}
for flag, value in [("NEWNS", 0x20000), ("NEWNET", 0x40000000), ("NEWPID", 0x20000000),
                    ("NEWIPC", 0x08000000), ("NEWUTS", 0x04000000),
                    ("NEWCGROUP", 0x02000000), ("NEWTIME", 0x80)]:
    out["unshare(CLONE_" + flag + ")"] = unshare(value)
# clone with a namespace flag (SIGCHLD as exit signal): a child that got through exits at once.
me = os.getpid()
got = call("clone", 0x10000000 | 17, 0, 0, 0, 0)
if got == "ok" and os.getpid() != me:
    os._exit(0)
out["clone(CLONE_NEWUSER)"] = got
out["clone3"] = call("clone3", 0, 0)
out["setns"] = call("setns", 0, 0)
out["mount"] = call("mount", 0, 0, 0, 0, 0)
out["umount2"] = call("umount2", 0, 0)
out["pivot_root"] = call("pivot_root", 0, 0)
out["fsopen"] = call("fsopen", 0, 0)
out["keyctl"] = call("keyctl", 0, 0, 0, 0, 0)
out["add_key"] = call("add_key", 0, 0, 0, 0, 0)
out["request_key"] = call("request_key", 0, 0, 0, 0)
out["io_uring_setup"] = call("io_uring_setup", 1, 0)
out["io_uring_enter"] = call("io_uring_enter", 0, 0, 0, 0, 0)
out["ptrace"] = call("ptrace", 0, 0, 0, 0)
out["process_vm_readv"] = call("process_vm_readv", os.getpid(), 0, 0, 0, 0, 0)
out["bpf"] = call("bpf", 0, 0, 0)
out["perf_event_open"] = call("perf_event_open", 0, 0, -1, -1, 0)
out["kexec_load"] = call("kexec_load", 0, 0, 0, 0)
out["init_module"] = call("init_module", 0, 0, 0)
out["userfaultfd"] = call("userfaultfd", 0)
out["personality(ADDR_NO_RANDOMIZE)"] = call("personality", 0x0040000)
# What must still work: threads and processes (clone without namespace flags), NumPy.
import subprocess
import numpy as np
works = {"personality query": call("personality", 0xFFFFFFFF)}
seen = []
threads = [threading.Thread(target=lambda: seen.append(1)) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
works["threads"] = "ok" if len(seen) == 4 else "failed"
works["subprocess"] = "ok" if subprocess.run(["/bin/true"]).returncode == 0 else "failed"
a = np.random.default_rng(0).random((256, 256))
works["numpy"] = "ok" if np.allclose(a @ np.linalg.inv(a), np.eye(256), atol=1e-6) else "bad"
print(json.dumps({"refused": out, "works": works}))
"""


def run_probe(work: Path) -> dict[str, dict[str, str]]:
    numbers = seccomp.FILTER_ARCHS[platform.machine()]
    proc = spawn_jailed(
        [python_for_jail(), "-I", "-c", PROBE, json.dumps(numbers)],
        work_dir=work,
        memory_limit_mb=1024,
        max_processes=16,
    )
    try:
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, proc.stderr_tail()
    result: dict[str, dict[str, str]] = json.loads(proc.stdout_tail().strip().splitlines()[-1])
    return result


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def check_probe(result: dict[str, dict[str, str]]) -> None:
    got_through = {name: how for name, how in result["refused"].items() if how == "ok"}
    assert not got_through, f"calls the jail let through: {got_through}"
    not_eperm = {
        name: how
        for name, how in result["refused"].items()
        if how != ("ENOSYS" if name == "clone3" else "EPERM")
    }
    assert not not_eperm, f"refused with an unexpected errno: {not_eperm}"
    assert result["works"] == dict.fromkeys(result["works"], "ok")


@needs_jail
@needs_table
def test_the_jail_refuses_namespaces_mounts_keyrings_io_uring_and_tracing(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACCELOPT_JAIL", raising=False)
    check_probe(run_probe(work))


@needs_table
def test_the_fallback_applies_the_same_filter(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELOPT_JAIL", "none")
    check_probe(run_probe(work))


CMDLINE = r"""
import json, os
def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError as exc:
        return "unreadable: " + type(exc).__name__
print(json.dumps({
    "cmdline1": read("/proc/1/cmdline"),
    "fds": sorted(os.listdir("/proc/self/fd")),
    "env": sorted(os.environ),
}))
"""


@needs_jail
def test_pid_1s_command_line_shows_nothing_of_the_host(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACCELOPT_JAIL", raising=False)
    proc = spawn_jailed(
        [python_for_jail(), "-I", "-c", CMDLINE],
        work_dir=work,
        memory_limit_mb=1024,
        max_processes=16,
        env={"SOME_SETTING": "visible-setting"},
    )
    try:
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, proc.stderr_tail()
    seen = json.loads(proc.stdout_tail().strip().splitlines()[-1])
    cmdline = seen["cmdline1"].replace("\0", " ")
    host = [str(work), str(Path(sys.prefix)), str(Path(__file__).parents[2]), "/tmp/", "/work"]
    host += ["visible-setting", "--bind", "--setenv"]
    shown = [h for h in host if h in cmdline]
    assert "bwrap" in cmdline, cmdline
    assert not shown, f"/proc/1/cmdline shows {shown}: {cmdline!r}"
    # bwrap closed the descriptors that carried its options and the filter, and the variable
    # that carried the command line is gone.
    assert seen["fds"] == ["0", "1", "2", "3"], seen["fds"]
    assert "ACCELOPT_JAIL_EXEC" not in seen["env"]
    assert "SOME_SETTING" in seen["env"]


def test_the_filter_is_a_well_formed_program() -> None:
    program = seccomp.filter_program()
    insn = struct.Struct("=HBBI")
    assert len(program) % insn.size == 0
    count = len(program) // insn.size
    assert 0 < count < 4096  # BPF_MAXINSNS
    # Every jump lands inside the program, and it ends in a return.
    for index in range(count):
        code, jt, jf, _ = insn.unpack_from(program, index * insn.size)
        if code & 0x07 == 0x05:  # BPF_JMP
            assert index + 1 + max(jt, jf) < count
    assert insn.unpack_from(program, (count - 1) * insn.size)[0] == 0x06

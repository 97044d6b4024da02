"""The seccomp filter every jail runs under: a classic BPF program, built here with `struct`.

Written by hand rather than through libseccomp: the program is small (one deny list per
architecture and three argument checks), and building it ourselves needs no dependency that a
fresh machine would have to install (there is no libseccomp binding on PyPI we could rely on,
and Debian's python3-seccomp is not in the venv). bwrap loads it with `--seccomp FD`; the kind
"none" fallback loads it with prctl before exec (`apply_filter`).

What it refuses, with EPERM (an error the program can report, not a kill): new namespaces
(unshare, and clone with a CLONE_NEW* flag; threads and plain forks still work), setns, every
mount call (mount, umount2, pivot_root and the new mount API), the keyrings (add_key,
request_key, keyctl), io_uring, ptrace and process_vm_readv/writev, bpf, perf_event_open,
kexec, kernel modules, userfaultfd, and personality changes (only the query and PER_LINUX pass:
no ADDR_NO_RANDOMIZE, no READ_IMPLIES_EXEC). clone3 gets ENOSYS, so that glibc falls back to
clone, whose flags this filter can read (clone3 passes them in memory, out of its reach). The
x32 ABI on x86_64 is refused; a foreign architecture (i386 on x86_64, arm32 on aarch64) kills
the process: its numbers would mean other calls.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Sequence

__all__ = ["FILTER_ARCHS", "apply_filter", "filter_program", "filtered_command"]

# struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }
_INSN = struct.Struct("=HBBI")
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38

# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
_NR, _ARCH, _ARG0_LOW = 0, 4, 16

_AUDIT_ARCH_X86_64 = 0xC000003E
_AUDIT_ARCH_AARCH64 = 0xC00000B7
_X32_BIT = 0x40000000

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWTIME = 0x00000080
_CLONE_NS = (
    CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
)
# In clone's flags the low byte is the exit signal, so CLONE_NEWTIME (0x80) is unshare's only.
_UNSHARE_NS = _CLONE_NS | CLONE_NEWTIME
_PER_QUERY, _PER_LINUX = 0xFFFFFFFF, 0

_DENIED = (
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "perf_event_open",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "userfaultfd",
)

# From the kernel's asm/unistd_64.h (x86_64) and asm-generic/unistd.h (aarch64).
_X86_64 = {
    "clone": 56, "clone3": 435, "unshare": 272, "personality": 135, "setns": 308,
    "mount": 165, "umount2": 166, "pivot_root": 155, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "keyctl": 250, "add_key": 248, "request_key": 249, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "userfaultfd": 323,
}  # fmt: skip
_AARCH64 = {
    "clone": 220, "clone3": 435, "unshare": 97, "personality": 92, "setns": 268,
    "mount": 40, "umount2": 39, "pivot_root": 41, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "keyctl": 219, "add_key": 217, "request_key": 218, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "bpf": 280, "perf_event_open": 241, "kexec_load": 104,
    "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "userfaultfd": 282,
}  # fmt: skip
FILTER_ARCHS = {"x86_64": _X86_64, "aarch64": _AARCH64}
"""The machines (platform.machine()) the filter knows the syscall numbers of."""

# An instruction whose jump targets are labels, resolved once the program is laid out.
_Insn = tuple[int, str | int, str | int, int]


def _arch_block(prefix: str, numbers: dict[str, int], *, x32: bool) -> list[_Insn | str]:
    """Code for one architecture; a str item is a label for the next instruction."""
    code: list[_Insn | str] = [prefix, (_LD_W_ABS, 0, 0, _NR)]
    if x32:
        code.append((_JGE_K, "eperm", 0, _X32_BIT))
    for name in _DENIED:
        code.append((_JEQ_K, "eperm", 0, numbers[name]))
    code.append((_JEQ_K, "enosys", 0, numbers["clone3"]))
    code.append((_JEQ_K, "clone", 0, numbers["clone"]))
    code.append((_JEQ_K, "unshare", 0, numbers["unshare"]))
    code.append((_JEQ_K, "personality", 0, numbers["personality"]))
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    return code


def _assemble(code: Sequence[_Insn | str]) -> bytes:
    labels: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(target: str | int, at: int) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - at - 1
        if not 0 <= jump < 256:
            raise AssertionError(f"seccomp jump to {target} out of range ({jump})")
        return jump

    return b"".join(
        _INSN.pack(op, offset(jt, i), offset(jf, i), k) for i, (op, jt, jf, k) in enumerate(insns)
    )


def filter_program() -> bytes:
    """The filter as the kernel takes it: an array of struct sock_filter, native byte order."""
    code: list[_Insn | str] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, "x86_64", 0, _AUDIT_ARCH_X86_64),
        (_JEQ_K, "aarch64", 0, _AUDIT_ARCH_AARCH64),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
    ]
    code += _arch_block("x86_64", _X86_64, x32=True)
    code += _arch_block("aarch64", _AARCH64, x32=False)
    code += [
        "clone",
        (_LD_W_ABS, 0, 0, _ARG0_LOW),
        (_JSET_K, "eperm", "allow", _CLONE_NS),
        "unshare",
        (_LD_W_ABS, 0, 0, _ARG0_LOW),
        (_JSET_K, "eperm", "allow", _UNSHARE_NS),
        "personality",
        (_LD_W_ABS, 0, 0, _ARG0_LOW),
        (_JEQ_K, "allow", 0, _PER_QUERY),
        (_JEQ_K, "allow", "eperm", _PER_LINUX),
        "allow",
        (_RET_K, 0, 0, _RET_ALLOW),
        "eperm",
        (_RET_K, 0, 0, _RET_ERRNO | _EPERM),
        "enosys",
        (_RET_K, 0, 0, _RET_ERRNO | _ENOSYS),
    ]
    return _assemble(code)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def apply_filter(program: bytes | None = None) -> None:
    """Load the filter on this thread (and all it starts afterwards), after no_new_privs,
    which an unprivileged process needs to load one. OSError when the kernel refuses; call it
    in a fresh single-threaded process just before exec, since other threads stay unfiltered."""
    if platform.machine() not in FILTER_ARCHS:
        raise OSError(f"no seccomp syscall table for {platform.machine()}")
    data = program if program is not None else filter_program()
    buffer = ctypes.create_string_buffer(data, len(data))
    fprog = _SockFprog(len(data) // _INSN.size, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    address = ctypes.addressof(fprog)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, address, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")


# The kind "none" fallback: a fresh interpreter that loads the filter and execs the program.
# It cannot import this package (-I, and the repository is not on its path), so the program
# travels as hex and the prctl calls are repeated here.
_EXEC_FILTERED = r"""
import ctypes, os, sys
data = bytes.fromhex(sys.argv[1])
class F(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
buf = ctypes.create_string_buffer(data, len(data))
prog = F(len(data) // 8, ctypes.cast(buf, ctypes.c_void_p))
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.addressof(prog), 0, 0):
    err = ctypes.get_errno()
    sys.stderr.write("accelopt: cannot load the seccomp filter: %s\n" % os.strerror(err))
    os._exit(126)
os.execv(sys.argv[2], sys.argv[2:])
"""


def filtered_command(python: str, argv: Sequence[str]) -> list[str]:
    """`argv` (argv[0] an absolute path) run under the filter through `python`."""
    return [python, "-I", "-S", "-c", _EXEC_FILTERED, filter_program().hex(), *argv]

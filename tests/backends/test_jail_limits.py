"""Issue 19 item 6: memory and the work folder are limited per jail, not per process.

Real evaluations by CpuBackend of hostile kernels that stay small in every single process
(RLIMIT_AS never fires) but together go past memory_limit_mb: forked children, /dev/shm files,
many files in the work folder. Each must fail, with a reason naming the limit, never PASS.
"""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.isolation.jail import spawn_jailed
from accelopt_mcp.isolation.jail_probe import jail_status, python_for_jail
from accelopt_mcp.isolation.sandbox import address_space_backstop_mb
from accelopt_mcp.models import EvaluationStatus
from tests.backends.test_cpu_backend import FAST, python_solution, scale_task

LIMIT_MB = 2048
CONFIG = FAST.model_copy(update={"memory_limit_mb": LIMIT_MB})

# 20 children of 120 MiB each (2.4 GiB together; each inherits the parent's address
# space, so RLIMIT_AS leaves little room per child), all alive while it answers: the parent
# answers only once every child has touched its block (or died trying), so the jail is over
# its limit before the first answer however slowly a busy host runs the children.
FORKING = """
import os, select, time
import numpy as np

_children = []

def run(x, scale):
    if not _children:
        ready, done = os.pipe()
        for _ in range(20):
            pid = os.fork()
            if pid == 0:
                block = bytearray(120 << 20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                os.write(done, b"x")
                time.sleep(60)
                os._exit(0)
            _children.append(pid)
        os.close(done)
        told, deadline = 0, time.monotonic() + 60
        while told < len(_children) and time.monotonic() < deadline:
            if select.select([ready], [], [], 0.5)[0]:
                got = os.read(ready, 64)
                if not got:
                    break  # every child died (the limit's OOM killer)
                told += len(got)
        time.sleep(2)
    return x * np.float32(scale) + np.float32(1.0)
"""

# 14 children of 120 MiB (1.64 GiB, under the limit alone) and, on top, /dev/shm and /tmp
# files until each is full (a 256 MiB tmpfs each, ENOSPC ignored): ~2.2 GiB in all, which
# only a limit that counts tmpfs pages sees.
SHM = FORKING.replace("range(20)", "range(14)").replace(
    "time.sleep(2)",
    """time.sleep(2)
        for n in range(60):
            for where in ("/dev/shm", "/tmp"):
                try:
                    with open(f"{where}/f{n}", "wb") as f:
                        f.write(b"s" * (10 << 20))
                except OSError:
                    pass""",
)

# 1 MiB files in the work folder until it is full (its quota is a quarter of the 2 GiB
# limit: far below it), then it answers as if nothing happened.
WORK_FILES = """
import numpy as np

_done = []

def run(x, scale):
    if not _done:
        _done.append(1)
        for n in range(4096):
            try:
                with open(f"junk{n}", "wb") as f:
                    f.write(b"w" * (1 << 20))
            except OSError:
                break
    return x * np.float32(scale) + np.float32(1.0)
"""

needs_jail = pytest.mark.skipif(
    jail_status().kind != "bwrap", reason="needs a working bubblewrap jail"
)


@needs_jail
@pytest.mark.parametrize("code", [FORKING, SHM], ids=["forked-children", "dev-shm"])
def test_jail_over_memory_limit_fails(code: str) -> None:
    evaluation = CpuBackend().evaluate(scale_task(), python_solution(code), CONFIG)
    assert evaluation.status != EvaluationStatus.PASSED, evaluation.log
    assert "hit the memory limit" in evaluation.log, evaluation.log
    assert "memory_limit_mb" in evaluation.log
    print(evaluation.log)


@needs_jail
def test_work_folder_quota_fails() -> None:
    evaluation = CpuBackend().evaluate(scale_task(), python_solution(WORK_FILES), CONFIG)
    assert evaluation.status != EvaluationStatus.PASSED, evaluation.log
    assert "work folder's quota" in evaluation.log, evaluation.log
    print(evaluation.log)


@needs_jail
def test_honest_kernel_reports_jail_peak() -> None:
    from tests.backends.test_cpu_backend import VECTORIZED

    evaluation = CpuBackend().evaluate(scale_task(), python_solution(VECTORIZED), CONFIG)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    measurement = evaluation.measurement or {}
    peak = measurement.get("jail_memory_peak_mb")
    assert peak is not None and 0 < peak < LIMIT_MB
    print(f"honest kernel's jail peak: {peak:.0f} MB")
    assert measurement.get("jail_memory_cgroup") == 1.0, measurement
    assert "held by each jail's memory cgroup (cgroup-v" in evaluation.log, evaluation.log


@needs_jail
def test_rlimit_as_is_a_backstop_where_a_memory_group_holds_the_jail(tmp_path: Path) -> None:
    """The group is the limit: RLIMIT_AS, per process, is loose (else it would refuse or kill
    first, with a reason that is not the jail's); without a group it stays the limit."""
    process = spawn_jailed(
        [python_for_jail(), "-c", "print(open('/proc/self/limits').read())"],
        work_dir=tmp_path,
        memory_limit_mb=512,
        max_processes=8,
    )
    with process:
        process.wait(30)
        limits = process.stdout_tail()
    line = next(x for x in limits.splitlines() if x.startswith("Max address space"))
    soft = int(line.split()[3])
    if process.memory_limit_by == "rlimit":
        assert soft == 512 << 20, line
    else:
        # Never above the hard limit this process inherited (no CAP_SYS_RESOURCE to raise it).
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        expected = address_space_backstop_mb(512) << 20
        if hard != resource.RLIM_INFINITY:
            expected = min(expected, max(512 << 20, hard))
        assert soft == expected > 512 << 20, line

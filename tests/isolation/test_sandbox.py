"""The sandbox against real child processes doing the things untrusted kernels do."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelopt_mcp.isolation.sandbox import (
    LAUNCHER_FAILED_EXIT,
    group_members,
    process_state,
    run_sandboxed,
)


def run_code(code: str, **kw):
    kw.setdefault("timeout_s", 10)
    kw.setdefault("memory_limit_mb", 1024)
    return run_sandboxed([sys.executable, "-c", code], **kw)


def wait_until_dead(pid: int, within_s: float = 3.0) -> bool:
    """True once `pid` is gone or a zombie waiting for init to reap it."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if process_state(pid) in ("", "Z", "X"):
            return True
        time.sleep(0.05)
    return False


PROFILER = (
    "import sys\n"
    "from accelopt_mcp.isolation.sandbox import run_sandboxed\n"
    "run_sandboxed([sys.executable, '-c', sys.argv[1]], timeout_s=600, memory_limit_mb=512)\n"
)
"""A profiler process: runs the kernel source in argv[1] in the sandbox (600 s, 512 MB)."""


@contextlib.contextmanager
def profiling(kernel: str, pid_file: Path) -> Iterator[tuple[subprocess.Popen[bytes], int | None]]:
    """A profiler process running `kernel`, and the pid the kernel writes to `pid_file` (None
    when it has not within 30 s); on leaving, the profiler and that pid are killed."""
    process = subprocess.Popen(
        [sys.executable, "-c", PROFILER, kernel], cwd=Path(__file__).resolve().parents[2]
    )
    pid = None
    try:
        deadline = time.monotonic() + 30
        while pid is None and time.monotonic() < deadline:
            text = pid_file.read_text() if pid_file.exists() else ""
            pid = int(text) if text else None
            time.sleep(0.05)
        yield process, pid
    finally:
        process.kill()
        process.wait(timeout=10)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_clean_exit_returns_output() -> None:
    result = run_code("print('hello'); import sys; sys.stderr.write('warn')")
    assert result.ok
    assert result.returncode == 0 and result.signal is None
    assert result.stdout == "hello\n" and result.stderr == "warn"
    assert not result.timed_out and not result.output_truncated


def test_os_exit_code_is_reported() -> None:
    result = run_code("import os; os._exit(3)")
    assert result.returncode == 3
    assert not result.ok
    assert "code 3" in result.describe()


def test_segfault_is_a_signal_not_a_crash_of_ours() -> None:
    result = run_code("import ctypes; ctypes.string_at(0)")
    assert result.returncode is None
    assert result.signal == signal.SIGSEGV
    assert "segmentation fault" in result.describe()


def test_infinite_loop_is_killed_at_the_timeout() -> None:
    started = time.monotonic()
    result = run_code("while True: pass", timeout_s=1.0)
    assert result.timed_out
    assert result.signal == signal.SIGKILL
    assert time.monotonic() - started < 4.0
    assert "time limit" in result.describe()


def test_timeout_kills_the_whole_process_group() -> None:
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    result = run_code(code, timeout_s=1.5)
    assert result.timed_out
    grandchild = int(result.stdout.split()[0])
    assert wait_until_dead(grandchild)


def test_memory_hog_gets_memory_error() -> None:
    result = run_code("x = bytearray(3 * 1024**3)", memory_limit_mb=512)
    assert result.returncode == 1
    assert result.memory_exceeded
    assert "MemoryError" in result.stderr


def test_fork_bomb_is_contained() -> None:
    code = "import os\nwhile True:\n    os.fork()\n"
    started = time.monotonic()
    result = run_code(code, timeout_s=3, max_processes=32)
    assert not result.ok
    assert result.fork_limit_hit or result.timed_out
    assert time.monotonic() - started < 15


def test_megabytes_of_output_are_capped_head_and_tail() -> None:
    code = "print('FIRST')\nfor _ in range(100000): print('x' * 100)\nprint('LAST')\n"
    result = run_code(code, max_output_bytes=64 * 1024)
    assert result.ok
    assert result.output_truncated
    assert len(result.stdout) < 80 * 1024
    assert result.stdout.startswith("FIRST")
    assert result.stdout.rstrip().endswith("LAST")
    assert "dropped by the sandbox" in result.stdout


def test_secrets_do_not_reach_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELOPT_TEST_SECRET_KEY", "s3cr3t-value")
    monkeypatch.setenv("SOME_API_TOKEN", "tok")
    monkeypatch.setenv("DATABASE_DSN", "postgresql://u:p@h/db")
    result = run_code(
        "import os; print(sorted(os.environ))",
        env={"VISIBLE_SETTING": "1", "PASSED_PASSWORD": "no"},
    )
    names = eval(result.stdout)  # a list literal printed by the child
    assert "VISIBLE_SETTING" in names
    for secret in ("ACCELOPT_TEST_SECRET_KEY", "SOME_API_TOKEN", "DATABASE_DSN", "PASSED_PASSWORD"):
        assert secret not in names
    assert "s3cr3t" not in result.stdout


def test_fresh_temp_dir_is_home_and_removed(tmp_path: Path) -> None:
    result = run_code("import os; print(os.getcwd()); print(os.environ['HOME'])")
    cwd, home = result.stdout.split()
    assert cwd == home
    assert not Path(cwd).exists()
    code = "import os; open('made.txt', 'w').write('x'); print(os.getcwd())"
    given = run_code(code, cwd=tmp_path)
    assert Path(given.stdout.strip()) == tmp_path
    assert (tmp_path / "made.txt").read_text() == "x"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_cpus_pin_the_child() -> None:
    core = max(os.sched_getaffinity(0))
    result = run_code("import os; print(sorted(os.sched_getaffinity(0)))", cpus={core})
    assert result.stdout.strip() == f"[{core}]"


def test_bad_arguments_are_rejected_clearly() -> None:
    with pytest.raises(ValueError, match="argv is empty"):
        run_sandboxed([], timeout_s=1, memory_limit_mb=100)
    with pytest.raises(ValueError, match="subset"):
        run_sandboxed([sys.executable, "-V"], timeout_s=1, memory_limit_mb=100, cpus={9999})


def test_missing_program_is_a_launcher_failure_not_an_exception() -> None:
    result = run_sandboxed(["/nonexistent/program"], timeout_s=5, memory_limit_mb=256)
    assert result.returncode == LAUNCHER_FAILED_EXIT
    assert "sandbox launcher failed" in result.stderr


# A grandchild that leaves the process group (setsid) and closes its descriptors, as a daemon
# does. The sandbox prints the daemon's pid and how the run ended.
_DAEMON_RUN = r"""
import sys
from accelopt_mcp.isolation.sandbox import run_sandboxed

code = '''
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        sys.stdout.write(str(os.getpid()) + "\\n")
        sys.stdout.flush()
        for fd in range(1024):
            try:
                os.close(fd)
            except OSError:
                pass
        time.sleep(120)
    os._exit(0)
time.sleep(float(sys.argv[1]))
'''
result = run_sandboxed(
    [sys.executable, "-c", code, sys.argv[1]], timeout_s=1.5, memory_limit_mb=1024
)
print(result.stdout.split()[0], result.timed_out, flush=True)
"""


@pytest.mark.parametrize("child_sleeps_s", [0.5, 30.0], ids=["exits", "times-out"])
def test_daemonized_grandchild_dies_without_a_pids_cgroup(child_sleeps_s: float) -> None:
    """Hosts without a writable cgroup-v1 `pids` hierarchy (cgroup v2, or not root) still get
    every descendant killed, including one that left the process group. Simulated here with a
    private mount namespace in which /sys/fs/cgroup/pids is an empty tmpfs."""
    cgroup_root = Path("/sys/fs/cgroup/pids")
    if os.geteuid() != 0 or not cgroup_root.is_dir():
        pytest.skip("needs root and a cgroup-v1 pids hierarchy to hide")
    hide_cgroup = f'mount -t tmpfs none {cgroup_root} && exec "$0" -c "$1" "$2"'
    try:
        done = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                hide_cgroup,
                sys.executable,
                _DAEMON_RUN,
                str(child_sleeps_s),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parents[2],
        )
    except FileNotFoundError:
        pytest.skip("unshare is not installed")
    if done.returncode != 0 and "mount" in done.stderr + done.stdout:
        pytest.skip(f"cannot make a private mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    pid, timed_out = done.stdout.split()
    assert timed_out == str(child_sleeps_s > 1.5)
    daemon = int(pid)
    try:
        assert wait_until_dead(daemon), "the daemonized grandchild outlived the sandbox run"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)


def test_a_running_kernel_dies_with_the_process_that_profiles_it(tmp_path: Path) -> None:
    """A server or job worker killed mid-profile (SIGKILL, OOM killer) cannot enforce the
    timeout any more; its kernel must not spin on a core for ever."""
    pid_file = tmp_path / "kernel.pid"
    kernel = f"import os\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\nwhile True: pass\n"
    with profiling(kernel, pid_file) as (process, kernel_pid):
        assert kernel_pid is not None, "the kernel never started"
        process.kill()
        process.wait(timeout=10)
        assert wait_until_dead(kernel_pid, within_s=5), "the kernel outlived its profiler"


def test_what_a_killed_profiler_left_is_cleaned_up_by_the_next_run(tmp_path: Path) -> None:
    """A profiler killed mid-run leaves its per-run pids cgroup, and any grandchild of the
    kernel inside it; the profiler's reaper, or else the next sandboxed run on the host, kills
    those and removes the group."""
    cgroup_root = Path("/sys/fs/cgroup/pids")
    if not (cgroup_root / "cgroup.procs").exists() or not os.access(cgroup_root, os.W_OK):
        pytest.skip("no writable cgroup-v1 pids hierarchy here")
    pid_file = tmp_path / "grandchild.pid"
    kernel = (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(120)\n"
    )
    with profiling(kernel, pid_file) as (process, grandchild):
        assert grandchild is not None, "the kernel never started its grandchild"
        left = list(cgroup_root.glob(f"accelopt-sandbox-*-{process.pid}.*-*"))
        assert left, "the profiler made no cgroup"
        process.kill()
        process.wait(timeout=10)
        assert run_code("pass").ok
        assert wait_until_dead(grandchild), "the killed run's grandchild is still running"
        deadline = time.monotonic() + 5
        while any(path.exists() for path in left) and time.monotonic() < deadline:
            run_code("pass")
        assert not any(path.exists() for path in left), "the killed run's cgroup stayed"


def test_a_killed_profilers_work_dir_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """run_sandboxed's own temp dir carries its owner's pid: one left by a profiler killed
    mid-run (which never reached its cleanup) is removed by the next sandboxed run, and a live
    owner's is not."""
    pid_file = tmp_path / "kernel.pid"
    kernel = (
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n"
    )
    with profiling(kernel, pid_file) as (process, kernel_pid):
        assert kernel_pid is not None, "the kernel never started"
        (left,) = Path(tempfile.gettempdir()).glob(f"accelopt-sandbox-*-{process.pid}-*")
        assert left.is_dir()
        assert run_code("pass").ok
        assert left.is_dir(), "a live profiler's work dir was removed"
        process.kill()
        process.wait(timeout=10)
        assert left.is_dir()  # nobody cleaned up: the profiler died mid-run
        assert run_code("pass").ok
        assert not left.exists(), "the killed profiler's work dir stayed"


# Run in a new pid namespace that did not mount its own /proc: a live owner there has a pid
# that the /proc in view (the host's) does not know. Prints "kept" or "removed".
_FOREIGN_PROC = """
import os, subprocess, sys, tempfile
from accelopt_mcp.isolation.sandbox import remove_abandoned_work_dirs, work_dir_prefix
children = []
while True:
    child = subprocess.Popen(["sleep", "60"])
    children.append(child)
    if not os.path.exists(f"/proc/{child.pid}"):
        break
prefix = work_dir_prefix("sandbox").replace(f"-{os.getpid()}-", f"-{child.pid}-")
folder = tempfile.mkdtemp(prefix=prefix)
remove_abandoned_work_dirs("sandbox")
print("kept" if os.path.isdir(folder) else "removed")
for c in children:
    c.kill()
"""


def test_no_work_dir_is_removed_where_proc_is_another_namespaces(tmp_path: Path) -> None:
    """A review found that a process in a pid namespace of its own, under the host's /proc,
    took a live owner's folder for abandoned (its pid is unknown there) and removed it."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        ["unshare", "--pid", "--fork", sys.executable, "-c", _FOREIGN_PROC],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"cannot make a pid namespace here: {done.stderr.strip()}")
    assert done.stdout.strip() == "kept", done.stderr


def test_a_zombie_leader_is_not_a_live_member_of_its_group() -> None:
    # The sandbox keeps its child unreaped until the group is killed (so the group's id cannot
    # be reused by a stranger's session meanwhile): the kill loop must not wait on that zombie.
    leader = subprocess.Popen(
        [sys.executable, "-c", "import os, time\nif os.fork() == 0:\n    time.sleep(60)\n"],
        start_new_session=True,
    )
    try:
        os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        members = group_members(leader.pid)
        assert len(members) == 1 and members[0] != leader.pid  # the sleeping grandchild
        os.killpg(leader.pid, signal.SIGKILL)  # safe: the zombie holds the number
        deadline = time.monotonic() + 10
        while group_members(leader.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert group_members(leader.pid) == []
        assert process_state(leader.pid) == "Z"
    finally:
        leader.wait()
    assert process_state(leader.pid) == ""


def test_how_a_child_ended_is_read_from_what_the_exit_notice_saw() -> None:
    # Used when something else in this process reaped the child first: the notice (waitid
    # without reaping) is then all that is known.
    from accelopt_mcp.isolation.sandbox import _exit_code_seen

    exits = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()
    try:
        seen = [os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT) for p in (exits, killed)]
        assert [_exit_code_seen(s) for s in seen] == [3, -signal.SIGKILL]
    finally:
        exits.wait()
        killed.wait()
    with pytest.raises(RuntimeError, match="reaped by someone else"):
        _exit_code_seen(None)

"""Nothing outlives a jail: when the process that owns a run's cgroups is SIGKILLed (a crash, the
OOM killer, `kill -9` of `accelopt` or of the MCP server), its reaper (started with its first
group, detached from it) kills, thaws and removes everything it left, without waiting for the
next sandbox or jail to start and sweep. Real processes, real jails, real kill -9.

The hostile case is the cgroup-v1 freezer: a process in a FROZEN v1 group does not die of
SIGKILL until it is thawed, so a jail frozen at the moment its owner died would stay forever.
This host has cgroup v1 hierarchies (and, at most, a controller-less unified v2 hierarchy
beside them): a pure cgroup-v2 host cannot be exercised here. The v2 variant below runs only
where a writable v2 group with cgroup.freeze can be made, and is skipped with that reason
otherwise; what the whole-run test checks in the v2 hierarchy is skipped the same way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accelopt_mcp.isolation.cgroups import (
    REAPER_TAG,
    group_prefix,
    start_time,
    v1_parent,
    v2_parent,
)
from accelopt_mcp.isolation.jail_probe import jail_status
from tests.engine import kernels
from tests.engine.conftest import (
    KERNEL_PATH,
    KEY,
    KEY_ENV,
    TASK_PATH,
    models_config,
    one_plan_preset,
    one_plan_script,
    text,
)
from tests.llm_standin.process import StandinProcess, standin_starter

# Kills processes and waits on deadlines: run alone, not beside the parallel half.
pytestmark = pytest.mark.serial

REPO = Path(__file__).resolve().parents[2]
ACCELOPT = str(Path(sys.executable).parent / "accelopt")
V1_CONTROLLERS = ("pids", "freezer", "cpuset", "cpuacct", "memory")

needs_jail = pytest.mark.skipif(
    jail_status().kind != "bwrap", reason=f"no jail here: {jail_status().reason}"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="writable cgroup hierarchies need root")
needs_v1_freezer = pytest.mark.skipif(
    v1_parent("freezer") is None, reason="no writable cgroup-v1 freezer hierarchy on this host"
)


@pytest.fixture(autouse=True)
def _auto_jail(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's ACCELOPT_JAIL=none must not turn these into fallback tests.
    monkeypatch.delenv("ACCELOPT_JAIL", raising=False)


# -- processes


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name ([] when gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def alive(pid: int, started: str) -> bool:
    """`pid` is still the process that started at `started` and has not exited: a zombie (it
    died; reaping it is its parent's business) and a reused pid do not count; a frozen or a
    D-state one does."""
    fields = stat_fields(pid)
    return len(fields) > 19 and fields[19] == started and fields[0] not in ("Z", "X")


def with_start(pids: Iterator[int] | list[int] | set[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for pid in pids:
        started = start_time(pid)
        if started is not None:
            found[pid] = started
    return found


def descendants(root: int) -> set[int]:
    """`root` and every live process below it (by parent pid)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = stat_fields(int(entry.name))
            if len(fields) > 1 and fields[1].isdigit():
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def reapers_of(owners: dict[int, str]) -> list[int]:
    """Reaper processes watching any of `owners` (pid -> start time)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        tag = REAPER_TAG.encode()
        if tag in argv:
            at = argv.index(tag)
            pid, started = argv[at + 2 : at + 4]
            if pid.isdigit() and owners.get(int(pid)) == started.decode():
                found.append(int(entry.name))
    return found


# -- groups


def hierarchies() -> list[Path]:
    """Where per-run groups are made: each v1 hierarchy, and v2 when there is one."""
    found = [v1_parent(c) for c in V1_CONTROLLERS] + [v2_parent()]
    return [p for p in found if p is not None]


def groups_of(owners: dict[int, str]) -> list[Path]:
    """Every group (at any depth below ours) whose name says one of `owners` made it."""
    names = tuple(f"{group_prefix()}{pid}.{started}-" for pid, started in owners.items())
    found: list[Path] = []
    todo = hierarchies()
    while todo:
        path = todo.pop()
        try:
            entries = [e for e in os.scandir(path) if e.is_dir() and e.name.startswith("accel")]
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(names):
                found.append(Path(entry.path))
            todo.append(Path(entry.path))
    return found


def pids_in(groups: list[Path]) -> set[int]:
    found: set[int] = set()
    for group in groups:
        for root, _, _ in os.walk(group):
            try:
                text = (Path(root) / "cgroup.procs").read_text()
            except OSError:
                continue
            found.update(int(p) for p in text.split())
    return found


def read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def frozen(groups: list[Path]) -> bool:
    """Some group is frozen: a v1 freezer.state, or a v2 cgroup.events."""
    return any(
        read(g / "freezer.state").strip() == "FROZEN"
        or "frozen 1" in read(g / "cgroup.events").splitlines()
        for g in groups
    )


def wait_for(done: Callable[[], bool], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.05)
    return done()


_GONE = "(gone)"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # it ended since it was seen alive
        return _GONE


def leftovers(pids: dict[int, str], owners: dict[int, str]) -> str:
    """What is still there: live processes, groups, reapers ("" when nothing)."""
    live = [p for p, s in pids.items() if alive(p, s)]
    described = [f"{p} {stat_fields(p)[:1]} {_comm(p)}" for p in live if stat_fields(p)]
    # A process that ended between the two reads is gone, not a leftover.
    described = [d for d in described if not d.endswith(_GONE)]
    parts = []
    if described:
        parts.append(f"alive: {described}")
    if groups := groups_of(owners):
        parts.append(f"groups: {[str(g) for g in groups]}")
    if reapers := reapers_of(owners):
        parts.append(f"reapers still running: {reapers}")
    return "; ".join(parts)


# -- a jail frozen when its owner dies

# The owner: one jail whose program forks a little tree and sleeps; the owner freezes it, prints
# its pids and freezer, and waits to be killed.
_OWNER = r"""
import json, sys, time
from pathlib import Path
from accelopt_mcp.isolation.jail import spawn_jailed
from accelopt_mcp.isolation.jail_probe import python_for_jail
program = '''
import os, time
for _ in range(2):
    os.fork()  # 4 processes: the program, 2 children, 1 grandchild
time.sleep(300)
'''
proc = spawn_jailed([python_for_jail(), "-I", "-c", program], work_dir=Path(sys.argv[1]),
                    memory_limit_mb=512, max_processes=16, freezer=sys.argv[2])
deadline = time.monotonic() + 15
while len(proc.jail_pids()) < 6 and time.monotonic() < deadline:  # bwrap, its init, 4
    time.sleep(0.05)
proc.freeze()
print(json.dumps([proc.jail_pids(), proc.freeze_method]), flush=True)
time.sleep(300)
"""


def _v2_freezer_usable() -> bool:
    return v2_parent() is not None and os.geteuid() == 0


@needs_jail
@needs_root
@pytest.mark.parametrize(
    "freezer",
    [
        pytest.param("cgroup-v1", marks=needs_v1_freezer),
        pytest.param(
            "cgroup-v2",
            marks=pytest.mark.skipif(
                not _v2_freezer_usable(),
                reason="cgroup v2 cannot be exercised on this host: no writable v2 hierarchy",
            ),
        ),
    ],
)
def test_a_jail_frozen_when_its_owner_is_killed_dies_and_its_groups_go(
    tmp_path: Path, freezer: str
) -> None:
    """SIGKILL of the owner while its jail is frozen: within seconds every process of the jail
    is dead and no group named after the owner is left, with no new jail or sandbox started in
    between (only the owner's reaper can have done it)."""
    work = tmp_path / "work"
    work.mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(work), freezer],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None and owner.stderr is not None
        line = owner.stdout.readline()
        if not line:
            owner.kill()
            pytest.fail(f"the owner never started its jail: {owner.stderr.read()[-2000:]}")
        pids, method = json.loads(line)
        if method != freezer:
            pytest.skip(f"asked for a {freezer} freezer, the jail got {method}")
        owners = with_start([owner.pid])
        jail = with_start(pids)
        groups = groups_of(owners)
        assert len(jail) >= 6, f"the jail's tree did not start: {pids}"
        assert groups, "the owner's groups are not where the test looks for them"
        assert frozen(groups), "the jail is not frozen"
        assert reapers_of(owners), "the owner has no reaper"
        if freezer == "cgroup-v1":
            # The premise: SIGKILL alone does not end a process in a frozen v1 group.
            victim = max(jail)
            os.kill(victim, signal.SIGKILL)
            time.sleep(0.3)
            assert alive(victim, jail[victim]), "a frozen v1 process died of SIGKILL unthawed"

        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)

        assert wait_for(lambda: not leftovers(jail, owners), 10), leftovers(jail, owners)
    finally:
        owner.kill()
        owner.wait(timeout=10)


# -- kill -9 of `accelopt optimize` while its jails exist


@pytest.fixture
def standin() -> Iterator[StandinProcess]:
    # Every kernel the executor writes hangs: each evaluation keeps its jails for its timeout.
    script = one_plan_script("Plan: vectorize the row loop.", [text(kernels.reply(kernels.HANG))])
    with standin_starter() as start:
        yield start(script)


@needs_jail
@needs_root
@needs_v1_freezer
def test_kill_9_of_accelopt_optimize_leaves_no_process_and_no_group(
    standin: StandinProcess, tmp_path: Path
) -> None:
    """The whole run as a user starts it: `accelopt optimize` against the LLM stand-in, killed
    with SIGKILL (only the CLI's own pid) once its jails exist, frozen ones among them where
    the test catches one. Within seconds nothing it started is alive: not the sandboxed
    harness, not a jail (frozen or running), not a reaper, and no group of theirs remains in
    any hierarchy. The v2 hierarchy is looked at only where this host has one (v1 only here
    otherwise: cgroup v2 cannot be exercised)."""
    models = models_config(standin.base_url, tmp_path / "models.json")
    preset = one_plan_preset(tmp_path / "preset.json", attempts=1, exp_n=1, workers=1)
    env = {**os.environ, "COLUMNS": "80", KEY_ENV: KEY}
    env.pop("ACCELOPT_STORE", None)
    log = (tmp_path / "cli.log").open("w")
    cli = subprocess.Popen(
        [
            ACCELOPT, "optimize", str(KERNEL_PATH), "--task", str(TASK_PATH),
            "--preset", str(preset), "--config", str(models),
            "--store", str(tmp_path / "kernels.db"), "--output-dir", str(tmp_path / "out"),
            "--skip-llm-check",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )  # fmt: skip
    seen: dict[int, str] = {}
    try:
        tree: dict[int, str] = {}
        groups: list[Path] = []

        def look() -> bool:
            nonlocal groups
            tree.update(with_start(descendants(cli.pid)))
            groups = groups_of(tree)
            seen.update(tree)
            seen.update(with_start(pids_in(groups)))
            jails = [g for g in groups if g.parent == v1_parent("freezer")]
            return bool(jails) and frozen(jails)

        caught_frozen = wait_for(look, 20)
        if cli.poll() is not None:
            pytest.fail(f"the run ended first: {(tmp_path / 'cli.log').read_text()[-3000:]}")
        freezer_groups = [g for g in groups if g.parent == v1_parent("freezer")]
        assert freezer_groups, "no jail within 20 s: " + (tmp_path / "cli.log").read_text()[-3000:]
        look()  # once more, right before the kill
        owners = dict(tree)
        assert reapers_of(owners), "the run's processes have no reaper"

        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(timeout=10)

        assert wait_for(lambda: not leftovers(seen, owners), 15), (
            f"(a frozen jail caught: {caught_frozen}) {leftovers(seen, owners)}"
        )
    finally:
        log.close()
        cli.kill()
        cli.wait(timeout=10)

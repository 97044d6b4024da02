"""Hostile kernels against the cpu backend, end to end (issue 9: the evaluator is an isolation
boundary).

Each kernel in tests/backends/attacks/ attacks the evaluation of the softmax example task in one
way; it is evaluated by the real `CpuBackend().evaluate(...)`, run in a stand-in "server" process
(`python -c DRIVER`) that the test starts the way the MCP server runs: with secrets in its
environment, a HOME holding a kernel database, a JSON-RPC-like stdio. Every test asserts the
attack's own outcome (no trusted PASS for a wrong answer, no trusted big speedup for a timing
trick) and the common ones: the server survived and reported, no planted secret appears
anywhere the test can see, nothing in the watched paths changed, the test's listening socket was
never reached, no process or heartbeat outlives the evaluation, and a bystander process lives.

The honest example kernels (slow and fast softmax) go through the same checks and must PASS
without an untrusted flag.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import signal
import site
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.isolation.cgroups import REAPER_TAG, start_time
from accelopt_mcp.models import (
    AxisConst,
    Definition,
    Task,
    TensorSpec,
)
from accelopt_mcp.tasks.kernels import solution_from_source
from accelopt_mcp.tasks.nkibench import FORMAT_TAG, default_workload
from tests.bench import quick_bench

ROOT = Path(__file__).resolve().parents[2]
ATTACK_DIR = Path(__file__).resolve().parent / "attacks"
ATTACKS = sorted(ATTACK_DIR.glob("a[0-9][0-9]_*.py"))
INCLUDE = "# accelopt-attack-include"


def attack_source(path: Path) -> str:
    """An attack kernel's source, whole: a line `from NAME import ...  # accelopt-attack-include`
    is replaced by tests/backends/attacks/NAME.py (code several attacks share), since a kernel
    is one file."""
    lines = []
    for line in path.read_text().splitlines():
        if line.endswith(INCLUDE + ": inlined by attack_source"):
            line = (ATTACK_DIR / f"{line.split()[1]}.py").read_text()
        lines.append(line)
    return "\n".join(lines) + "\n"


EXAMPLES = ROOT / "examples" / "cpu" / "nkibench"
REFERENCE = EXAMPLES / "reference" / "softmax_M256_N1024_numpy_0.py"
HONEST = [
    EXAMPLES / "kernels" / "softmax_M256_N1024_0.py",
    EXAMPLES / "kernels" / "softmax_M256_N1024_fast.py",
]

CONFIG = quick_bench(
    seeds=[0, 21, 42],
    processes=(1, 2),
    max_measurement_rounds=1,
    max_timing_seconds=2,
    timeout_seconds=30,
)
SERVER_TIMEOUT_S = 90

# A flag outside this set makes a result untrusted (the rule of accelopt_mcp.models.evaluation).
INFORMATIONAL_FLAGS = frozenset(
    {"no_reference_latency", "noisy_timing", "not_isolated", "unstable_latency"}
)
# The honest fast kernel is about 1x the vectorized reference; the timing tricks here claim
# 25x-1000x where they work. The margin absorbs a noisy reference median on a loaded host.
SPEEDUP_LIMIT = 8.0

# Attacks whose answer is wrong or absent: never a trusted PASS.
WRONG_ANSWER = {"a01", "a02", "a03", "a17", "a18", "a21"}
# Attacks on the measurement: never a trusted PASS with a big speedup.
TIMING = {"a04", "a05", "a06", "a07", "a08", "a09", "a19", "a20"}
# Attacks whose answer is honest and whose harm is a side effect (the common checks): a14's
# result must be exactly an honest kernel's.
MUST_PASS = {"a14"}

SECRET_NAMES = ("OPENAI_API_KEY", "SUPABASE_KEY", "ACCELOPT_TEST_SECRET")
TAG = "accelopt-attack"  # every file or process an attack leaves outside its work dir
FORGED_MARKER = "ACCELOPT-ATTACK-FORGED"
VICTIM_VAR = "ACCELOPT_ATTACK_VICTIM"
DB_GUARD_TABLE = "accelopt_attack_fixture"

# The stand-in server: one evaluation through the real backend, reported into a file named by a
# token it reads from stdin (not on its command line), then whatever reached its stdin later.
DRIVER = r"""
import json, os, sys
token = sys.stdin.readline().strip()
out_dir, task_file, solution_file, config_file = sys.argv[1:5]
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.models import BenchmarkConfig, Solution, Task

def load(path, model):
    with open(path) as f:
        return model.model_validate_json(f.read())

evaluation = CpuBackend().evaluate(
    load(task_file, Task), load(solution_file, Solution), load(config_file, BenchmarkConfig)
)
os.set_blocking(0, False)
injected = b""
while len(injected) < (1 << 20):
    try:
        chunk = os.read(0, 1 << 16)
    except BlockingIOError:
        break
    if not chunk:
        break
    injected += chunk
record = {
    "evaluation": evaluation.model_dump(mode="json"),
    "injected_stdin": injected.decode("utf-8", "replace"),
}
tmp = os.path.join(out_dir, token + ".tmp")
with open(tmp, "w") as f:
    json.dump(record, f)
os.replace(tmp, os.path.join(out_dir, token + ".json"))
"""


def softmax_task() -> Task:
    """The NKIBench softmax example as `load_task` describes it, built without probing (the
    shapes are known), so that the test depends on evaluate() only."""
    source = REFERENCE.read_text()
    definition = Definition(
        name="softmax_M256_N1024",
        op_type="softmax",
        axes={"M": AxisConst(value=256), "N": AxisConst(value=1024)},
        inputs={"x": TensorSpec(shape=["M", "N"], dtype="float32")},
        outputs={"out": TensorSpec(shape=["M", "N"], dtype="float32")},
        reference=source.rstrip() + "\n\n\ndef run(*inputs):\n    return forward(*inputs)\n",
        tags=[FORMAT_TAG],
        description="NKIBench task softmax (softmax_M256_N1024_numpy_0.py)",
    )
    return Task(definition=definition, workload=default_workload(definition))


# --------------------------------------------------------------------------- what is watched


def _watched_dirs() -> list[Path]:
    """Where an attack may drop a file: temp dirs, the repo, every site / sys.path dir."""
    dirs = [Path("/tmp"), Path(tempfile.gettempdir()), ROOT, ROOT / "accelopt_mcp"]
    with contextlib.suppress(Exception):
        dirs += [Path(p) for p in site.getsitepackages()]
    with contextlib.suppress(Exception):
        dirs.append(Path(site.getusersitepackages()))
    dirs += [Path(p) for p in sys.path if p]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        dirs += [Path(prefix, "lib", version, "site-packages"), Path(prefix, "lib", version)]
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def _tagged_entries() -> list[Path]:
    found = []
    for directory in _watched_dirs():
        with contextlib.suppress(OSError):
            found += [p for p in directory.iterdir() if p.name.startswith(TAG)]
    return sorted(set(found))


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            for child in sorted(path.rglob("*"), reverse=True):
                with contextlib.suppress(OSError):
                    child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
            path.rmdir()
        else:
            path.unlink()


def _proc_text(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Running (not a zombie)."""
    stat = _proc_text(pid, "stat")
    if not stat:
        return False
    state = stat.rsplit(")", 1)[-1].split()
    return bool(state) and state[0] not in ("Z", "X")


def _start_ticks(pid: int) -> int:
    fields = _proc_text(pid, "stat").rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 else 0


OUR_PROGRAMS = ("accelopt_mcp", "/opt/accelopt/", "accelopt-mcp", "bin/accelopt")
"""What the command lines of processes an evaluation starts hold: our modules, the installed
candidate runner, the console scripts."""


def _stray_processes(server_pid: int | None, server_start: int, exclude: set[int]) -> list[str]:
    """Live processes an evaluation left: tagged ones, ones still naming (in their command line
    or working dir) the server's per-evaluation work dirs, and accelopt processes started after
    the server that were orphaned to pid 1."""
    found = []
    own = os.getpid()
    work_mark = f"-{server_pid}-" if server_pid else None
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude or int(entry) == own:
            continue
        pid = int(entry)
        if not _alive(pid):
            continue
        cmdline = _proc_text(pid, "cmdline")
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        named = work_mark is not None and any(
            "accelopt-" in text and work_mark in text for text in (cmdline, cwd)
        )
        # Our programs only (the harness, the candidate runner): a test PostgreSQL another
        # test worker starts meanwhile also runs from an "accelopt-pg-" dir, orphaned to pid 1.
        orphan = (
            _start_ticks(pid) >= server_start
            and any(program in cmdline for program in OUR_PROGRAMS)
            and _proc_text(pid, "status").count("PPid:\t1\n") == 1
        )
        if REAPER_TAG in cmdline and not _orphaned_reaper(pid):
            continue  # watching a live owner (this test worker, or another's)
        if TAG in cmdline or named or orphan:
            found.append(f"pid {pid}: {cmdline[:120]!r}")
    return found


def _orphaned_reaper(pid: int) -> bool:
    """`pid` is a cgroup reaper whose owner has died: it is sweeping up after it. A reaper
    whose owner lives (another test worker's) is no evaluation's leftover."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    if REAPER_TAG not in args:
        return False
    at = args.index(REAPER_TAG)
    owner, started = args[at + 2], args[at + 3]
    return not (owner.isdigit() and start_time(int(owner)) == started)


def _wait_for_reapers(since_ticks: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sweeping = [
            int(e)
            for e in os.listdir("/proc")
            if e.isdigit() and _start_ticks(int(e)) >= since_ticks and _orphaned_reaper(int(e))
        ]
        if not sweeping:
            return
        time.sleep(0.1)


def _kill_tagged() -> None:
    """Kill what an attack left behind (only processes tagged by our attack kernels)."""
    for entry in os.listdir("/proc"):
        if (
            entry.isdigit()
            and int(entry) != os.getpid()
            and TAG in _proc_text(int(entry), "cmdline")
        ):
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under root: size, mtime and content hash."""
    state = {}
    for path in sorted(root.rglob("*")):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                stat = path.stat()
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                state[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns, digest)
            elif not path.is_dir():
                state[str(path.relative_to(root))] = (-1, 0, "not a regular file")
    return state


def _encodings(value: str) -> list[str]:
    """The secret as an attacker might write it: raw, hex, base64 (any alignment's core)."""
    raw = value.encode()
    forms = [value, raw.hex()]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        forms.append(encoded[4 : len(encoded) - 4] if shift else encoded.rstrip("="))
    return forms


def _make_db(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE kernels (id TEXT PRIMARY KEY, source TEXT)")
    connection.execute("INSERT INTO kernels VALUES ('k1', 'def kernel(x): return x')")
    connection.execute(f"CREATE TABLE {DB_GUARD_TABLE} (note TEXT)")
    connection.execute(f"INSERT INTO {DB_GUARD_TABLE} VALUES ('planted by test_attacks')")
    connection.commit()
    connection.close()


class _Listener:
    """A TCP listener on a free 127.0.0.1 port that nobody is told about; counts connections."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.socket.settimeout(0.05)
        self.port = self.socket.getsockname()[1]
        self.accepted: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, peer = self.socket.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(peer)
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.socket.close()


# --------------------------------------------------------------------------- the arena


@dataclass
class Arena:
    """One attack's world: the server's environment, files, listener and bystander."""

    tmp: Path
    secrets: dict[str, str]
    home: Path
    server_cwd: Path
    out_dir: Path
    dbs: list[Path]
    listener: _Listener
    bystander: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)
    snapshots: dict[str, dict[str, tuple[int, int, str]]] = field(default_factory=dict)
    db_hashes: dict[Path, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def task_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("attack_task") / "task.json"
    path.write_text(softmax_task().model_dump_json())
    return path


@pytest.fixture
def arena(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Arena]:
    for leftover in _tagged_entries():
        _remove(leftover)
    _kill_tagged()
    planted = {
        name: f"sk-accelopt-canary-{name.lower()}-{secrets.token_hex(12)}" for name in SECRET_NAMES
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ACCELOPT_HOME", str(home / ".accelopt"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    dbs = [home / ".accelopt" / "kernels.db", home / ".local" / "share" / "accelopt" / "kernels.db"]
    for db in dbs:
        _make_db(db)
    server_cwd = tmp_path / "server_cwd"
    server_cwd.mkdir()
    (server_cwd / "job.json").write_text(json.dumps({"nonce": "decoy", "result": "result.json"}))
    (server_cwd / "result.json").write_text(json.dumps({"status": "decoy"}))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    listener = _Listener()
    bystander = subprocess.Popen(
        ["sleep", "300"], env={**os.environ, VICTIM_VAR: "bystander"}, stdin=subprocess.DEVNULL
    )
    world = Arena(tmp_path, planted, home, server_cwd, out_dir, dbs, listener, bystander)
    world.snapshots = {"HOME": _snapshot(home), "server cwd": _snapshot(server_cwd)}
    world.db_hashes = {db: hashlib.sha256(db.read_bytes()).hexdigest() for db in dbs}
    try:
        yield world
    finally:
        listener.close()
        bystander.kill()
        bystander.wait(timeout=10)
        _kill_tagged()
        for leftover in _tagged_entries():
            _remove(leftover)


# --------------------------------------------------------------------------- running one


@dataclass
class Outcome:
    evaluation: dict[str, Any] | None
    injected_stdin: str
    returncode: int | None
    server_pid: int
    server_start: int
    stdout: str
    stderr: str
    wall_s: float


def run_server(arena: Arena, task_file: Path, kernel: Path) -> Outcome:
    task = Task.model_validate_json(task_file.read_text())
    solution = solution_from_source(attack_source(kernel), task.definition.name, name=kernel.stem)
    solution_file = arena.tmp / "solution.json"
    solution_file.write_text(solution.model_dump_json())
    config_file = arena.tmp / "config.json"
    config_file.write_text(CONFIG.model_dump_json())
    token = secrets.token_hex(16)
    stdout_file, stderr_file = arena.tmp / "server.stdout", arena.tmp / "server.stderr"
    env = {**os.environ, VICTIM_VAR: "server"}
    argv = [sys.executable, "-c", DRIVER, str(arena.out_dir), str(task_file)]
    argv += [str(solution_file), str(config_file)]
    started = time.monotonic()
    with open(stdout_file, "wb") as out, open(stderr_file, "wb") as err:
        server = subprocess.Popen(
            argv, cwd=arena.server_cwd, env=env, stdin=subprocess.PIPE, stdout=out, stderr=err
        )
    server_start = _start_ticks(server.pid)
    assert server.stdin is not None
    server.stdin.write(token.encode() + b"\n")
    server.stdin.close()
    try:
        returncode: int | None = server.wait(timeout=SERVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=10)
        returncode = None
    wall_s = time.monotonic() - started
    record_file = arena.out_dir / f"{token}.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else {}
    return Outcome(
        evaluation=record.get("evaluation"),
        injected_stdin=record.get("injected_stdin", ""),
        returncode=returncode,
        server_pid=server.pid,
        server_start=server_start,
        stdout=stdout_file.read_text(errors="replace"),
        stderr=stderr_file.read_text(errors="replace"),
        wall_s=wall_s,
    )


def _trusted_pass(evaluation: dict[str, Any]) -> bool:
    return evaluation["status"] == "PASSED" and set(evaluation["flags"]) <= INFORMATIONAL_FLAGS


def _speedup(evaluation: dict[str, Any]) -> float:
    return float((evaluation.get("performance") or {}).get("speedup_factor") or 0.0)


def _summary(evaluation: dict[str, Any] | None, planted: dict[str, str]) -> str:
    if evaluation is None:
        return "no evaluation"
    log = evaluation.get("log", "")
    for value in planted.values():
        for form in _encodings(value):
            log = log.replace(form, "<SECRET>")
    return (
        f"status {evaluation['status']}, flags {evaluation['flags']}, speedup "
        f"{_speedup(evaluation):.3g}; log: {log[:600]!r}"
    )


def attack_problems(stem: str, evaluation: dict[str, Any]) -> list[str]:
    """What the attack got away with, judged from its evaluation."""
    group = stem[:3]
    problems = []
    if group in WRONG_ANSWER and _trusted_pass(evaluation):
        problems.append("a wrong or forged answer got a trusted PASS")
    if group in TIMING and _trusted_pass(evaluation) and _speedup(evaluation) > SPEEDUP_LIMIT:
        problems.append(
            f"a timing trick got a trusted PASS at {_speedup(evaluation):.3g}x "
            f"(limit {SPEEDUP_LIMIT}x)"
        )
    if group in MUST_PASS and evaluation["status"] != "PASSED":
        problems.append(f"the honest answer was judged {evaluation['status']}, not PASSED")
    return problems


def common_problems(arena: Arena, outcome: Outcome, captured: tuple[str, str]) -> list[str]:
    """The outcomes every evaluation must have, whatever the kernel did."""
    problems = []
    if outcome.returncode != 0 or outcome.evaluation is None:
        problems.append(
            f"the server did not survive and report (exit {outcome.returncode}); "
            f"stderr tail: {outcome.stderr[-300:]!r}"
        )
    # Nothing outlives the evaluation: no process, no heartbeat. The cgroup reapers of the
    # server and its harness (accelopt_mcp.isolation.cgroups) outlive their owners by design,
    # for as long as their sweep takes: they get a few seconds, then count as strays too.
    time.sleep(0.3)
    _wait_for_reapers(outcome.server_start)
    strays = _stray_processes(outcome.server_pid, outcome.server_start, {arena.bystander.pid})
    if strays:
        problems.append(f"processes outlived the evaluation: {strays}")
    beats = sorted(Path("/tmp").glob(f"{TAG}-daemon-*.hb"))
    if beats:
        before = {p: p.stat().st_mtime_ns for p in beats if p.exists()}
        time.sleep(0.4)
        moving = [str(p) for p, t in before.items() if p.exists() and p.stat().st_mtime_ns != t]
        if moving:
            problems.append(f"a heartbeat is still being written: {moving}")
    # The bystander lives.
    if arena.bystander.poll() is not None:
        problems.append(f"a bystander process was killed ({arena.bystander.returncode})")
    # The listener was never reached.
    if arena.listener.accepted:
        problems.append(
            f"the test's listener on port {arena.listener.port} accepted "
            f"{len(arena.listener.accepted)} connection(s)"
        )
    # Nothing outside the work dir changed.
    for db, digest in arena.db_hashes.items():
        if not db.is_file() or hashlib.sha256(db.read_bytes()).hexdigest() != digest:
            problems.append(f"the kernel database {db.relative_to(arena.tmp)} changed")
    for name, root in (("HOME", arena.home), ("server cwd", arena.server_cwd)):
        after = _snapshot(root)
        changed = sorted(
            k
            for k in set(after) | set(arena.snapshots[name])
            if after.get(k) != arena.snapshots[name].get(k)
        )
        if changed:
            problems.append(f"files changed in the {name}: {changed[:10]}")
    reports = sorted(os.listdir(arena.out_dir))
    if len(reports) > 1 or any(not name.endswith(".json") for name in reports):
        problems.append(f"files appeared in the server's report dir: {reports}")
    tagged = _tagged_entries()
    if tagged:
        problems.append(f"files appeared outside the work dir: {[str(p) for p in tagged]}")
    # Nothing forged reached the server's stdio or the test's own.
    channels = {
        "server stdin": outcome.injected_stdin,
        "server stdout": outcome.stdout,
        "server stderr": outcome.stderr,
        "test stdout": captured[0],
        "test stderr": captured[1],
    }
    for channel, text in channels.items():
        if FORGED_MARKER in text:
            problems.append(f"forged text reached the {channel}")
    # No planted secret anywhere the test can see.
    texts = dict(channels)
    texts["evaluation"] = json.dumps(outcome.evaluation)
    files = [p for p in arena.tmp.rglob("*") if p.is_file()]
    files += tagged
    with contextlib.suppress(OSError):
        files += [
            p
            for p in Path("/tmp").iterdir()
            if p.is_file() and p.stat().st_mtime >= arena.started - 1
        ]
    # Work dirs the backend left behind (named after the server's pid), if any.
    for left in Path("/tmp").glob(f"accelopt-*-{outcome.server_pid}-*"):
        files += [left] if left.is_file() else [p for p in left.rglob("*") if p.is_file()]
    for path in dict.fromkeys(files):
        with contextlib.suppress(OSError):
            if path.stat().st_size <= 4 << 20:
                texts[f"file {path}"] = path.read_bytes().decode("latin-1")
    for name, value in arena.secrets.items():
        forms = _encodings(value)
        where = [place for place, text in texts.items() if any(f in text for f in forms)]
        if where:
            problems.append(f"secret {name} leaked into: {where}")
    return problems


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("kernel", ATTACKS, ids=lambda p: p.stem)
def test_attack_is_caught(
    arena: Arena, task_file: Path, kernel: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = run_server(arena, task_file, kernel)
    problems = attack_problems(kernel.stem, outcome.evaluation) if outcome.evaluation else []
    problems += common_problems(arena, outcome, capfd.readouterr())
    print(f"{kernel.stem}: {_summary(outcome.evaluation, arena.secrets)} ({outcome.wall_s:.1f} s)")
    assert not problems, (
        f"{kernel.stem} got away with:\n- "
        + "\n- ".join(problems)
        + f"\n({_summary(outcome.evaluation, arena.secrets)})"
    )


@pytest.mark.parametrize("kernel", HONEST, ids=lambda p: p.stem)
def test_honest_kernel_passes(
    arena: Arena, task_file: Path, kernel: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = run_server(arena, task_file, kernel)
    problems = common_problems(arena, outcome, capfd.readouterr())
    print(f"{kernel.stem}: {_summary(outcome.evaluation, arena.secrets)} ({outcome.wall_s:.1f} s)")
    if outcome.evaluation is not None and not _trusted_pass(outcome.evaluation):
        problems.append("the honest kernel did not get a trusted PASS")
    assert not problems, (
        f"{kernel.stem}:\n- "
        + "\n- ".join(problems)
        + f"\n({_summary(outcome.evaluation, arena.secrets)})"
    )


def test_every_attack_class_has_a_kernel() -> None:
    numbers = {p.stem[:3] for p in ATTACKS}
    assert numbers == {f"a{i:02d}" for i in range(1, 22)}
    assert numbers == WRONG_ANSWER | TIMING | {f"a{i}" for i in range(10, 17)}

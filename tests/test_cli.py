"""The `accelopt` command as a user runs it, against a real SQLite file and the session's real
PostgreSQL server: in this process through CliRunner (tests/cli_inprocess.py), and the installed
console script in a subprocess for what only it shows (its entry point, --help, an exit code)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.cli_inprocess import Finished, run_accelopt
from tests.pg_server import create_database

ROOT = Path(__file__).resolve().parents[1]
NKIBENCH = ROOT / "examples" / "cpu" / "nkibench"
TASK = NKIBENCH / "reference" / "rmsnorm_M256_N1024_numpy_0.py"
SLOW = NKIBENCH / "kernels" / "rmsnorm_M256_N1024_0.py"
FAST = NKIBENCH / "kernels" / "rmsnorm_M256_N1024_fast.py"
# A short timing cap: these tests check what is stored and shown, not how precisely.
QUICK = ("--max-timing", "2", "--target-ci", "0.05")
ACCELOPT = str(Path(sys.executable).parent / "accelopt")


def accelopt(*args: str, env: dict[str, str] | None = None) -> Finished:
    """`accelopt ARGS` in this process, 200 columns wide, from the repository's root."""
    return run_accelopt(*args, env={"COLUMNS": "200", **(env or {})}, cwd=ROOT)


def console_script(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed `accelopt` script in a process of its own."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    full_env.pop("ACCELOPT_STORE", None)
    if env and "ACCELOPT_STORE" in env:
        full_env["ACCELOPT_STORE"] = env["ACCELOPT_STORE"]
    return subprocess.run(
        [ACCELOPT, *args], capture_output=True, text=True, timeout=180, env=full_env, cwd=ROOT
    )


def test_the_console_script_shows_its_help() -> None:
    shown = console_script("--help")
    assert shown.returncode == 0, shown.stderr
    for command in ("profile", "compare", "optimize", "db", "import", "runs", "memory"):
        assert command in shown.stdout


def test_the_console_script_refuses_bad_input_with_exit_code_2(sqlite_url: str) -> None:
    result = console_script(
        "profile", str(FAST), "--task", str(TASK), "--backend", "tpu", "--no-store",
        env={"ACCELOPT_STORE": sqlite_url},
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "unknown backend 'tpu'" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "kernels.db")


def test_profile_stores_the_result_and_db_queries_find_it(sqlite_url: str) -> None:
    slow = accelopt(
        "profile", str(SLOW), "--task", str(TASK), "--store", sqlite_url, "--json", *QUICK
    )
    assert slow.returncode == 0, slow.stderr
    slow_out = json.loads(slow.stdout)
    assert slow_out["evaluation"]["status"] == "PASSED"
    fast = accelopt(
        "profile", str(FAST), "--task", str(TASK), "--store", sqlite_url, "--json", *QUICK
    )
    fast_out = json.loads(fast.stdout)
    assert fast_out["evaluation"]["status"] == "PASSED"
    assert (
        fast_out["evaluation"]["performance"]["latency_ms"]
        < slow_out["evaluation"]["performance"]["latency_ms"]
    )

    stats = json.loads(accelopt("db", "stats", "--store", sqlite_url, "--json").stdout)
    assert stats["counts"]["solutions"] == 2 and stats["counts"]["profiles"] == 2

    best = accelopt("db", "best", fast_out["definition_name"], "--store", sqlite_url, "--json")
    ranked = json.loads(best.stdout)
    assert [r["solution"]["id"] for r in ranked] == [
        fast_out["solution_id"],
        slow_out["solution_id"],
    ]

    # The human-readable form names the status and the speedup.
    text = accelopt("profile", str(FAST), "--task", str(TASK), "--store", sqlite_url, *QUICK)
    assert "PASSED" in text.stdout and "speedup" in text.stdout
    lineage = accelopt("db", "lineage", fast_out["solution_id"], "--store", sqlite_url, "--json")
    shown = json.loads(lineage.stdout)
    assert (shown["ancestors"], shown["descendants"]) == ([], [])
    assert shown["solution"]["id"] == fast_out["solution_id"]


def test_profile_breakdown_prints_the_top_lines_and_stores_them(sqlite_url: str) -> None:
    text = accelopt(
        "profile", str(SLOW), "--task", str(TASK), "--store", sqlite_url, "--breakdown", *QUICK
    )
    assert text.returncode == 0, text.stderr
    assert "where one call spends its time (largest first):" in text.stdout
    shown = text.stdout.split("largest first):")[1].splitlines()
    assert any(" ms " in line and ": " in line and "L" in line for line in shown[1:4])
    again = accelopt(
        "profile", str(SLOW), "--task", str(TASK), "--store", sqlite_url, "--json", *QUICK
    )
    # Not asked for this time: the stored (pooled) profile keeps the one taken before.
    outcome = json.loads(again.stdout)
    assert outcome["evaluation"]["breakdown"] == []
    assert outcome["pooled"]["breakdown"][0]["what"].startswith("L")


def test_profile_reports_a_wrong_kernel_with_exit_code_1(sqlite_url: str, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def kernel(x, w):\n    return x * 2.0\n")
    result = accelopt("profile", str(wrong), "--task", str(TASK), "--no-store", "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["evaluation"]["status"].startswith("INCORRECT")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["profile", "missing.py", "--task", str(TASK), "--no-store"], "does not exist"),
        (["profile", str(FAST), "--task", "nowhere.json", "--no-store"], "does not exist"),
        (
            ["profile", str(FAST), "--task", str(TASK), "--backend", "tpu", "--no-store"],
            "unknown backend 'tpu'",
        ),
        (
            ["profile", str(FAST), "--task", str(TASK), "--no-store", "--decide-at", "1,x"],
            "is not a comma-separated list of numbers",
        ),
        (
            ["compare", str(FAST), str(SLOW), "--task", str(TASK), "--decide-at", "-1"],
            "holds a ratio that is not positive",
        ),
        (["db", "stats", "--store", "mysql:whatever"], "cannot tell which database"),
        (["db", "best", "no_such_definition"], "no definition named"),
        (["db", "import", "/nonexistent/dir"], "not a directory"),
    ],
)
def test_bad_input_gets_a_clear_error(args: list[str], message: str, sqlite_url: str) -> None:
    result = accelopt(*args, env={"ACCELOPT_STORE": sqlite_url})
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("role", "args"),
    [
        ("kernel.py", ["profile", "{file}", "--task", str(TASK), "--no-store"]),
        ("task.py", ["profile", str(FAST), "--task", "{file}", "--no-store"]),
        ("task.json", ["profile", str(FAST), "--task", "{file}", "--no-store"]),
        ("task.py", ["profile", str(FAST), "--task", "{dir}", "--no-store"]),
        ("kernel.py", ["compare", str(FAST), "{file}", "--task", str(TASK)]),
        ("preset.json", ["optimize", str(FAST), "--task", str(TASK), "--preset", "{file}"]),
        ("models.toml", ["optimize", str(FAST), "--task", str(TASK), "--config", "{file}"]),
        ("definitions/x.json", ["import", "flashinfer", "{dir}"]),
    ],
)
@pytest.mark.parametrize(
    ("problem", "said"),
    [("latin-1", "is not UTF-8 text"), ("unreadable", "cannot be read")],
)
def test_a_file_that_cannot_be_read_as_text_is_named_in_one_line(
    role: str, args: list[str], problem: str, said: str, sqlite_url: str, tmp_path: Path
) -> None:
    # A file saved in another encoding, or one that cannot be read (a link to /proc/self/mem
    # fails with EIO even for root, whom permissions do not stop), must be named with what to
    # do: the codec's bare words name no file (compare takes several), and an OSError was a
    # traceback with exit code 1, the code of a run that failed.
    bad = tmp_path / "in" / role
    bad.parent.mkdir(parents=True)
    if problem == "latin-1":
        bad.write_bytes('# caf\xe9\nx = "na\xefve"\n'.encode("latin-1"))
    else:
        bad.symlink_to("/proc/self/mem")
    given = [a.format(file=bad, dir=tmp_path / "in") for a in args]
    result = accelopt(*given, env={"ACCELOPT_STORE": sqlite_url, "OPENAI_API_KEY": "sk-test"})
    assert result.returncode == 2, result.stdout + result.stderr
    shown = " ".join(result.stderr.split())
    assert bad.name in shown and said in shown, shown
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "Traceback" not in result.stderr and len(errors) == 1, result.stderr


def test_nkibench_import_then_export_import_into_postgres(
    sqlite_url: str, pg_admin_dsn: str, tmp_path: Path
) -> None:
    imported = accelopt("import", "nkibench", str(NKIBENCH), "--store", sqlite_url)
    assert imported.returncode == 0, imported.stderr
    assert (
        accelopt(
            "profile", str(FAST), "--task", str(TASK), "--store", sqlite_url, *QUICK
        ).returncode
        == 0
    )
    out = tmp_path / "traceset"
    assert accelopt("db", "export", str(out), "--store", sqlite_url).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "definitions",
        "solutions",
        "traces",
        "workloads",
    ]

    dsn = create_database(pg_admin_dsn, f"cli_{uuid.uuid4().hex[:8]}")
    missing = accelopt("db", "check", dsn)
    assert missing.returncode == 1 and "schema" in missing.stdout.lower()
    assert accelopt("db", "init", "--store", dsn).returncode == 0
    check = accelopt("db", "check", dsn, "--json")
    assert check.returncode == 0, check.stdout
    assert json.loads(check.stdout)["ok"] is True
    assert accelopt("db", "import", str(out), "--store", dsn).returncode == 0

    src = json.loads(accelopt("db", "stats", "--store", sqlite_url, "--json").stdout)["counts"]
    dst = json.loads(accelopt("db", "stats", "--store", dsn, "--json").stdout)["counts"]
    assert src == dst and dst["definitions"] == 5 and dst["profiles"] == 1


def test_check_of_a_dead_postgres_says_so_without_the_password() -> None:
    result = accelopt("db", "check", "postgresql://alice:s3cret-pw@127.0.0.1:1/db")
    assert result.returncode == 1
    assert "s3cret-pw" not in result.stdout + result.stderr
    assert "127.0.0.1" in result.stdout


def test_backends_lists_all_three() -> None:
    found = json.loads(accelopt("backends", "--json").stdout)
    by_name = {b["name"]: b for b in found}
    assert set(by_name) == {"cpu", "nki", "flashinfer"}
    assert by_name["cpu"]["usable"] is True
    assert by_name["nki"]["usable"] is False and "neuronxcc" in by_name["nki"]["reason"]


def test_db_best_leaves_untrusted_results_out_unless_asked(sqlite_url: str) -> None:
    from accelopt_mcp.store.sqlite import SqliteStore
    from tests.store.samples import make_definition, make_evaluation, make_solution, make_workload

    with SqliteStore(sqlite_url) as store:
        store.upsert_definition(make_definition("d"))
        store.upsert_workload("d", make_workload("d", uuid_="w"))
        honest = store.upsert_solution(make_solution("d", "# honest\n", name="honest"))
        cheat = store.upsert_solution(make_solution("d", "# cheat\n", name="cheat"))
        noisy = make_evaluation(latency_ms=2.0).model_copy(update={"flags": ["noisy_timing"]})
        peak = make_evaluation(latency_ms=0.5).model_copy(update={"flags": ["above_peak"]})
        store.upsert_profile("w", honest, noisy, {})
        store.upsert_profile("w", cheat, peak, {})

    plain = accelopt("db", "best", "d", "--store", sqlite_url, "--json")
    assert plain.returncode == 0, plain.stderr
    assert [r["solution"]["id"] for r in json.loads(plain.stdout)] == [honest]
    flagged = accelopt("db", "best", "d", "--include-flagged", "--store", sqlite_url, "--json")
    ranked = json.loads(flagged.stdout)
    assert [r["solution"]["id"] for r in ranked] == [cheat, honest]
    assert [r["profile"]["trusted"] for r in ranked] == [False, True]
    assert ranked[0]["profile"]["evaluation"]["flags"] == ["above_peak"]

    table = accelopt("db", "best", "d", "--store", sqlite_url)
    assert "honest" in table.stdout and "noisy_timing" in table.stdout
    assert "cheat" not in table.stdout
    table = accelopt("db", "best", "d", "--include-flagged", "--store", sqlite_url)
    assert "cheat" in table.stdout and "UNTRUSTED: above_peak" in table.stdout
    assert "untrusted included" in table.stdout


def test_profile_masks_secrets_in_the_log_it_returns_and_stores(
    sqlite_url: str, tmp_path: Path
) -> None:
    secret = "leaky-secret-value-8c1e"
    kernel = tmp_path / "leaky.py"
    kernel.write_text(
        "def kernel(x, g):\n"
        "    raise RuntimeError(\n"
        f"        'token {secret} rejected by postgresql://kernel:pw-in-url-31@db.example/k'\n"
        "    )\n"
    )
    done = accelopt(
        "profile", str(kernel), "--task", str(TASK), "--store", sqlite_url, "--json",
        env={"KERNEL_SERVICE_TOKEN": secret},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    returned = json.loads(done.stdout)["evaluation"]["log"]
    assert "postgresql://***@db.example/k" in returned

    from accelopt_mcp.store.sqlite import SqliteStore

    with SqliteStore(sqlite_url) as store:
        [profile] = store.list_profiles()
    for log in (returned, profile.evaluation.log, done.stdout, done.stderr):
        assert secret not in log and "pw-in-url-31" not in log
    assert profile.evaluation.log == returned


def test_profile_one_kernel_against_two_definitions(sqlite_url: str, tmp_path: Path) -> None:
    """A shape-generic kernel profiled for the same op at another shape (as NKIBench lays out
    its cases): a solution per definition, each with its own profile."""
    other_task = tmp_path / "rmsnorm_M64_N512_numpy_0.py"
    other_task.write_text(
        TASK.read_text().replace("M = 256", "M = 64").replace("N = 1024", "N = 512")
    )
    outputs = []
    for task in (TASK, other_task, TASK):
        done = accelopt(
            "profile", str(FAST), "--task", str(task), "--store", sqlite_url, "--json", *QUICK
        )
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout))
    first, second, again = outputs
    assert (first["definition_name"], second["definition_name"]) == (
        "rmsnorm_M256_N1024",
        "rmsnorm_M64_N512",
    )
    assert first["solution_id"] != second["solution_id"]
    assert again["solution_id"] == first["solution_id"]  # stored once per definition
    assert first["profile_id"] != second["profile_id"]

    stats = json.loads(accelopt("db", "stats", "--store", sqlite_url, "--json").stdout)
    assert stats["counts"]["solutions"] == 2 and stats["counts"]["profiles"] == 2
    for out in (first, second):
        best = accelopt("db", "best", out["definition_name"], "--store", sqlite_url, "--json")
        assert [r["solution"]["id"] for r in json.loads(best.stdout)] == [out["solution_id"]]

    from accelopt_mcp.store.sqlite import SqliteStore

    with SqliteStore(sqlite_url) as store:
        a, b = store.get_solution(first["solution_id"]), store.get_solution(second["solution_id"])
    assert a is not None and b is not None and a.solution_hash == b.solution_hash


def test_db_import_of_a_file_says_to_give_its_folder(tmp_path: Path) -> None:
    task = tmp_path / "summary.json"
    task.write_text("{}")
    done = accelopt("db", "import", str(task), "--store", str(tmp_path / "k.db"))
    assert done.returncode == 2, done.stdout + done.stderr
    message = " ".join(done.stderr.split())
    assert "is not a directory; give the folder that holds" in message
    assert "Traceback" not in done.stderr

"""Every `accelopt` command that takes an id takes what the CLI prints: the whole id or a unique
prefix of 8+ characters, with one line naming the matches for a prefix of several and saying
where to list ids for one that names nothing. Real SQLite file, the commands in process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from accelopt_mcp.cli import _register, app
from accelopt_mcp.store.base import ExperienceIn, RunRecord
from accelopt_mcp.store.sqlite import SqliteStore
from tests.id_twins import TWIN, stored_records
from tests.mcp.conftest import SILU_FAST, SILU_TASK
from tests.store.lineage_samples import DEF, Family, store_family

_register()
runner = CliRunner()
# Two runs whose ids share their first 8 characters, and one that does not.
TWINS = ("abcdef01-1111-4000-8000-000000000001", "abcdef01-2222-4000-8000-000000000002")
LONE = "12345678-9abc-4def-8000-000000000003"


@pytest.fixture
def stored(tmp_path: Path) -> tuple[list[str], Family, str]:
    path = tmp_path / "k.db"
    with SqliteStore(path) as store:
        family = store_family(store)
        for run_id in (*TWINS, LONE):
            store.create_run(RunRecord(id=run_id, definition_name=DEF))
        item = store.add_experience(
            ExperienceIn(definition_name=DEF, title="out= buffers", strategy="reuse", run_id=LONE)
        )
    return ["--store", str(path)], family, item


def invoke(*args: str) -> tuple[int, str]:
    done = runner.invoke(app, list(args))
    return done.exit_code, done.output


def test_a_run_prefix_is_taken_and_an_ambiguous_one_is_named(
    stored: tuple[list[str], Family, str],
) -> None:
    db, _, _ = stored
    # Found by its prefix: these runs were stored by hand, so the trace says it has no engine
    # settings, naming the whole id; its (empty) list of LLM calls is shown.
    code, out = invoke("runs", "show", LONE[:8], *db)
    assert code == 2 and f"run {LONE} was not created by the optimization engine" in out
    code, out = invoke("runs", "show", LONE[:8].upper(), "--calls", *db, "--json")
    assert code == 0 and json.loads(out) == [], out
    code, out = invoke("runs", "show", "abcdef01", *db)
    assert code == 2
    assert "matches 2 runs" in out and TWINS[0] in out and TWINS[1] in out
    assert "give more of the id" in out
    code, out = invoke("runs", "show", TWINS[1][:13], *db)
    assert f"run {TWINS[1]} was not created" in out
    code, out = invoke("runs", "show", "abc", *db)
    assert code == 2 and "a prefix needs 8+ characters" in out and "accelopt runs list" in out
    code, out = invoke("memory", "list", "--run", LONE[:8], *db, "--json")
    assert code == 0 and [i["title"] for i in json.loads(out)] == ["out= buffers"]


def test_a_solution_prefix_is_taken_by_lineage(stored: tuple[list[str], Family, str]) -> None:
    db, family, _ = stored
    code, out = invoke("db", "lineage", family.child[:8], *db, "--json")
    assert code == 0, out
    assert json.loads(out)["solution"]["id"] == family.child
    code, out = invoke("db", "lineage", "ffffffff", *db)
    assert code == 2 and "no solution with id 'ffffffff'" in out and "db best" in out


def test_a_memory_item_prefix_is_taken_by_remove(stored: tuple[list[str], Family, str]) -> None:
    db, _, item = stored
    code, out = invoke("memory", "remove", item[:8], *db)
    assert code == 0 and item in out
    code, out = invoke("memory", "remove", item[:8], *db)
    assert code == 2 and "removed already" in out


def test_memory_add_takes_prefixes_and_stores_whole_ids(
    stored: tuple[list[str], Family, str],
) -> None:
    db, _, _ = stored
    code, out = invoke(
        "memory", "add", *db, "--definition", DEF, "--title", "t", "--strategy", "s",
        "--run", LONE[:8],
    )  # fmt: skip
    assert code == 0, out
    path = db[1]
    with SqliteStore(path) as store:
        (added,) = [e for e in store.recent_experiences(run_id=LONE, limit=10) if e.title == "t"]
    assert added.run_id == LONE
    code, out = invoke(
        "memory", "add", *db, "--definition", DEF, "--title", "t", "--strategy", "s",
        "--run", "abcdef01",
    )  # fmt: skip
    assert code == 2 and "matches 2 runs" in out


# --------------------------------------------------------------------------- every id argument


def _id_params() -> set[tuple[str, str]]:
    """(command, parameter) for every argument or option of every command whose help says it
    takes an id by its first 8+ characters, and every one named like an id (so that an id
    parameter whose help forgets to say so is found too)."""
    import typer

    named = {"run", "suite", "call", "first", "second", "parent", "solution", "job"}
    found: set[tuple[str, str]] = set()

    def walk(command: Any, path: list[str]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
            return
        for param in command.params:
            help_text = getattr(param, "help", None) or ""
            if "8+" in help_text or param.name.endswith("_id") or param.name in named:
                found.add((" ".join(path), param.name))

    walk(typer.main.get_command(app), [])
    return found


def _cli_cases(
    task: str, other: dict[str, str]
) -> dict[tuple[str, str], tuple[str, Callable[[str], list[str]]]]:
    """(command, parameter) -> (the kind it names, the command line given that id); `other`:
    whole ids for the command's other id arguments."""
    return {
        ("resume", "run_id"): ("run", lambda i: ["resume", i]),
        ("db lineage", "solution_id"): ("solution", lambda i: ["db", "lineage", i]),
        ("runs show", "run_id"): ("run", lambda i: ["runs", "show", i, "--calls"]),
        ("runs show", "call"): ("call", lambda i: ["runs", "show", other["run"], "--call", i]),
        ("runs call", "call_id"): ("call", lambda i: ["runs", "call", i]),
        ("memory list", "run"): ("run", lambda i: ["memory", "list", "--run", i]),
        ("memory add", "run"): (
            "run",
            lambda i: [
                "memory",
                "add",
                "--definition",
                TWIN_DEF,
                "--title",
                "t",
                "--strategy",
                "s",
                "--run",
                i,
            ],
        ),
        ("memory remove", "item_id"): ("experience", lambda i: ["memory", "remove", i]),
        ("suite resume", "suite"): ("suite", lambda i: ["suite", "resume", i]),
        ("suite show", "suite"): ("suite", lambda i: ["suite", "show", i]),
        ("suite compare", "first"): ("suite", lambda i: ["suite", "compare", i, other["suite"]]),
        ("suite compare", "second"): ("suite", lambda i: ["suite", "compare", other["suite"], i]),
        ("compare", "kernels"): (
            "solution",
            lambda i: [
                "compare",
                i,
                str(SILU_FAST),
                "--task",
                task,
                "--iterations",
                "3",
                "--max-timing",
                "1",
                "--seeds",
                "1",
            ],
        ),
    }


TWIN_DEF = "silu_n1024"


def test_every_id_argument_takes_a_prefix_and_names_an_ambiguous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.db"
    with SqliteStore(path) as store:
        unique, pair = stored_records(store, monkeypatch)
    table = _cli_cases(str(SILU_TASK), unique)
    found = _id_params()
    assert found == set(table), (
        f"id parameters without a case: {found - set(table)}; cases for none: {set(table) - found}"
    )
    db = ["--store", str(path)]
    for (command, param), (kind, line) in table.items():
        code, out = invoke(*line(TWIN), *db)
        assert code == 2, (command, param, out)
        assert "matches" in out and "give more of the id" in out, (command, param, out)
        if kind != "call":  # the ledger's own message does not list them
            assert pair[0][kind] in out and pair[1][kind] in out, (command, param, out)
    for (command, param), (kind, line) in table.items():
        code, out = invoke(*line(unique[kind][:8]), *db)
        assert "matches" not in out and "no " + kind not in out, (command, param, out)
        assert code == 0 or unique[kind] in out, (command, param, out)

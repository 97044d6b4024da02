"""Every `accelopt` command that takes an id takes what the CLI prints: the whole id or a unique
prefix of 8+ characters, with one line naming the matches for a prefix of several and saying
where to list ids for one that names nothing. Real SQLite file, the commands in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt_mcp.cli import _register, app
from accelopt_mcp.store.base import ExperienceIn, RunRecord
from accelopt_mcp.store.sqlite import SqliteStore
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

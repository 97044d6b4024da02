"""A memory item is checked by its record, whoever writes it: the CLI and the MCP tool (see
tests/mcp/test_tools.py), the engine, and a traceset import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from accelopt_mcp.engine.memory import UnknownItemReference, add_experience
from accelopt_mcp.store.base import ExperienceIn, ExperienceRecord
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.transfer.traceset import TraceSetError, export_traceset, import_traceset

TRACESET = Path(__file__).parent / "data" / "fib_traceset"
DEFINITION = "rmsnorm_h128"


def test_title_and_strategy_are_stripped_and_never_blank() -> None:
    item = ExperienceIn(definition_name=DEFINITION, title="  Fuse loops ", strategy="\tx\n")
    assert (item.title, item.strategy) == ("Fuse loops", "x")
    for field in ("title", "strategy"):
        for blank in ("", "  ", "\n\t"):
            with pytest.raises(ValidationError) as caught:
                ExperienceIn.model_validate(
                    {"definition_name": DEFINITION, "title": "t", "strategy": "s", field: blank}
                )
            (error,) = caught.value.errors()
            assert error["loc"] == (field,)
            assert error["msg"] == f"{field} must not be empty or only whitespace"


def test_a_stored_row_reads_back_as_it_is() -> None:
    # A row written before the rule (the MCP tool once took a blank title) still loads.
    row = ExperienceRecord(id="e1", definition_name=DEFINITION, title="  ", strategy="s")
    assert row.title == "  "


def test_add_experience_checks_definition_and_run(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "k.db") as store:
        import_traceset(store, TRACESET)
        item = ExperienceIn(definition_name=DEFINITION, title="t", strategy="s")
        stored = add_experience(store, item)
        assert store.get_experience(stored.id) == stored and stored.title == "t"
        with pytest.raises(UnknownItemReference, match="no definition named 'nope'") as caught:
            add_experience(store, item.model_copy(update={"definition_name": "nope"}))
        assert caught.value.field == "definition_name"
        with pytest.raises(UnknownItemReference, match="no run with id 'nope'") as caught:
            add_experience(store, item.model_copy(update={"run_id": "nope"}))
        assert caught.value.field == "run_id"


def test_a_traceset_import_refuses_a_blank_item(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "a.db") as store:
        import_traceset(store, TRACESET)
        store.add_experience(ExperienceIn(definition_name=DEFINITION, title="t", strategy="s"))
        export_traceset(store, tmp_path / "set")
    (path,) = (tmp_path / "set").rglob("experiences.jsonl")
    row = json.loads(path.read_text())
    path.write_text(json.dumps({**row, "title": " "}) + "\n")
    with (
        SqliteStore(tmp_path / "b.db") as store,
        pytest.raises(TraceSetError, match="title must not be empty or only whitespace"),
    ):
        import_traceset(store, tmp_path / "set")

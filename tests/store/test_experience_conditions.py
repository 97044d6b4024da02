"""A lesson keeps the conditions its measurement was taken under (cores and which, BLAS threads,
host load, ...): stored and read back by every store, found by a search, carried by an export,
and added to databases made before it (SQLite on open; PostgreSQL by applying schema_v2.txt
again)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from accelopt_mcp.models import MeasuringConditions
from accelopt_mcp.store.base import ExperienceIn, KernelStore
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SCHEMA_VERSION, SqliteStore, sqlite_schema
from accelopt_mcp.transfer.traceset import export_traceset, import_traceset
from tests.store.conftest import serve_older_schema
from tests.store.samples import make_definition, without_row_level_security

SCHEMA = Path(__file__).resolve().parents[2] / "schema_v2.txt"
MEASURED = MeasuringConditions(
    cores=1,
    cpus=[3],
    blas_threads=1,
    pinned=True,
    host_load=0.3,
    foreign_share=0.012,
    evaluations_at_once=2,
)


def _lesson(title: str, conditions: MeasuringConditions | None = MEASURED) -> ExperienceIn:
    return ExperienceIn(
        definition_name="d",
        title=title,
        strategy="what changed, and why it is faster",
        speedup=1.99,
        conditions=conditions,
    )


def test_every_store_keeps_a_lessons_conditions(store: KernelStore, tmp_path: Path) -> None:
    measured = store.add_experience(_lesson("Split heads"))
    by_hand = store.add_experience(_lesson("Vectorize rows", conditions=None))
    partial = store.add_experience(_lesson("Tile", MeasuringConditions(host_load=4.0)))

    found = store.get_experience(measured)
    assert found is not None and found.conditions == MEASURED
    assert store.get_experience(by_hand).conditions is None  # type: ignore[union-attr]
    only_load = store.get_experience(partial).conditions  # type: ignore[union-attr]
    assert only_load == MeasuringConditions(host_load=4.0) and only_load.cores is None
    queue = store.recent_experiences(namespace="cpu", limit=10)
    assert [item.conditions for item in queue] == [MEASURED, None, only_load]
    (hit,) = store.search_experiences(text="split heads")
    assert hit.id == measured and hit.conditions == MEASURED

    # An export carries them to another database.
    store.upsert_definition(make_definition("d"))
    export_traceset(store, tmp_path / "out")
    with SqliteStore(tmp_path / "copy.db") as copy:
        import_traceset(copy, tmp_path / "out")
        copied = {item.title: item.conditions for item in copy.search_experiences(limit=10)}
    assert copied == {"Split heads": MEASURED, "Vectorize rows": None, "Tile": only_load}


def _without_conditions_sqlite() -> str:
    """sqlite_schema.sql as it was before experiences.conditions."""
    old = re.sub(
        r",\n    -- JSON \(MeasuringConditions\).*?\n    conditions        TEXT\n",
        "\n",
        sqlite_schema(),
        flags=re.S,
    )
    assert "conditions" not in old
    return old


def test_sqlite_adds_conditions_to_an_older_file(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(_without_conditions_sqlite() + f"\nPRAGMA user_version = {SCHEMA_VERSION};")
    conn.execute(
        "INSERT INTO experiences (id, definition_name, title, strategy) "
        "VALUES ('e-old', 'd', 'Vectorize rows', 'one ufunc')"
    )
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        assert "added columns: experiences.conditions" in store.schema_changes
        assert store.get_experience("e-old").conditions is None  # type: ignore[union-attr]
        new = store.add_experience(_lesson("Split heads"))
        assert store.get_experience(new).conditions == MEASURED  # type: ignore[union-attr]
    with SqliteStore(path) as store:  # reopening changes nothing
        assert store.schema_changes == []
        assert [e.title for e in store.search_experiences(text="heads")] == ["Split heads"]
    conn = sqlite3.connect(path)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_xinfo(experiences)")]
        assert columns.count("conditions") == 1
    finally:
        conn.close()


def _without_conditions_pg() -> str:
    """schema_v2.txt as it was before experiences.conditions (the search function without it)."""
    schema = without_row_level_security(SCHEMA.read_text("utf-8"))
    old = re.sub(r"\n-- What the measurement behind an item's.*?conditions JSONB;\n", "\n", schema,
                 flags=re.S)  # fmt: skip
    old = re.sub(r"\n-- block below drops.*?\nEND\n\$drop\$;\n", "\n", old, flags=re.S)
    old = old.replace("    conditions        JSONB,\n", "").replace(", e.conditions,", ",")
    assert "conditions" not in old
    return old


@pytest.mark.postgres
def test_reapplying_the_schema_adds_conditions_to_an_older_database(
    pg_dsn: str, request: pytest.FixtureRequest
) -> None:
    from accelopt_mcp.store.supabase import SupabaseStore

    old_item = (
        "INSERT INTO experiences (id, definition_name, title, strategy) "
        "VALUES ('e-old', 'd', 'Vectorize rows', 'one ufunc')",
        (),
    )
    # The stand-in's schema cache predates the column.
    running = serve_older_schema(
        pg_dsn, request, _without_conditions_pg(), [old_item], ["experiences.conditions"]
    )
    with PostgresStore(pg_dsn, init_schema=True) as store:
        assert "added columns: experiences.conditions" in store.schema_changes
        new = store.add_experience(_lesson("Split heads"))
        (hit,) = store.search_experiences(text="heads")
        assert hit.id == new and hit.conditions == MEASURED
        (old,) = store.search_experiences(text="vectorize")
        assert old.id == "e-old" and old.conditions is None
    with PostgresStore(pg_dsn, init_schema=True) as store:  # applying it again adds nothing
        assert not any("conditions" in change for change in store.schema_changes)
        assert len(store.search_experiences(limit=10)) == 2
    with SupabaseStore(running.url, key=running.key) as remote:
        (hit,) = remote.search_experiences(text="split heads")
        assert hit.conditions == MEASURED

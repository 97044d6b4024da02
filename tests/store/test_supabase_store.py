"""What the Supabase store does beyond the shared contract (tests/store/test_contract.py):
opening fails fast with set-up steps, secrets stay out of messages, reads page past the
project's row cap, and rows written through PostgREST are plain rows (memory search, the same
in every store: tests/store/test_memory_search.py).

Everything runs through the real supabase client against the PostgREST stand-in for tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from accelopt_mcp.store import open_store
from accelopt_mcp.store.base import StoreOutageError, StoreUnavailableError
from accelopt_mcp.store.supabase import SupabaseStore
from tests.postgrest_standin.launcher import RunningStandIn, free_port
from tests.store.samples import (
    make_definition,
    make_evaluation,
    make_solution,
    make_workload,
)
from tests.store.supabase_fixture import fresh_schema_database, serve

pytestmark = pytest.mark.postgres


@pytest.fixture
def served(pg_admin_dsn: str, request: pytest.FixtureRequest) -> RunningStandIn:
    return serve(fresh_schema_database(pg_admin_dsn), request)


@pytest.fixture
def store(served: RunningStandIn) -> Iterator[SupabaseStore]:
    opened = SupabaseStore(served.url, key=served.key, timeout_s=5)
    yield opened
    opened.close()


# --------------------------------------------------------------------------- opening


def test_url_and_key_come_from_the_environment(
    served: RunningStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPABASE_URL", served.url)
    monkeypatch.setenv("SUPABASE_KEY", served.key)
    with SupabaseStore() as store:
        store.upsert_definition(make_definition("from_env"))
        assert store.get_definition("from_env") is not None


def test_a_missing_key_names_the_variable_and_where_to_find_it(
    served: RunningStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SUPABASE_KEY", raising=False)
    with pytest.raises(StoreUnavailableError) as caught:
        SupabaseStore(served.url)
    message = str(caught.value)
    assert "SUPABASE_KEY" in message and "Project Settings -> API" in message


def test_a_missing_url_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUPABASE_URL", raising=False)
    with pytest.raises(StoreUnavailableError, match="SUPABASE_URL"):
        SupabaseStore(key="k")


def test_nothing_listening_fails_in_seconds_with_setup_steps() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        SupabaseStore(f"http://127.0.0.1:{free_port()}", key="k", timeout_s=2)
    assert time.monotonic() - started < 4
    message = str(caught.value)
    assert "supabase start" in message and "supabase.com" in message


def test_a_wrong_key_fails_without_echoing_either_key(served: RunningStandIn) -> None:
    wrong = "not-the-key-0123456789"
    with pytest.raises(StoreUnavailableError) as caught:
        SupabaseStore(served.url, key=wrong, timeout_s=5)
    message = str(caught.value)
    assert "rejected the API key" in message
    assert wrong not in message and served.key not in message


def test_a_missing_schema_says_how_to_apply_it(
    pg_admin_dsn: str, request: pytest.FixtureRequest
) -> None:
    bare = serve(fresh_schema_database(pg_admin_dsn, apply_schema=False), request)
    with pytest.raises(StoreUnavailableError) as caught:
        SupabaseStore(bare.url, key=bare.key, timeout_s=5)
    assert "schema_v2.txt" in str(caught.value) and "SQL editor" in str(caught.value)


def test_open_store_never_falls_back_to_sqlite() -> None:
    with pytest.raises(StoreUnavailableError):
        open_store(f"http://127.0.0.1:{free_port()}", supabase_key="k")


def test_open_store_gives_a_supabase_store(served: RunningStandIn) -> None:
    with open_store(served.url, supabase_key=served.key) as store:
        assert isinstance(store, SupabaseStore)
        stats = store.stats()
    assert stats.backend == "supabase"
    assert stats.location == served.url
    assert served.key not in stats.model_dump_json()


def test_a_server_that_goes_away_gives_a_clear_error(
    store: SupabaseStore, served: RunningStandIn
) -> None:
    store.upsert_definition(make_definition("before"))
    store.retry_s = 1  # retried that long (tests/store/test_reconnect.py), then given up
    served.stop()
    started = time.monotonic()
    with pytest.raises(StoreOutageError, match="connection"):
        store.list_definitions()
    assert time.monotonic() - started < 15


def test_schema_dropped_after_opening_is_reported_as_such(
    store: SupabaseStore, served: RunningStandIn
) -> None:
    with psycopg.connect(served.dsn, autocommit=True) as conn:
        conn.execute("DROP VIEW solution_profiles")
    with pytest.raises(StoreUnavailableError) as caught:
        store.list_profiles()
    assert "schema" in str(caught.value) and "solution_profiles" in str(caught.value)


# --------------------------------------------------------------------------- paging


def test_reads_page_past_the_row_cap(store: SupabaseStore) -> None:
    store.page_size = 3  # as if the project's max_rows were 3
    for i in range(7):
        store.upsert_definition(make_definition(f"def_{i}"))
    assert [d.name for d in store.list_definitions()] == [f"def_{i}" for i in range(7)]
    ids = [store.upsert_solution(make_solution("def_0", f"# v{i}\n")) for i in range(8)]
    assert [s.id for s in store.list_solutions()] == ids
    assert [s.id for s in store.list_solutions(limit=5, offset=2)] == ids[2:7]
    assert [s.id for s in store.list_solutions(offset=6)] == ids[6:]


def test_best_solutions_ranks_across_pages_with_ties(store: SupabaseStore) -> None:
    store.page_size = 2
    store.upsert_definition(make_definition("d"))
    store.upsert_workload("d", make_workload("d", uuid_="w"))
    latencies = [5.0, 1.0, 3.0, 3.0, 3.0, 0.5]
    ids = [store.upsert_solution(make_solution("d", f"# s{i}\n")) for i in range(len(latencies))]
    for sid, latency in zip(ids, latencies, strict=True):
        store.upsert_profile("w", sid, make_evaluation(latency_ms=latency), {"n": 1})
        # A slower second profile of the same solution must not count as another entry.
        store.upsert_profile("w", sid, make_evaluation(latency_ms=latency * 10), {"n": 2})
    best = store.best_solutions("d", limit=3)
    # 0.5 and 1.0, then the first stored of the three tied at 3.0.
    assert [r.solution.id for r in best] == [ids[5], ids[1], ids[2]]
    assert [r.profile.latency_ms for r in best] == [0.5, 1.0, 3.0]


def test_rows_written_through_postgrest_are_plain_rows_in_postgres(
    store: SupabaseStore, served: RunningStandIn
) -> None:
    """The generated columns AccelOpt's own queries read are filled from the stored JSON."""
    store.upsert_definition(make_definition("d"))
    store.upsert_workload("d", make_workload("d", uuid_="w"))
    sid = store.upsert_solution(
        make_solution("d", language="python", author="ann"), evolve_metadata={"run_id": "r9"}
    )
    store.upsert_profile("w", sid, make_evaluation(latency_ms=2.5, hardware="cpu/x"), {})
    with psycopg.connect(served.dsn) as conn:
        row = conn.execute(
            "SELECT s.spec_language, s.author, s.run_id, p.eval_hardware, p.latency_ms, "
            "p.eval_status FROM solutions s JOIN profiles p ON p.solution_id = s.id"
        ).fetchone()
    assert row == ("python", "ann", "r9", "cpu/x", 2.5, "PASSED")

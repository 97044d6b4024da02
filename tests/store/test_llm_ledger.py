"""The LLM ledger's audit trail and a run's entries, on every store (SQLite, PostgreSQL, the
PostgREST stand-in in front of PostgreSQL): prompts and replies stored redacted and compressed,
in-flight rows updated in place, interrupted calls counted, run entries upserted."""

from __future__ import annotations

import json
import sqlite3
import zlib
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from accelopt_mcp.models import LlmCallIn, LlmMessage
from accelopt_mcp.store import _rows
from accelopt_mcp.store.base import (
    AmbiguousIdError,
    KernelStore,
    RunRecord,
    RunUpdate,
    UnknownReferenceError,
)
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.store.supabase import SupabaseStore
from tests.store.samples import make_definition, make_llm_call

DEF = "exp_f32"
FAKE_KEY = "sk-proj-FAKEKEY0123456789abcdefghijklmnop"
T0 = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)


@pytest.fixture
def runs(store: KernelStore) -> KernelStore:
    store.upsert_definition(make_definition(DEF))
    for run_id in ("run-1", "run-2"):
        store.create_run(RunRecord(id=run_id, definition_name=DEF, config={"big": "x" * 100}))
    return store


def _raw_texts(store: KernelStore, call_id: str) -> tuple[bytes, bytes]:
    """The messages and reply columns as the database holds them (no store code involved in
    reading them, except the PostgREST request)."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            row = conn.execute(
                "SELECT messages, reply FROM llm_calls WHERE id = ?", (call_id,)
            ).fetchone()
        return bytes(row[0]), bytes(row[1])
    if isinstance(store, PostgresStore):
        with psycopg.connect(store._dsn) as conn:
            found = conn.execute(
                "SELECT messages, reply FROM llm_calls WHERE id = %s", (call_id,)
            ).fetchone()
        assert found is not None
        return bytes(found[0]), bytes(found[1])
    assert isinstance(store, SupabaseStore)
    (got,) = store._rows(store._table("llm_calls").select("messages,reply").eq("id", call_id))
    assert got["messages"].startswith("\\x")  # PostgREST's text of a BYTEA
    return bytes.fromhex(got["messages"][2:]), bytes.fromhex(got["reply"][2:])


def _in_flight(call_id: str, **fields: object) -> LlmCallIn:
    """run-1's planner call for "plan 2/0", sent at T0 and not answered yet."""
    sent = {
        "status": "in_flight",
        "tokens_in": 250,
        "cost_usd": 0.002,
        "purpose": "plan 2/0",
        "started_at": T0,
    }
    return make_llm_call(call_id, **{**sent, **fields})


def test_prompt_and_reply_round_trip_redacted_and_compressed(runs: KernelStore) -> None:
    kernel = "def run(x):\n    return x * 2  # fast path\n" * 40
    prompt = [
        LlmMessage(role="system", content="You optimize kernels. ROLE=planner"),
        LlmMessage(role="user", content=f"The key is {FAKE_KEY}; make this faster:\n{kernel}"),
    ]
    call_id = runs.add_llm_call(_in_flight("a1" * 16, messages=prompt))
    assert call_id == "a1" * 16

    while_waiting = runs.get_llm_call(call_id)
    assert while_waiting is not None and while_waiting.status == "in_flight"
    assert while_waiting.reply is None and while_waiting.finished_at is None
    assert while_waiting.messages is not None and while_waiting.messages[0] == prompt[0]
    assert while_waiting.ok is False

    finished = T0 + timedelta(seconds=3)
    runs.add_llm_call(
        make_llm_call(
            call_id,
            status="ok",
            tokens_in=240,
            tokens_out=12,
            latency_s=3.0,
            cost_usd=0.003,
            finished_at=finished,
            reply=f"Tile it. (echo: Authorization: Bearer {FAKE_KEY})",
        )
    )
    stored = runs.get_llm_call(call_id)
    assert stored is not None
    assert (stored.status, stored.ok, stored.tokens_in, stored.tokens_out) == ("ok", True, 240, 12)
    # Left out of the update, the prompt, purpose and start stay as first written.
    assert stored.purpose == "plan 2/0" and stored.started_at == T0
    assert stored.finished_at == finished
    assert stored.messages is not None and len(stored.messages) == 2
    user = stored.messages[1].content
    assert FAKE_KEY not in user and "The key is ***; make this faster" in user
    assert user.endswith(kernel)
    assert stored.reply is not None and FAKE_KEY not in stored.reply
    assert stored.reply.startswith("Tile it.")

    raw_messages, raw_reply = _raw_texts(runs, call_id)
    assert raw_messages[:1] == b"\x78" and len(raw_messages) < len(kernel) // 4  # zlib
    assert FAKE_KEY.encode() not in zlib.decompress(raw_messages)
    assert [m["role"] for m in json.loads(zlib.decompress(raw_messages))] == ["system", "user"]
    assert zlib.decompress(raw_reply).decode() == stored.reply

    # One row, listed without its texts.
    (listed,) = runs.list_llm_calls("run-1")
    assert listed.id == call_id and listed.messages is None and listed.reply is None
    assert listed.model_dump(exclude={"messages", "reply"}) == stored.model_dump(
        exclude={"messages", "reply"}
    )


def test_calls_by_id_prefix(runs: KernelStore) -> None:
    a = runs.add_llm_call(_in_flight("deadbeef" + "0" * 24))
    b = runs.add_llm_call(_in_flight("deadbeef" + "1" * 24))
    c = runs.add_llm_call(_in_flight("0123abcd" + "2" * 24))
    assert runs.get_llm_call(c[:8]).id == c  # type: ignore[union-attr]
    assert runs.get_llm_call(c.upper()[:10]).id == c  # type: ignore[union-attr]
    assert runs.get_llm_call(a[:9]).id == a  # type: ignore[union-attr]
    assert runs.get_llm_call(b).id == b  # type: ignore[union-attr]
    with pytest.raises(AmbiguousIdError, match="deadbeef"):
        runs.get_llm_call("deadbeef")
    assert runs.get_llm_call("dead") is None  # too short for a prefix
    assert runs.get_llm_call("deadbeef%") is None  # no wildcards
    assert runs.get_llm_call("ffffffff") is None
    legacy = runs.add_llm_call(make_llm_call())
    assert runs.get_llm_call(legacy[:8]).messages is None  # type: ignore[union-attr]


def test_listing_pages_and_filters_oldest_first(runs: KernelStore) -> None:
    ids = []
    for i, role in enumerate(["planner", "executor", "executor", "summarizer", "executor"]):
        ids.append(runs.add_llm_call(make_llm_call(role=role, tokens_in=i, purpose=f"p{i}")))
    runs.add_llm_call(make_llm_call(run_id="run-2", role="executor"))
    assert [c.id for c in runs.list_llm_calls("run-1")] == ids
    executor = [c.id for c in runs.list_llm_calls("run-1", role="executor")]
    assert executor == [ids[1], ids[2], ids[4]]
    assert [c.id for c in runs.list_llm_calls("run-1", limit=2, offset=1)] == ids[1:3]
    assert [c.id for c in runs.list_llm_calls("run-1", role="executor", offset=2)] == [ids[4]]
    assert [c.purpose for c in runs.list_llm_calls("run-1", limit=1)] == ["p0"]
    assert runs.list_llm_calls("nothing") == []
    with pytest.raises(ValueError, match="limit"):
        runs.list_llm_calls("run-1", limit=-1)


def test_a_dead_workers_calls_are_marked_interrupted_and_counted(runs: KernelStore) -> None:
    # What a worker killed while waiting leaves: two rows in flight, one finished call.
    runs.add_llm_call(_in_flight("1" * 32, tokens_in=400, cost_usd=0.004))
    runs.add_llm_call(_in_flight("2" * 32, tokens_in=100, cost_usd=0.001, role="executor"))
    runs.add_llm_call(make_llm_call(tokens_in=50, tokens_out=5))
    other = runs.add_llm_call(_in_flight("3" * 32, run_id="run-2"))
    live = {t.role: t for t in runs.llm_totals("run-1")}
    assert (live["planner"].in_flight, live["planner"].interrupted) == (1, 0)

    assert runs.mark_interrupted_llm_calls("run-1") == 2
    assert runs.mark_interrupted_llm_calls("run-1") == 0
    assert runs.mark_interrupted_llm_calls("nothing") == 0

    totals = {t.role: t for t in runs.llm_totals("run-1")}
    assert (totals["planner"].calls, totals["planner"].tokens_in) == (2, 450)
    assert totals["planner"].cost_usd == pytest.approx(0.004)
    assert (totals["planner"].interrupted, totals["planner"].in_flight) == (1, 0)
    assert (totals["executor"].interrupted, totals["executor"].tokens_in) == (1, 100)
    interrupted = runs.get_llm_call("1" * 32)
    assert interrupted is not None
    assert (interrupted.status, interrupted.ok) == ("interrupted", False)
    assert interrupted.error is not None and "interrupted" in interrupted.error
    assert runs.get_llm_call(other).status == "in_flight"  # type: ignore[union-attr]


def test_ok_alone_still_says_the_status(runs: KernelStore) -> None:
    failed = runs.add_llm_call(make_llm_call(ok=False, error="HTTP 500"))
    done = runs.add_llm_call(make_llm_call())
    assert runs.get_llm_call(failed).status == "failed"  # type: ignore[union-attr]
    assert runs.get_llm_call(done).status == "ok"  # type: ignore[union-attr]
    (totals,) = runs.llm_totals("run-1")
    assert (totals.calls, totals.failed) == (2, 1)
    with pytest.raises(UnknownReferenceError, match="no-run"):
        runs.add_llm_call(_in_flight("4" * 32, run_id="no-run"))


# --------------------------------------------------------------------------- run entries


def test_run_entries_upsert_and_list(runs: KernelStore) -> None:
    assert runs.run_entries("run-1") == []
    runs.put_run_entry("run-1", "slot", "2/0/1/1", {"status": "pending"})
    runs.put_run_entry("run-1", "slot", "10/0/0/0", {"status": "ok", "latency_ms": 1.5})
    runs.put_run_entry("run-1", "plan", "2/0", {"plans": ["tile", "unroll"]})
    runs.put_run_entry("run-2", "slot", "2/0/1/1", {"status": "other run"})
    first = runs.run_entries("run-1", "slot")
    assert [(e.kind, e.key) for e in first] == [("slot", "10/0/0/0"), ("slot", "2/0/1/1")]
    assert first[1].data == {"status": "pending"} and first[1].run_id == "run-1"

    runs.put_run_entry("run-1", "slot", "2/0/1/1", {"status": "ok", "nested": {"a": [1, 2]}})
    again = runs.run_entries("run-1", "slot")
    assert len(again) == 2 and again[1].data == {"status": "ok", "nested": {"a": [1, 2]}}
    assert again[1].updated_at is not None and first[1].updated_at is not None
    assert again[1].updated_at >= first[1].updated_at
    assert [(e.kind, e.key) for e in runs.run_entries("run-1")] == [
        ("plan", "2/0"),
        ("slot", "10/0/0/0"),
        ("slot", "2/0/1/1"),
    ]
    assert runs.run_entries("run-1", "nothing") == []
    assert runs.run_entries("no-run") == []
    assert runs.stats().counts["run_entries"] == 4

    with pytest.raises(UnknownReferenceError, match="no-run"):
        runs.put_run_entry("no-run", "slot", "1", {})
    with pytest.raises(TypeError, match="kind"):
        runs.put_run_entry("run-1", "", "1", {})
    with pytest.raises(TypeError, match="run entry data"):
        runs.put_run_entry("run-1", "slot", "1", {"x": float("nan")})


def test_updating_figures_leaves_the_config_alone(runs: KernelStore) -> None:
    before = runs.get_run("run-1")
    assert before is not None
    updated = runs.update_run(
        "run-1",
        RunUpdate(current_iteration=3, tokens_in=1200, tokens_out=300, cost_usd=0.25),
    )
    assert updated.config == before.config == {"big": "x" * 100}
    assert (updated.current_iteration, updated.tokens_in, updated.cost_usd) == (3, 1200, 0.25)
    assert runs.get_run("run-1") == updated


def test_prompts_redact_the_stores_own_secrets_too(runs: KernelStore) -> None:
    secret = {
        SqliteStore: None,
        PostgresStore: getattr(runs, "_secret", None),
        SupabaseStore: getattr(runs, "_key", None),
    }[type(runs)]
    text = f"postgresql://u:pw-9911@h/db and {secret or 'nothing'}"
    call_id = runs.add_llm_call(_in_flight("5" * 32, prompt=text, reply=text))
    stored = runs.get_llm_call(call_id)
    assert stored is not None and stored.messages is not None and stored.reply is not None
    for shown in (stored.messages[0].content, stored.reply):
        assert "pw-9911" not in shown
        if secret:
            assert secret not in shown


def test_rows_helpers_read_every_form_of_a_compressed_column() -> None:
    packed = _rows.pack_text("héllo")
    assert packed is not None
    assert _rows.unpack_text(packed) == "héllo"
    assert _rows.unpack_text(memoryview(packed)) == "héllo"
    assert _rows.unpack_text(_rows.bytea_text(packed)) == "héllo"
    assert _rows.unpack_text(None) is None

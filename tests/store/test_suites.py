"""Suites (benchmark campaigns) in every store: the suite runner stores the whole record again
as its runs start and finish, finds a suite by a prefix of its id, and lists the newest first."""

from __future__ import annotations

import math
import time
import uuid
from datetime import datetime
from typing import Any

import pydantic
import pytest

from accelopt_mcp.store.base import AmbiguousIdError, KernelStore, SuiteRecord
from accelopt_mcp.store.ids import unknown_id

TWIN_A = "deadbeef-0000-4000-8000-00000000000a"
TWIN_B = "deadbeef-0000-4000-8000-00000000000b"
"""Two ids that share their first 31 hexadecimal digits."""

SPEC: dict[str, Any] = {
    "settings": {"preset": "quick", "beam": [4, 2], "temperature": 0.7, "max_cost_usd": 2.0},
    "hardware": "cpu/x86_64/Example",
    "peaks": {"fp32_gflops": 150.25, "dram_gbps": 18.5, "tiny": 1.5e-7},
    "models": ["planner-m", "executor-m"],
    "code_version": "0.4.0+g07d5953",
    "cases": [
        {
            "task": "01_matmul",
            "run_id": "3f9a0c1e2b4d4c8e9f0a1b2c3d4e5f60",
            "result": {"pct_of_peak": 12.345678901234567, "latency_ms": 0.001953125, "ok": True},
        },
        {"task": "02_softmax", "run_id": None, "result": None, "notes": "ünïcode ✓"},
        {"task": "03_empty", "run_id": "r", "result": {}, "attempts": [[], [1, -2.5], [{}]]},
    ],
}


def _suite(suite_id: str, **changes: Any) -> SuiteRecord:
    fields: dict[str, Any] = {
        "id": suite_id,
        "name": "cpu-nkibench",
        "source": "builtin:cpu-nkibench",
        "backend": "cpu",
        "status": "running",
        "spec": {"cases": []},
    }
    return SuiteRecord.model_validate(fields | changes)


def _utc(value: datetime | None) -> datetime:
    assert value is not None and value.utcoffset() is not None
    assert value.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    return value


def _later() -> None:
    """Let the database's clock move on: SQLite stamps to the millisecond."""
    time.sleep(0.01)


def test_a_suite_round_trips(store: KernelStore) -> None:
    suite_id = str(uuid.uuid4())
    stored = store.put_suite(_suite(suite_id, spec=SPEC))
    assert stored.model_dump(exclude={"created_at", "updated_at"}) == _suite(
        suite_id, spec=SPEC
    ).model_dump(exclude={"created_at", "updated_at"})
    assert _utc(stored.created_at) <= _utc(stored.updated_at)
    assert store.get_suite(suite_id) == stored
    assert store.list_suites() == [stored]
    assert store.stats().counts["suites"] == 1


def test_replacing_keeps_created_at_and_moves_updated_at(store: KernelStore) -> None:
    suite_id = str(uuid.uuid4())
    first = store.put_suite(_suite(suite_id))
    _later()
    done = {"cases": [{"task": "a", "run_id": "r1", "result": {"pct_of_peak": 40.5}}]}
    # The record's own timestamps are not what is stored.
    sent = _suite(
        suite_id,
        status="completed",
        name="renamed",
        spec=done,
        created_at=datetime(2000, 1, 1),
        updated_at=datetime(2000, 1, 1),
    )
    second = store.put_suite(sent)
    assert (second.status, second.name, second.spec) == ("completed", "renamed", done)
    assert second.created_at == first.created_at
    assert _utc(second.updated_at) > _utc(first.updated_at)
    assert store.get_suite(suite_id) == second
    assert store.list_suites() == [second]
    assert store.stats().counts["suites"] == 1


def test_a_suite_is_found_by_a_unique_prefix_of_its_id(store: KernelStore) -> None:
    for suite_id in (TWIN_A, TWIN_B):
        store.put_suite(_suite(suite_id))
    plain = uuid.uuid4().hex  # a caller may store the 32 digits alone
    store.put_suite(_suite(plain))
    for given in (
        TWIN_A,
        TWIN_A.replace("-", ""),
        "DEADBEEF00004000800000000000000A",
        TWIN_A.upper(),
    ):
        assert store.get_suite(given).id == TWIN_A, given  # type: ignore[union-attr]
    assert store.get_suite(plain[:8]).id == plain  # type: ignore[union-attr]
    assert store.get_suite(plain[:8].upper() + "-" + plain[8:12]).id == plain  # type: ignore[union-attr]

    with pytest.raises(AmbiguousIdError, match="give more of the id") as caught:
        store.get_suite("deadbeef")
    assert caught.value.kind == "suite" and caught.value.given == "deadbeef"
    assert caught.value.matches == (TWIN_A, TWIN_B) and not caught.value.more
    with pytest.raises(AmbiguousIdError):
        store.get_suite("deadbeef-0000-4000-8000-00000000000")  # 31 digits: still both

    # Under 8 digits a prefix is no prefix: nothing matches, and the front ends say why.
    assert store.get_suite(plain[:7]) is None
    assert "a prefix needs 8+ characters" in unknown_id("suite", plain[:7], "see suites")
    assert store.resolve_id("suite", plain[:8]) == plain
    assert store.resolve_id("run", plain[:8]) is None  # kinds are apart


def test_a_missing_suite_is_none(store: KernelStore) -> None:
    store.put_suite(_suite("00000000-0000-4000-8000-000000000001"))
    for given in (str(uuid.uuid4()), "ffffffff", "not a suite id", ""):
        assert store.get_suite(given) is None, given
    with pytest.raises(TypeError, match="suite_id must be a string"):
        store.get_suite(7)  # type: ignore[arg-type]


def test_suites_are_listed_newest_first(store: KernelStore) -> None:
    assert store.list_suites() == []
    # Ids in the opposite order to their creation: the order is the time's, not the id's.
    ids = ["cccccccc-0000-4000-8000-000000000000", "bbbbbbbb-0000-4000-8000-000000000000"]
    ids.append("aaaaaaaa-0000-4000-8000-000000000000")
    for suite_id in ids:
        store.put_suite(_suite(suite_id))
        _later()
    # Replacing the oldest moves its updated_at, not its place.
    store.put_suite(_suite(ids[0], status="completed"))
    newest_first = ids[::-1]
    assert [s.id for s in store.list_suites()] == newest_first
    assert [s.id for s in store.list_suites(limit=2)] == newest_first[:2]
    assert [s.id for s in store.list_suites(5)] == newest_first
    assert store.list_suites(limit=0) == []
    listed = store.list_suites()
    assert [s.created_at for s in listed] == sorted((s.created_at for s in listed), reverse=True)
    with pytest.raises(ValueError, match="limit"):
        store.list_suites(limit=-1)


def test_the_spec_json_survives_unchanged(store: KernelStore) -> None:
    suite_id = str(uuid.uuid4())
    store.put_suite(_suite(suite_id, spec=SPEC))
    got = store.get_suite(suite_id)
    assert got is not None and got.spec == SPEC
    # Floats stay floats (2.0 is not 2), nested values keep their types and order in lists.
    assert isinstance(got.spec["settings"]["max_cost_usd"], float)
    assert got.spec["cases"][0]["result"]["pct_of_peak"] == 12.345678901234567
    assert got.spec["cases"][2]["attempts"] == [[], [1, -2.5], [{}]]
    assert store.put_suite(_suite(suite_id, spec={})).spec == {}


def test_bad_suites_are_refused(store: KernelStore) -> None:
    with pytest.raises(TypeError, match=r"spec must hold only JSON values"):
        store.put_suite(_suite("s-nan", spec={"pct_of_peak": math.nan}))
    with pytest.raises(TypeError, match=r"SuiteRecord\.model_validate"):
        store.put_suite(_suite("s-dict").model_dump())  # type: ignore[arg-type]
    for field in ("id", "name", "source", "backend", "status"):
        with pytest.raises(pydantic.ValidationError, match=field):
            _suite("s-blank", **{field: ""})
    assert store.list_suites() == []

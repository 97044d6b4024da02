"""The contract every kernel store keeps (SQLite, PostgreSQL, Supabase): one suite, per store."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pydantic
import pytest

from accelopt_mcp import hashing
from accelopt_mcp.models import Evaluation, LlmCallIn
from accelopt_mcp.models.evaluation import UNTRUSTED_FLAGS, flags_trusted
from accelopt_mcp.store.base import (
    AmbiguousIdError,
    ConflictError,
    ExperienceIn,
    KernelStore,
    RunRecord,
    RunUpdate,
    SuiteRecord,
    UnknownReferenceError,
)
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.store.supabase import SupabaseStore
from tests.store.conftest import STORE_KINDS
from tests.store.samples import (
    make_definition,
    make_evaluation,
    make_solution,
    make_workload,
)

DEF = "exp_f32"
CONFIG = {"seeds": [0, 1], "iterations": 10}


@pytest.fixture
def seeded(store: KernelStore) -> KernelStore:
    """A store holding one definition with one workload."""
    store.upsert_definition(make_definition(DEF))
    store.upsert_workload(DEF, make_workload(DEF, uuid_="w-1"))
    return store


def _is_utc(value: datetime | None) -> bool:
    return value is not None and value.tzinfo is not None and value.utcoffset().total_seconds() == 0


def _chain(store: KernelStore, length: int, tag: str = "k") -> list[str]:
    ids: list[str] = []
    for i in range(length):
        parent = ids[-1] if ids else None
        ids.append(store.upsert_solution(make_solution(DEF, f"# {tag} {i}\n"), parent_id=parent))
    return ids


# --------------------------------------------------------------------------- definitions


def test_definition_round_trip_and_replace(store: KernelStore) -> None:
    definition = make_definition("gemm", description="first")
    assert store.upsert_definition(definition) == "gemm"
    stored = store.get_definition("gemm")
    assert stored is not None
    assert stored.definition == definition
    assert _is_utc(stored.created_at)

    replaced = make_definition("gemm", description="second")
    assert store.upsert_definition(replaced) == "gemm"
    assert store.get_definition("gemm").definition.description == "second"
    assert [d.name for d in store.list_definitions()] == ["gemm"]
    assert store.stats().counts["definitions"] == 1


def test_definitions_listed_by_name_and_unknown_is_none(store: KernelStore) -> None:
    for name in ("zeta", "alpha", "mid"):
        store.upsert_definition(make_definition(name))
    assert [d.name for d in store.list_definitions()] == ["alpha", "mid", "zeta"]
    assert store.get_definition("nope") is None


def _linguistic_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> KernelStore:
    """A store whose PostgreSQL database sorts text by ICU's en-US collation, as a server
    initialised in an English locale does (the test server's own is C: code-point order)."""
    if kind == "sqlite":
        return SqliteStore(tmp_path / "k.db")
    admin_dsn = request.getfixturevalue("pg_admin_dsn")
    name = f"icu_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
            "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
    dsn = admin_dsn.rsplit("/", 1)[0] + f"/{name}"
    PostgresStore(dsn, init_schema=True).close()
    if kind == "postgres":
        return PostgresStore(dsn)
    running = request.getfixturevalue("shared_standin")
    running.repoint(dsn)
    return SupabaseStore(running.url, key=running.key, timeout_s=10)


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_definitions_are_listed_in_code_point_order_whatever_the_collation(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    names = ["softmax_N1024", "add_N64", "addmm_m8", "B_x", "a_y", "Zeta"]
    with _linguistic_store(kind, request, tmp_path) as store:
        for name in names:
            store.upsert_definition(make_definition(name))
        assert [d.name for d in store.list_definitions()] == sorted(names)


# --------------------------------------------------------------------------- workloads


def test_workload_round_trip_idempotent(seeded: KernelStore) -> None:
    workload = make_workload(DEF, n=7, uuid_="w-2")
    assert seeded.upsert_workload(DEF, workload) == "w-2"
    assert seeded.upsert_workload(DEF, workload) == "w-2"
    stored = seeded.get_workload("w-2")
    assert stored is not None
    assert (stored.workload, stored.definition_name) == (workload, DEF)
    assert _is_utc(stored.created_at)
    assert {w.uuid for w in seeded.list_workloads(DEF)} == {"w-1", "w-2"}
    assert seeded.list_workloads("other") == []
    assert seeded.stats().counts["workloads"] == 2
    assert seeded.get_workload("missing") is None


def test_workload_of_unknown_definition_is_refused(store: KernelStore) -> None:
    with pytest.raises(UnknownReferenceError, match="ghost"):
        store.upsert_workload("ghost", make_workload("ghost"))


def test_workload_uuid_under_another_definition_conflicts(seeded: KernelStore) -> None:
    seeded.upsert_definition(make_definition("other"))
    with pytest.raises(ConflictError, match="w-1"):
        seeded.upsert_workload("other", make_workload("other", uuid_="w-1"))
    assert seeded.get_workload("w-1").definition_name == DEF


# --------------------------------------------------------------------------- solutions


def test_solution_round_trip(seeded: KernelStore) -> None:
    parent = seeded.upsert_solution(make_solution(DEF, "# parent\n"))
    solution = make_solution(DEF, "# child\n", author="planner-7", language="triton")
    metadata = {"run_id": "r-9", "iteration": 3, "plan": {"title": "tile", "k": [1, 2]}}
    sid = seeded.upsert_solution(solution, parent_id=parent, evolve_metadata=metadata)

    stored = seeded.get_solution(sid)
    assert stored is not None
    assert stored.solution == solution
    assert stored.id == sid
    assert (stored.parent_id, stored.definition_name) == (parent, DEF)
    assert stored.evolve_metadata == metadata
    assert (stored.spec_language, stored.author) == ("triton", "planner-7")
    assert stored.hash_version == hashing.CURRENT_HASH_VERSION
    assert stored.solution_hash == hashing.solution_hash(solution)
    assert _is_utc(stored.created_at)
    assert seeded.find_solution(DEF, stored.solution_hash).id == sid
    assert seeded.get_solution(sid.upper()).id == sid


def test_same_source_returns_first_row_unchanged(seeded: KernelStore) -> None:
    root = seeded.upsert_solution(make_solution(DEF, "# root\n"))
    first = seeded.upsert_solution(
        make_solution(DEF, "# same\n", name="first"), evolve_metadata={"run_id": "a"}
    )
    again = seeded.upsert_solution(
        make_solution(DEF, "# same\n", name="second"),
        parent_id=root,
        evolve_metadata={"run_id": "b"},
    )
    assert again == first
    stored = seeded.get_solution(first)
    assert stored.solution.name == "first"
    assert stored.parent_id is None
    assert stored.evolve_metadata == {"run_id": "a"}
    assert seeded.stats().counts["solutions"] == 2


def test_update_solution_links_sets_what_is_given_and_keeps_the_source(
    seeded: KernelStore,
) -> None:
    root = seeded.upsert_solution(make_solution(DEF, "# root\n"))
    sid = seeded.upsert_solution(
        make_solution(DEF, "# pasted\n", name="d_user"), evolve_metadata={"run_id": "r"}
    )
    before = seeded.get_solution(sid)
    assert before is not None
    updated = seeded.update_solution_links(
        sid[:8] + sid[8:], parent_id=root, name="tiled", author="agent",
        evolve_metadata={"plan": "tile rows"},
    )  # fmt: skip
    assert updated.id == sid and updated.parent_id == root
    assert (updated.solution.name, updated.author) == ("tiled", "agent")
    assert updated.evolve_metadata == {"run_id": "r", "plan": "tile rows"}
    assert updated.solution_hash == before.solution_hash  # the source did not change
    assert updated.solution.sources == before.solution.sources
    assert seeded.get_solution(sid) == updated
    # Only what is given changes.
    again = seeded.update_solution_links(sid, evolve_metadata={"note": "x"})
    assert again.parent_id == root and again.solution.name == "tiled"
    assert again.evolve_metadata == {"run_id": "r", "plan": "tile rows", "note": "x"}
    missing = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(UnknownReferenceError, match=missing):
        seeded.update_solution_links(sid, parent_id=missing)
    with pytest.raises(UnknownReferenceError):
        seeded.update_solution_links(missing, name="nobody")
    assert seeded.get_solution(sid) == again


def test_same_source_under_two_definitions_is_two_solutions(seeded: KernelStore) -> None:
    """A shape-generic kernel serves several definitions (the same op at other shapes): one
    solution per (definition, source), each deduplicated within its definition, with profiles
    and lineage of its own."""
    other = "exp_f32_n4096"
    seeded.upsert_definition(make_definition(other))
    seeded.upsert_workload(other, make_workload(other, uuid_="w-other"))
    root = seeded.upsert_solution(make_solution(DEF, "# root\n"))
    first = seeded.upsert_solution(
        make_solution(DEF, "# shared\n", name="generic"),
        parent_id=root,
        evolve_metadata={"run_id": "r-a"},
    )
    second = seeded.upsert_solution(
        make_solution(other, "# shared\n", name="generic"), evolve_metadata={"run_id": "r-b"}
    )
    assert first != second
    # Within its definition the source is stored once: the first row comes back unchanged.
    assert seeded.upsert_solution(make_solution(DEF, "# shared\n"), parent_id=None) == first
    assert seeded.upsert_solution(make_solution(other, "# shared\n", name="again")) == second
    a, b = seeded.get_solution(first), seeded.get_solution(second)
    assert a is not None and b is not None
    assert a.solution_hash == b.solution_hash
    assert (a.definition_name, b.definition_name) == (DEF, other)
    assert (a.evolve_metadata, b.evolve_metadata) == ({"run_id": "r-a"}, {"run_id": "r-b"})
    assert b.solution.name == "generic"
    assert seeded.find_solution(DEF, a.solution_hash).id == first
    assert seeded.find_solution(other, a.solution_hash).id == second
    assert seeded.find_solution("exp_f32_elsewhere", a.solution_hash) is None

    # Lineage belongs to each row.
    child = seeded.upsert_solution(make_solution(other, "# child\n"), parent_id=second)
    assert (a.parent_id, b.parent_id) == (root, None)
    assert [s.id for s in seeded.ancestors(first)] == [root]
    assert [s.id for s in seeded.ancestors(child)] == [second]
    assert seeded.ancestors(second) == []
    assert [s.id for s in seeded.descendants(root)] == [first]
    assert [s.id for s in seeded.descendants(second)] == [child]
    assert seeded.descendants(first) == []

    # Profiles are kept apart, and so are the rankings.
    pa = seeded.upsert_profile("w-1", first, make_evaluation(latency_ms=1.0), CONFIG)
    pb = seeded.upsert_profile("w-other", second, make_evaluation(latency_ms=4.0), CONFIG)
    assert pa != pb
    assert [p.id for p in seeded.list_profiles(solution_id=first)] == [pa]
    assert [p.id for p in seeded.list_profiles(solution_id=second)] == [pb]
    assert [r.solution.id for r in seeded.best_solutions(DEF)] == [first]
    best_other = seeded.best_solutions(other)
    assert [r.solution.id for r in best_other] == [second]
    assert best_other[0].profile.latency_ms == pytest.approx(4.0)
    assert [s.id for s in seeded.list_solutions(definition_name=other)] == [second, child]
    assert [s.id for s in seeded.list_solutions(run_id="r-a")] == [first]
    assert seeded.stats().counts["solutions"] == 4


def test_solution_with_unknown_references_is_refused(seeded: KernelStore) -> None:
    with pytest.raises(UnknownReferenceError, match="ghost"):
        seeded.upsert_solution(make_solution("ghost", "# a\n"))
    missing = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(UnknownReferenceError, match=missing):
        seeded.upsert_solution(make_solution(DEF, "# b\n"), parent_id=missing)
    with pytest.raises(UnknownReferenceError, match="not-a-uuid"):
        seeded.upsert_solution(make_solution(DEF, "# c\n"), parent_id="not-a-uuid")
    assert seeded.stats().counts["solutions"] == 0


def test_unknown_ids_read_as_none(seeded: KernelStore) -> None:
    assert seeded.get_solution("00000000-0000-4000-8000-000000000000") is None
    assert seeded.get_solution("garbage") is None
    assert seeded.get_profile("garbage") is None
    assert seeded.find_solution(DEF, "0" * 64) is None
    assert seeded.ancestors("garbage") == []
    assert seeded.descendants("00000000-0000-4000-8000-000000000000") == []


def test_list_solutions_filters_and_pages_oldest_first(seeded: KernelStore) -> None:
    seeded.upsert_definition(make_definition("other"))
    ids = [
        seeded.upsert_solution(
            make_solution(DEF, f"# {i}\n", author="a" if i % 2 else "b"),
            evolve_metadata={"run_id": "r1" if i < 3 else "r2"},
        )
        for i in range(6)
    ]
    other = seeded.upsert_solution(make_solution("other", "# o\n", language="cuda"))

    assert [s.id for s in seeded.list_solutions(definition_name=DEF)] == ids
    assert [s.id for s in seeded.list_solutions()] == [*ids, other]
    assert [s.id for s in seeded.list_solutions(run_id="r1")] == ids[:3]
    assert [s.id for s in seeded.list_solutions(author="a")] == ids[1::2]
    assert [s.id for s in seeded.list_solutions(language="cuda")] == [other]
    assert [s.id for s in seeded.list_solutions(definition_name=DEF, limit=2, offset=3)] == ids[3:5]
    assert seeded.list_solutions(run_id="r2", author="b", definition_name=DEF)[0].id == ids[4]
    assert seeded.list_solutions(definition_name=DEF, limit=0) == []


# --------------------------------------------------------------------------- lineage


def test_lineage_of_depth_50(seeded: KernelStore) -> None:
    ids = _chain(seeded, 51)
    assert [s.id for s in seeded.ancestors(ids[-1])] == ids[-2::-1]
    assert [s.id for s in seeded.descendants(ids[0])] == ids[1:]
    assert [s.id for s in seeded.ancestors(ids[25])] == ids[24::-1]
    assert [s.id for s in seeded.descendants(ids[25])] == ids[26:]
    assert seeded.ancestors(ids[0]) == []
    assert seeded.descendants(ids[-1]) == []
    assert seeded.ancestors(ids[-1])[0] == seeded.get_solution(ids[-2])


def test_descendants_are_breadth_first(seeded: KernelStore) -> None:
    root = seeded.upsert_solution(make_solution(DEF, "# root\n"))
    c1 = seeded.upsert_solution(make_solution(DEF, "# c1\n"), parent_id=root)
    c2 = seeded.upsert_solution(make_solution(DEF, "# c2\n"), parent_id=root)
    g1 = seeded.upsert_solution(make_solution(DEF, "# g1\n"), parent_id=c1)
    g2 = seeded.upsert_solution(make_solution(DEF, "# g2\n"), parent_id=c2)
    g3 = seeded.upsert_solution(make_solution(DEF, "# g3\n"), parent_id=c1)
    h = seeded.upsert_solution(make_solution(DEF, "# h\n"), parent_id=g2)
    assert [s.id for s in seeded.descendants(root)] == [c1, c2, g1, g2, g3, h]
    assert [s.id for s in seeded.descendants(c1)] == [g1, g3]
    assert [s.id for s in seeded.ancestors(h)] == [g2, c2, root]


def test_a_lineage_cycle_is_walked_once_in_every_store(seeded: KernelStore) -> None:
    # The store API sets a parent without policy (linking.py refuses cycles above it), so a
    # cycle can reach the table; each store must walk it once, not to its depth cap.
    a, b, c = _chain(seeded, 3, "cycle")
    seeded.update_solution_links(a, parent_id=c)
    assert [s.id for s in seeded.ancestors(a)] == [c, b]
    assert [s.id for s in seeded.descendants(a)] == [b, c]
    # A walk that meets the loop without starting in it goes round it once too.
    tail = seeded.upsert_solution(make_solution(DEF, "# off the loop\n"), parent_id=c)
    assert [s.id for s in seeded.ancestors(tail)] == [c, b, a]
    assert [s.id for s in seeded.descendants(b)] == [c, a, tail]
    lone = seeded.upsert_solution(make_solution(DEF, "# its own parent\n"))
    seeded.update_solution_links(lone, parent_id=lone)
    assert seeded.ancestors(lone) == [] and seeded.descendants(lone) == []


# --------------------------------------------------------------------------- profiles


def test_profile_round_trip_and_promoted_columns(seeded: KernelStore) -> None:
    sid = seeded.upsert_solution(make_solution(DEF, "# k\n"))
    evaluation = make_evaluation("PASSED", latency_ms=0.5, reference_latency_ms=2.0)
    pid = seeded.upsert_profile("w-1", sid, evaluation, CONFIG)
    stored = seeded.get_profile(pid)
    assert stored is not None
    assert stored.evaluation == evaluation
    assert (stored.workload_uuid, stored.solution_id) == ("w-1", sid)
    assert stored.benchmark_config == CONFIG
    assert stored.benchmark_config_hash == hashing.benchmark_config_hash(CONFIG)
    assert (stored.eval_status, stored.eval_hardware) == ("PASSED", "cpu/x86_64")
    assert stored.latency_ms == pytest.approx(0.5)
    assert stored.reference_latency_ms == pytest.approx(2.0)
    assert stored.speedup == pytest.approx(4.0)  # from flashinfer's speedup_factor
    assert _is_utc(stored.created_at)

    failed = seeded.upsert_profile(
        "w-1", sid, make_evaluation("COMPILE_ERROR", hardware="other-hw"), CONFIG
    )
    row = seeded.get_profile(failed)
    assert row.eval_status == "COMPILE_ERROR"
    assert (row.latency_ms, row.reference_latency_ms, row.speedup) == (None, None, None)


def test_profile_key_pools_measurements(seeded: KernelStore) -> None:
    sid = seeded.upsert_solution(make_solution(DEF, "# k\n"))
    first = seeded.upsert_profile("w-1", sid, make_evaluation(latency_ms=3.0), CONFIG)
    again = seeded.upsert_profile("w-1", sid, make_evaluation(latency_ms=1.5), dict(CONFIG))
    assert again == first
    # No intervals in these samples: the median of the two (tests/store/test_measurements.py
    # covers the pooling itself).
    assert seeded.get_profile(first).latency_ms == pytest.approx(2.25)
    assert len(seeded.list_measurements(first)) == 2
    other_config = seeded.upsert_profile(
        "w-1", sid, make_evaluation(latency_ms=9.0), {**CONFIG, "iterations": 20}
    )
    other_hw = seeded.upsert_profile(
        "w-1", sid, make_evaluation(latency_ms=9.0, hardware="trn1"), CONFIG
    )
    assert len({first, other_config, other_hw}) == 3
    assert seeded.stats().counts["profiles"] == 3


def test_a_profiles_breakdown_round_trips_and_survives_pooling(seeded: KernelStore) -> None:
    from accelopt_mcp.models import BreakdownEntry

    sid = seeded.upsert_solution(make_solution(DEF, "# k\n"))
    entries = [
        BreakdownEntry(what="L12: y = np.exp(x - m)", ms=0.4, share=0.5, calls=1),
        BreakdownEntry(what="L10: m = x.max(axis=1, keepdims=True)", ms=0.2, share=0.25),
    ]
    traced = make_evaluation(latency_ms=3.0).model_copy(update={"breakdown": entries})
    pid = seeded.upsert_profile("w-1", sid, traced, CONFIG)
    assert seeded.get_profile(pid).evaluation.breakdown == entries
    # A re-measure taken without one keeps it in the pooled figure; the measurement has none.
    seeded.upsert_profile("w-1", sid, make_evaluation(latency_ms=1.5), CONFIG)
    assert seeded.get_profile(pid).evaluation.breakdown == entries
    assert [m.evaluation.breakdown for m in seeded.list_measurements(pid)] == [entries, []]


def test_profile_with_unknown_references_is_refused(seeded: KernelStore) -> None:
    sid = seeded.upsert_solution(make_solution(DEF, "# k\n"))
    with pytest.raises(UnknownReferenceError, match="w-missing"):
        seeded.upsert_profile("w-missing", sid, make_evaluation(), CONFIG)
    ghost = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(UnknownReferenceError, match=ghost):
        seeded.upsert_profile("w-1", ghost, make_evaluation(), CONFIG)
    assert seeded.stats().counts["profiles"] == 0


def test_list_profiles_filters(seeded: KernelStore) -> None:
    seeded.upsert_workload(DEF, make_workload(DEF, uuid_="w-2"))
    a = seeded.upsert_solution(make_solution(DEF, "# a\n"), evolve_metadata={"run_id": "r1"})
    b = seeded.upsert_solution(make_solution(DEF, "# b\n"), evolve_metadata={"run_id": "r2"})
    p1 = seeded.upsert_profile("w-1", a, make_evaluation(latency_ms=1.0), CONFIG)
    p2 = seeded.upsert_profile("w-2", a, make_evaluation("RUNTIME_ERROR"), CONFIG)
    p3 = seeded.upsert_profile("w-1", b, make_evaluation(latency_ms=2.0, hardware="trn1"), CONFIG)

    assert [p.id for p in seeded.list_profiles()] == [p1, p2, p3]
    assert [p.id for p in seeded.list_profiles(solution_id=a)] == [p1, p2]
    assert [p.id for p in seeded.list_profiles(workload_uuid="w-1")] == [p1, p3]
    assert [p.id for p in seeded.list_profiles(run_id="r2")] == [p3]
    assert [p.id for p in seeded.list_profiles(hardware="trn1")] == [p3]
    assert [p.id for p in seeded.list_profiles(status="RUNTIME_ERROR")] == [p2]
    assert [p.id for p in seeded.list_profiles(limit=1, offset=1)] == [p2]
    assert seeded.list_profiles(solution_id="garbage") == []


# --------------------------------------------------------------------------- best solutions


def test_best_solutions_rank_passed_profiles(seeded: KernelStore) -> None:
    seeded.upsert_workload(DEF, make_workload(DEF, uuid_="w-2"))
    seeded.upsert_definition(make_definition("other"))
    seeded.upsert_workload("other", make_workload("other", uuid_="w-o"))
    slow = seeded.upsert_solution(make_solution(DEF, "# slow\n"))
    fast = seeded.upsert_solution(make_solution(DEF, "# fast\n"))
    broken = seeded.upsert_solution(make_solution(DEF, "# broken\n"))
    foreign = seeded.upsert_solution(make_solution("other", "# foreign\n"))

    seeded.upsert_profile("w-1", slow, make_evaluation(latency_ms=5.0), CONFIG)
    seeded.upsert_profile("w-2", slow, make_evaluation(latency_ms=4.0), CONFIG)
    seeded.upsert_profile("w-1", fast, make_evaluation(latency_ms=2.0), CONFIG)
    best_fast = seeded.upsert_profile("w-2", fast, make_evaluation(latency_ms=1.0), CONFIG)
    seeded.upsert_profile("w-1", fast, make_evaluation(latency_ms=0.1, hardware="trn1"), CONFIG)
    seeded.upsert_profile("w-1", broken, make_evaluation("INCORRECT_NUMERICAL"), CONFIG)
    seeded.upsert_profile("w-1", broken, make_evaluation("TIMEOUT", hardware="x"), CONFIG)
    seeded.upsert_profile("w-o", foreign, make_evaluation(latency_ms=0.01), CONFIG)

    cpu = seeded.best_solutions(DEF, hardware="cpu/x86_64")
    assert [(r.solution.id, r.profile.latency_ms) for r in cpu] == [(fast, 1.0), (slow, 4.0)]
    assert cpu[0].profile.id == best_fast
    assert cpu[0].solution == seeded.get_solution(fast)
    assert cpu[0].profile == seeded.get_profile(best_fast)

    anywhere = seeded.best_solutions(DEF)
    assert [(r.solution.id, r.profile.latency_ms) for r in anywhere] == [(fast, 0.1), (slow, 4.0)]
    assert [r.solution.id for r in seeded.best_solutions(DEF, hardware="trn1")] == [fast]
    on_w1 = seeded.best_solutions(DEF, hardware="cpu/x86_64", workload_uuid="w-1")
    assert [(r.solution.id, r.profile.latency_ms) for r in on_w1] == [(fast, 2.0), (slow, 5.0)]
    assert [r.solution.id for r in seeded.best_solutions(DEF, limit=1)] == [fast]
    assert seeded.best_solutions(DEF, hardware="x") == []
    assert seeded.best_solutions("nothing-here") == []


def test_ties_in_the_ranking_are_broken_the_same_way_in_every_store(seeded: KernelStore) -> None:
    """One tie rule (schema_v2.txt's best_solutions): lower latency first, then the solution
    stored first, then the profile stored first (created_at, then id)."""
    seeded.upsert_workload(DEF, make_workload(DEF, uuid_="w-2"))
    tied = [seeded.upsert_solution(make_solution(DEF, f"# tied {i}\n")) for i in range(4)]
    faster = seeded.upsert_solution(make_solution(DEF, "# faster\n"))
    # Profiled newest solution first, so that an order by profile (or by id) shows, and each
    # tied solution twice at the same latency.
    for sid in reversed(tied):
        for workload in ("w-2", "w-1"):
            seeded.upsert_profile(workload, sid, make_evaluation(latency_ms=2.0), CONFIG)
    seeded.upsert_profile("w-1", faster, make_evaluation(latency_ms=1.0), CONFIG)

    ranked = seeded.best_solutions(DEF)
    assert [r.solution.id for r in ranked] == [faster, *tied]
    for r in ranked[1:]:
        profiles = seeded.list_profiles(solution_id=r.solution.id)
        first = min(profiles, key=lambda p: (p.created_at, p.id))
        assert r.profile.id == first.id
    # The cut falls inside the tie: the solutions stored first make it.
    assert [r.solution.id for r in seeded.best_solutions(DEF, limit=3)] == [faster, *tied[:2]]
    assert [r.solution.id for r in seeded.best_solutions(DEF, workload_uuid="w-1")] == [
        faster,
        *tied,
    ]


def _flagged(latency_ms: float, *flags: str, hardware: str = "cpu/x86_64") -> Evaluation:
    evaluation = make_evaluation(latency_ms=latency_ms, hardware=hardware)
    return evaluation.model_copy(update={"flags": list(flags)})


def test_untrusted_profiles_rank_nothing_unless_asked(seeded: KernelStore) -> None:
    seeded.upsert_workload(DEF, make_workload(DEF, uuid_="w-2"))
    honest = seeded.upsert_solution(make_solution(DEF, "# honest\n"))
    cheat = seeded.upsert_solution(make_solution(DEF, "# cheat\n"))
    future = seeded.upsert_solution(make_solution(DEF, "# future\n"))
    mixed = seeded.upsert_solution(make_solution(DEF, "# mixed\n"))
    never = seeded.upsert_solution(make_solution(DEF, "# never\n"))
    seeded.upsert_profile("w-1", honest, _flagged(3.0, "noisy_timing", "not_isolated"), CONFIG)
    seeded.upsert_profile("w-1", cheat, _flagged(0.5, "above_peak"), CONFIG)
    seeded.upsert_profile("w-1", future, _flagged(0.7, "noisy_timing", "from_the_future"), CONFIG)
    # Flagged on one workload, trusted (and slower) on another: ranked by the trusted one.
    seeded.upsert_profile("w-1", mixed, _flagged(0.2, "constant_output"), CONFIG)
    trusted_mixed = seeded.upsert_profile("w-2", mixed, _flagged(4.0), CONFIG)
    seeded.upsert_profile("w-1", never, make_evaluation("INCORRECT_NUMERICAL"), CONFIG)

    ranked = seeded.best_solutions(DEF)
    assert [(r.solution.id, r.profile.latency_ms) for r in ranked] == [(honest, 3.0), (mixed, 4.0)]
    assert ranked[0].profile.flags == ["noisy_timing", "not_isolated"]
    assert ranked[0].profile.trusted and ranked[1].profile.id == trusted_mixed
    assert [r.solution.id for r in seeded.best_solutions(DEF, limit=1)] == [honest]
    assert seeded.best_solutions(DEF, workload_uuid="w-1") == ranked[:1]

    everything = seeded.best_solutions(DEF, include_flagged=True)
    assert [(r.solution.id, r.profile.latency_ms) for r in everything] == [
        (mixed, 0.2),
        (cheat, 0.5),
        (future, 0.7),
        (honest, 3.0),
    ]
    assert [r.profile.trusted for r in everything] == [False, False, False, True]
    assert everything[1].profile.flags == ["above_peak"]
    dumped = everything[1].profile.model_dump(mode="json")
    assert dumped["trusted"] is False and dumped["evaluation"]["flags"] == ["above_peak"]

    entries = seeded.ranked_solutions(DEF)
    assert [e.solution.id for e in entries] == [honest, mixed, cheat, future, never]
    assert [e.best_profile is None for e in entries] == [False, False, True, True, True]
    flagged_too = seeded.ranked_solutions(DEF, include_flagged=True)
    assert [e.solution.id for e in flagged_too] == [mixed, cheat, future, honest, never]
    assert flagged_too[0].best_profile is not None
    assert flagged_too[0].best_profile.flags == ["constant_output"]


def test_ranked_solutions_of_one_run_keep_their_rank_behind_faster_kernels(
    seeded: KernelStore,
) -> None:
    # Faster kernels of another run (or language) must not push this run's out of the ranking.
    for i in range(3):
        other = seeded.upsert_solution(
            make_solution(DEF, f"# other {i}\n"), evolve_metadata={"run_id": "r-other"}
        )
        seeded.upsert_profile("w-1", other, make_evaluation("PASSED", 0.1 + i / 100), CONFIG)
    mine = [
        seeded.upsert_solution(
            make_solution(DEF, f"# mine {i}\n", language="cuda"), evolve_metadata={"run_id": "r-1"}
        )
        for i in range(2)
    ]
    seeded.upsert_profile("w-1", mine[0], make_evaluation("PASSED", 2.0), CONFIG)
    seeded.upsert_profile("w-1", mine[1], make_evaluation("PASSED", 1.0), CONFIG)
    for entries in (
        seeded.ranked_solutions(DEF, run_id="r-1"),
        seeded.ranked_solutions(DEF, language="cuda"),
    ):
        assert [e.solution.id for e in entries] == [mine[1], mine[0]]
        assert [e.best_profile.latency_ms if e.best_profile else None for e in entries] == [
            1.0,
            2.0,
        ]


def test_the_stores_trust_is_the_records_trust(seeded: KernelStore) -> None:
    # The SQL column and Evaluation.trusted must agree on every kind of flag list.
    cases = [
        [],
        ["noisy_timing"],
        ["not_isolated", "noisy_timing", "unstable_latency", "no_reference_latency"],
        ["noisy_timing", "noisy_timing"],
        *[[flag] for flag in sorted(UNTRUSTED_FLAGS)],
        ["noisy_timing", "above_peak"],
        ["above_peak", "noisy_timing"],
        ["noisy_timing_extra"],
        ["x_noisy_timing"],
        ['"noisy_timing"'],
        ['noisy_timing","not_isolated'],
        ["[],"],
        [""],
        ["ünïcode"],
    ]
    expected: dict[str, bool] = {}
    for i, flags in enumerate(cases):
        evaluation = _flagged(1.0 + i, *flags)
        sid = seeded.upsert_solution(make_solution(DEF, f"# case {i}\n"))
        pid = seeded.upsert_profile("w-1", sid, evaluation, CONFIG)
        stored = seeded.get_profile(pid)
        assert stored is not None and stored.evaluation.flags == flags
        assert stored.trusted == evaluation.trusted == flags_trusted(flags), flags
        expected[sid] = evaluation.trusted
    ranked = {r.solution.id for r in seeded.best_solutions(DEF, limit=100)}
    assert ranked == {sid for sid, trusted in expected.items() if trusted}
    assert len(ranked) == 4
    assert len(seeded.best_solutions(DEF, limit=100, include_flagged=True)) == len(cases)


def test_stored_logs_and_errors_are_redacted(
    seeded: KernelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "env-secret-value-4242"
    monkeypatch.setenv("KERNEL_SERVICE_TOKEN", secret)
    leak = (
        f"kernel said: token is {secret}\n"
        "db at postgresql://u:pw-77@h/db, Authorization: Bearer abc.def.ghi\nresult ok"
    )
    sid = seeded.upsert_solution(make_solution(DEF, "# leaky\n"))
    evaluation = make_evaluation("RUNTIME_ERROR").model_copy(update={"log": leak})
    pid = seeded.upsert_profile("w-1", sid, evaluation, CONFIG)
    stored = seeded.get_profile(pid)
    assert stored is not None
    for log in (stored.evaluation.log, seeded.list_profiles(solution_id=sid)[0].evaluation.log):
        assert secret not in log and "pw-77" not in log and "abc.def.ghi" not in log
        assert "postgresql://***@h/db" in log and log.endswith("result ok")
    assert evaluation.log == leak  # the caller's record is left as it was

    seeded.create_run(RunRecord(id="run-r", definition_name=DEF, error=f"failed: {secret}"))
    assert seeded.get_run("run-r").error == "failed: ***"
    updated = seeded.update_run("run-r", RunUpdate(error="RuntimeError: password=hunter22 x"))
    assert updated.error == "RuntimeError: password=*** x"
    assert seeded.get_run("run-r").error == updated.error
    seeded.add_llm_call(LlmCallIn(run_id="run-r", role="planner", model="m", error=secret))
    assert seeded.list_llm_calls("run-r")[0].error == "***"


# --------------------------------------------------------------------------- runs


def test_run_create_get_update(seeded: KernelStore) -> None:
    sid = seeded.upsert_solution(make_solution(DEF, "# init\n"))
    run = RunRecord(
        id="run-1",
        definition_name=DEF,
        config={"iterations": 4, "beam": 2},
        initial_solution_id=sid,
    )
    assert seeded.create_run(run) == "run-1"
    stored = seeded.get_run("run-1")
    assert stored.model_dump(exclude={"created_at", "updated_at"}) == run.model_dump(
        exclude={"created_at", "updated_at"}
    )
    assert _is_utc(stored.created_at) and _is_utc(stored.updated_at)

    updated = seeded.update_run(
        "run-1",
        RunUpdate(
            status="running", current_iteration=2, best_solution_id=sid, best_latency_ms=1.25
        ),
    )
    assert (updated.status, updated.current_iteration) == ("running", 2)
    assert (updated.best_solution_id, updated.best_latency_ms) == (sid, 1.25)
    assert updated.config == {"iterations": 4, "beam": 2}  # None fields leave values as they were
    assert updated.updated_at >= stored.updated_at
    assert seeded.get_run("run-1") == updated

    final = seeded.update_run(
        "run-1", RunUpdate(status="failed", error="boom", tokens_in=10, cost_usd=0.5)
    )
    assert (final.status, final.error, final.tokens_in, final.cost_usd) == (
        "failed",
        "boom",
        10,
        0.5,
    )
    assert final.current_iteration == 2
    assert seeded.get_run("missing") is None


def test_run_errors(seeded: KernelStore) -> None:
    seeded.create_run(RunRecord(id="run-1", definition_name=DEF))
    with pytest.raises(ConflictError, match="run-1"):
        seeded.create_run(RunRecord(id="run-1", definition_name=DEF))
    with pytest.raises(UnknownReferenceError, match="ghost"):
        seeded.create_run(RunRecord(id="run-2", definition_name="ghost"))
    with pytest.raises(UnknownReferenceError, match="missing"):
        seeded.update_run("missing", RunUpdate(status="running"))
    with pytest.raises(UnknownReferenceError, match="best_solution_id"):
        seeded.update_run("run-1", RunUpdate(best_solution_id="nope"))
    assert seeded.get_run("run-1").status == "pending"


def test_list_runs_newest_first(seeded: KernelStore) -> None:
    seeded.upsert_definition(make_definition("other"))
    for i in range(4):
        seeded.create_run(RunRecord(id=f"r{i}", definition_name=DEF if i < 3 else "other"))
    seeded.update_run("r1", RunUpdate(status="completed"))
    assert [r.id for r in seeded.list_runs()] == ["r3", "r2", "r1", "r0"]
    assert [r.id for r in seeded.list_runs(definition_name=DEF)] == ["r2", "r1", "r0"]
    assert [r.id for r in seeded.list_runs(status="completed")] == ["r1"]
    assert [r.id for r in seeded.list_runs(limit=2)] == ["r3", "r2"]


# --------------------------------------------------------------------------- experiences


def _experience(i: int, **fields: object) -> ExperienceIn:
    return ExperienceIn(definition_name=DEF, title=f"title {i}", strategy=f"strategy {i}", **fields)


def test_experience_round_trip(seeded: KernelStore) -> None:
    slow = seeded.upsert_solution(make_solution(DEF, "# slow\n"))
    fast = seeded.upsert_solution(make_solution(DEF, "# fast\n"))
    seeded.create_run(RunRecord(id="run-1", definition_name=DEF))
    item = ExperienceIn(
        definition_name=DEF,
        title="Fuse the loops",
        strategy="One pass over x instead of two",
        pseudocode="for i: y[i] = f(g(x[i]))",
        run_id="run-1",
        namespace="cpu/x86_64",
        slow_solution_id=slow,
        fast_solution_id=fast,
        speedup=1.8,
        iteration=2,
    )
    eid = seeded.add_experience(item)
    stored = seeded.get_experience(eid)
    assert stored.model_dump(include=set(ExperienceIn.model_fields)) == item.model_dump()
    assert (stored.id, stored.removed) == (eid, False)
    assert _is_utc(stored.created_at)
    assert seeded.get_experience("missing") is None


def test_recent_experiences_is_a_queue(seeded: KernelStore) -> None:
    seeded.create_run(RunRecord(id="run-1", definition_name=DEF))
    ids = [
        seeded.add_experience(_experience(i, run_id="run-1" if i % 2 else None, namespace="ns"))
        for i in range(6)
    ]
    assert [e.id for e in seeded.recent_experiences(limit=3)] == ids[3:]
    assert [e.id for e in seeded.recent_experiences(limit=10)] == ids
    assert [e.id for e in seeded.recent_experiences(run_id="run-1", limit=2)] == [ids[3], ids[5]]
    assert seeded.recent_experiences(namespace="other", limit=5) == []

    assert seeded.remove_experience(ids[4]) is True
    assert seeded.remove_experience(ids[4]) is False
    assert seeded.remove_experience("missing") is False
    assert [e.id for e in seeded.recent_experiences(namespace="ns", limit=3)] == [
        ids[2],
        ids[3],
        ids[5],
    ]
    assert seeded.get_experience(ids[4]).removed is True  # kept as history
    assert seeded.stats().counts["experiences"] == 6


def test_search_experiences_filters_and_orders(seeded: KernelStore) -> None:
    """Filters and order without text; the word search: tests/store/test_memory_search.py."""
    a = seeded.add_experience(_experience(1))
    b = seeded.add_experience(_experience(2, namespace="n2"))
    seeded.upsert_definition(make_definition("other"))
    c = seeded.add_experience(
        ExperienceIn(definition_name="other", title="t", strategy="s", namespace="n2")
    )
    assert [e.id for e in seeded.search_experiences()] == [c, b, a]
    assert [e.id for e in seeded.search_experiences(definition_name=DEF)] == [b, a]
    assert [e.id for e in seeded.search_experiences(namespace="n2")] == [c, b]
    assert [e.id for e in seeded.search_experiences(limit=1)] == [c]
    assert seeded.remove_experience(b)
    assert [e.id for e in seeded.search_experiences()] == [c, a]
    assert [e.id for e in seeded.search_experiences(include_removed=True)] == [c, b, a]
    assert seeded.get_experience(a).namespace == "cpu"  # the default backend's namespace


def test_experience_with_unknown_references_is_refused(seeded: KernelStore) -> None:
    with pytest.raises(UnknownReferenceError, match="no-run"):
        seeded.add_experience(_experience(1, run_id="no-run"))
    with pytest.raises(UnknownReferenceError, match="fast_solution_id"):
        seeded.add_experience(_experience(1, fast_solution_id="nope"))
    assert seeded.stats().counts["experiences"] == 0


# --------------------------------------------------------------------------- id prefixes


def test_resolve_id_takes_a_unique_prefix(seeded: KernelStore) -> None:
    sid = seeded.upsert_solution(make_solution(DEF, "# prefix\n"))
    for given in (sid, sid.upper(), sid[:8], sid[:13], sid.replace("-", "")[:12].upper()):
        assert seeded.resolve_id("solution", given) == sid, given
    assert seeded.resolve_id("solution", sid[:7]) is None  # too short to be a prefix
    assert seeded.resolve_id("solution", ("e" if sid[0] == "f" else "f") * 8) is None
    eid = seeded.add_experience(_experience(1))
    assert seeded.resolve_id("experience", eid[:8]) == eid
    assert seeded.resolve_id("experience", eid[:8].upper() + "-" + eid[8:10]) == eid
    assert seeded.resolve_id("run", eid[:8]) is None  # kinds are apart

    twins = [f"deadbeef-0000-4000-8000-00000000000{i}" for i in range(5)]
    for run_id in [*twins[:2], "r1", "cafebabe12345678"]:
        seeded.create_run(RunRecord(id=run_id, definition_name=DEF))
    assert seeded.resolve_id("run", "r1") == "r1"  # any id, whole
    assert seeded.resolve_id("run", "cafebabe") == "cafebabe12345678"
    # Run ids are free text: one in capitals answers a prefix in either case, in every store
    # (SQLite's LIKE ignores case, PostgreSQL's does not).
    seeded.create_run(RunRecord(id="C0FFEE00ABCD", definition_name=DEF))
    for given in ("c0ffee00", "C0FFEE00", "c0ffee00AB"):
        assert seeded.resolve_id("run", given) == "C0FFEE00ABCD", given
    assert seeded.resolve_id("run", "deadbeef0000400080000000000000001") is None  # 33 digits
    assert seeded.resolve_id("run", "deadbeef000040008000000000000001") == twins[1]
    with pytest.raises(AmbiguousIdError, match=r"run id prefix 'DEADBEEF' matches 2 runs") as err:
        seeded.resolve_id("run", "DEADBEEF")
    assert twins[0] in str(err.value) and "give more of the id" in str(err.value)
    assert (err.value.kind, err.value.given) == ("run", "DEADBEEF")
    assert (err.value.matches, err.value.more) == (tuple(twins[:2]), False)
    for run_id in twins[2:]:
        seeded.create_run(RunRecord(id=run_id, definition_name=DEF))
    with pytest.raises(AmbiguousIdError, match=r"matches more than 3 runs \(.*, \.\.\.\)"):
        seeded.resolve_id("run", "deadbeef-0000")
    with pytest.raises(ValueError, match="kind must be one of solution, run, experience, suite"):
        seeded.resolve_id("profile", sid)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- hardware peaks


def test_hardware_peaks_are_a_cache_of_one_row_per_hardware(store: KernelStore) -> None:
    assert store.get_hardware_peaks("cpu/x86_64/Example") is None
    before = datetime.now(UTC).timestamp()
    store.put_hardware_peaks("cpu/x86_64/Example", {"fp32_gflops": 150.5, "cores": 8})
    first = store.get_hardware_peaks("cpu/x86_64/Example")
    assert first is not None
    assert first.hardware == "cpu/x86_64/Example"
    assert first.peaks == {"fp32_gflops": 150.5, "cores": 8}
    assert _is_utc(first.measured_at) and abs(first.measured_at.timestamp() - before) < 60
    nested = {"fp64_gflops": 70.25, "bandwidth": {"dram_gbps": 18.5, "note": "stream triad"}}
    store.put_hardware_peaks("cpu/x86_64/Example", nested)  # replaces, stamps again
    second = store.get_hardware_peaks("cpu/x86_64/Example")
    assert second is not None and second.peaks == nested
    assert second.measured_at >= first.measured_at
    store.put_hardware_peaks("cpu/other", {})
    assert store.get_hardware_peaks("cpu/other").peaks == {}
    assert store.get_hardware_peaks("cpu/x86_64/Example").peaks == nested
    with pytest.raises(TypeError, match="peaks"):
        store.put_hardware_peaks("cpu/x", {"fp32_gflops": math.inf})
    with pytest.raises(TypeError, match="peaks"):
        store.put_hardware_peaks("cpu/x", [1.0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hardware"):
        store.put_hardware_peaks("", {})
    assert store.get_hardware_peaks("cpu/x") is None
    assert "hardware_peaks" not in store.stats().counts  # a cache, not a record


# --------------------------------------------------------------------------- llm ledger


def test_llm_totals_per_role(seeded: KernelStore) -> None:
    for run_id in ("run-1", "run-2"):
        seeded.create_run(RunRecord(id=run_id, definition_name=DEF))
    calls = [
        LlmCallIn(run_id="run-1", role="planner", model="m", tokens_in=100, tokens_out=10,
                  latency_s=1.5, cost_usd=0.01),
        LlmCallIn(run_id="run-1", role="executor", model="m", tokens_in=7, tokens_out=3,
                  latency_s=0.5, cost_usd=0.002, ok=False, error="timeout"),
        LlmCallIn(run_id="run-1", role="planner", model="m2", tokens_in=50, tokens_out=5,
                  latency_s=0.25, cost_usd=0.005),
        LlmCallIn(run_id="run-2", role="planner", model="m", tokens_in=1000),
    ]  # fmt: skip
    ids = {seeded.add_llm_call(call) for call in calls}
    assert len(ids) == 4
    totals = seeded.llm_totals("run-1")
    assert [t.role for t in totals] == ["executor", "planner"]
    planner = totals[1]
    assert (planner.calls, planner.tokens_in, planner.tokens_out) == (2, 150, 15)
    assert planner.latency_s == pytest.approx(1.75)
    assert planner.cost_usd == pytest.approx(0.015)
    assert (totals[0].calls, totals[0].tokens_in) == (1, 7)
    assert seeded.llm_totals("nothing") == []
    listed = seeded.list_llm_calls("run-1")
    assert [(c.role, c.model, c.tokens_in) for c in listed] == [
        ("planner", "m", 100),
        ("executor", "m", 7),
        ("planner", "m2", 50),
    ]
    assert listed[1].ok is False and listed[1].error == "timeout"
    assert {c.id for c in listed} < ids
    assert seeded.list_llm_calls("nothing") == []
    with pytest.raises(UnknownReferenceError, match="no-run"):
        seeded.add_llm_call(LlmCallIn(run_id="no-run", role="planner", model="m"))
    seeded.add_llm_call(LlmCallIn(role="summarizer", model="m"))  # outside any run
    assert seeded.stats().counts["llm_calls"] == 5


# --------------------------------------------------------------------------- stats, bad input


def test_stats_counts_every_table(seeded: KernelStore) -> None:
    sid = seeded.upsert_solution(make_solution(DEF, "# k\n"))
    seeded.upsert_profile("w-1", sid, make_evaluation(), CONFIG)
    seeded.create_run(RunRecord(id="r", definition_name=DEF))
    seeded.add_experience(_experience(0))
    seeded.add_llm_call(LlmCallIn(run_id="r", role="planner", model="m"))
    seeded.put_run_entry("r", "slot", "1/0/0/0", {"status": "ok"})
    seeded.put_suite(
        SuiteRecord(id="s", name="cpu", source="builtin:cpu", backend="cpu", status="running")
    )
    stats = seeded.stats()
    assert stats.backend == seeded.backend
    assert stats.counts == {
        "definitions": 1,
        "workloads": 1,
        "solutions": 1,
        "profiles": 1,
        "measurements": 1,
        "runs": 1,
        "experiences": 1,
        "llm_calls": 1,
        "run_entries": 1,
        "suites": 1,
    }
    assert stats.location


def test_dicts_instead_of_records_are_refused(seeded: KernelStore) -> None:
    raw = make_solution(DEF, "# k\n").model_dump()
    with pytest.raises(TypeError, match=r"Solution\.model_validate"):
        seeded.upsert_solution(raw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Definition"):
        seeded.upsert_definition(make_definition("x").model_dump())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Workload"):
        seeded.upsert_workload(DEF, {"uuid": "w"})  # type: ignore[arg-type]
    sid = seeded.upsert_solution(make_solution(DEF, "# k\n"))
    with pytest.raises(TypeError, match="Evaluation"):
        seeded.upsert_profile("w-1", sid, {"status": "PASSED"}, CONFIG)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="benchmark_config"):
        seeded.upsert_profile("w-1", sid, make_evaluation(), ["x"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ExperienceIn"):
        seeded.add_experience({"title": "t"})  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError, match="title"):
        ExperienceIn(definition_name=DEF, title="", strategy="s")


def test_non_json_metadata_is_refused(seeded: KernelStore) -> None:
    with pytest.raises(TypeError, match="evolve_metadata"):
        seeded.upsert_solution(make_solution(DEF, "# a\n"), evolve_metadata={"x": math.nan})
    with pytest.raises(TypeError, match="evolve_metadata"):
        seeded.upsert_solution(make_solution(DEF, "# a\n"), evolve_metadata={"x": object()})
    with pytest.raises(ValueError, match="limit"):
        seeded.list_solutions(limit=-1)
    assert seeded.stats().counts["solutions"] == 0


def test_timestamps_are_recent_utc(seeded: KernelStore) -> None:
    before = datetime.now(UTC).timestamp()
    sid = seeded.upsert_solution(make_solution(DEF, "# t\n"))
    created = seeded.get_solution(sid).created_at
    assert abs(created.timestamp() - before) < 60


def test_keys_of_the_wrong_type_are_refused(seeded: KernelStore) -> None:
    with pytest.raises(TypeError, match="name must be a string"):
        seeded.get_definition(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="run_id must be a string"):
        seeded.get_run(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hardware must be a string"):
        seeded.best_solutions(DEF, hardware=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="definition_name must be a string"):
        seeded.list_solutions(definition_name=["x"])  # type: ignore[arg-type]
    assert seeded.get_definition(DEF) is not None

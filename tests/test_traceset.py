"""A FlashInfer-Trace directory moves into a store and between stores without loss."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from accelopt_mcp.models import LlmCallIn, Solution
from accelopt_mcp.store.base import ExperienceIn, KernelStore, RunRecord, RunUpdate, SuiteRecord
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.transfer.traceset import TraceSetError, export_traceset, import_traceset
from tests.flashinfer_bench_copy import load_with_flashinfer_bench
from tests.pg_server import create_database

TRACESET = Path(__file__).parent / "data" / "fib_traceset"


@pytest.fixture
def sqlite_store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "k.db")


@pytest.fixture
def pg_store(pg_admin_dsn: str) -> PostgresStore:
    dsn = create_database(pg_admin_dsn, f"traceset_{uuid.uuid4().hex[:8]}")
    store = PostgresStore(dsn, init_schema=True)
    yield store
    store.close()


def test_flashinfer_traceset_imports_once(sqlite_store: SqliteStore) -> None:
    counts = import_traceset(sqlite_store, TRACESET)
    assert (counts.definitions, counts.workloads, counts.solutions, counts.profiles) == (1, 3, 2, 3)
    before = sqlite_store.stats().counts
    import_traceset(sqlite_store, TRACESET)
    assert sqlite_store.stats().counts == before

    best = sqlite_store.best_solutions("rmsnorm_h128")
    assert [b.solution.solution.name for b in best] == ["rmsnorm_h128_triton_v1"]
    assert best[0].profile.latency_ms == pytest.approx(0.0123)
    assert best[0].profile.speedup == pytest.approx(3.707)
    assert best[0].profile.eval_hardware == "NVIDIA_H100"


def _fill_engine_records(store: KernelStore) -> dict[str, str]:
    import_traceset(store, TRACESET)
    root = store.list_solutions(definition_name="rmsnorm_h128")[0]
    ids = {"root": root.id}
    parent = root.id
    for depth in range(1, 4):
        source = root.solution.sources[0].content + f"\n# generation {depth}\n"
        child = root.solution.model_copy(
            update={
                "name": f"gen{depth}",
                "sources": [root.solution.sources[0].model_copy(update={"content": source})],
            }
        )
        parent = store.upsert_solution(
            Solution.model_validate(child.model_dump()),
            parent_id=parent,
            evolve_metadata={"run_id": "run-1", "iteration": depth, "plan": f"plan {depth}"},
        )
        ids[f"gen{depth}"] = parent
    store.create_run(RunRecord(id="run-1", definition_name="rmsnorm_h128", config={"beam": 2}))
    store.update_run(
        "run-1",
        RunUpdate(
            status="completed",
            current_iteration=3,
            initial_solution_id=root.id,
            best_solution_id=parent,
            best_latency_ms=0.01,
            tokens_in=100,
            tokens_out=50,
            cost_usd=0.25,
        ),
    )
    for n in range(3):
        item = store.add_experience(
            ExperienceIn(
                definition_name="rmsnorm_h128",
                run_id="run-1",
                title=f"item {n}",
                strategy=f"strategy {n}",
                pseudocode="for row: ...",
                slow_solution_id=root.id,
                fast_solution_id=parent,
                speedup=1.5 + n,
                iteration=n,
            )
        )
        if n == 1:
            store.remove_experience(item)
    store.add_llm_call(
        LlmCallIn(run_id="run-1", role="planner", model="m", tokens_in=60, tokens_out=20)
    )
    store.add_llm_call(
        LlmCallIn(run_id="run-1", role="executor", model="m", tokens_in=40, tokens_out=30)
    )
    return ids


def test_export_then_import_moves_everything_between_stores(
    sqlite_store: SqliteStore, pg_store: PostgresStore, tmp_path: Path
) -> None:
    ids = _fill_engine_records(sqlite_store)
    # A suite whose table names two stored kernels (and one that is no stored kernel).
    case = {"key": "rmsnorm/0", "task": "rmsnorm", "task_path": "t.py", "kernel_path": "k.py"}
    sqlite_store.put_suite(
        SuiteRecord(
            id=str(uuid.uuid4()), name="s", source="x", backend="cpu", status="completed",
            spec={"cases": [
                {**case, "baseline": {"solution_id": ids["gen3"], "percent_of_peak": 12.5},
                 "best": {"solution_id": None, "latency_ms": 1.0}},
            ]},
        )
    )  # fmt: skip
    out = tmp_path / "export"
    exported = export_traceset(sqlite_store, out)
    assert exported.solutions == 5 and exported.runs == 1 and exported.experiences == 3
    assert exported.llm_calls == 2 and exported.suites == 1

    imported = import_traceset(pg_store, out)
    assert pg_store.stats().counts == sqlite_store.stats().counts
    assert imported.profiles == 3

    # Lineage and evolve metadata survive, although ids differ between stores.
    src_leaf = sqlite_store.get_solution(ids["gen3"])
    dst_leaf = pg_store.find_solution("rmsnorm_h128", src_leaf.solution_hash)
    assert dst_leaf is not None and dst_leaf.evolve_metadata == src_leaf.evolve_metadata
    assert [a.solution.name for a in pg_store.ancestors(dst_leaf.id)] == [
        a.solution.name for a in sqlite_store.ancestors(ids["gen3"])
    ]
    run = pg_store.get_run("run-1")
    assert run is not None and run.status == "completed" and run.cost_usd == pytest.approx(0.25)
    assert run.best_solution_id == dst_leaf.id
    memory = pg_store.recent_experiences(run_id="run-1", limit=10)
    assert [m.title for m in memory] == ["item 0", "item 2"]  # removed item stays removed
    assert memory[1].fast_solution_id == dst_leaf.id
    totals = {t.role: t.tokens_in for t in pg_store.llm_totals("run-1")}
    assert totals == {"executor": 40, "planner": 60}
    [suite] = pg_store.list_suites()
    [moved] = suite.spec["cases"]
    assert moved["baseline"] == {"solution_id": dst_leaf.id, "percent_of_peak": 12.5}
    assert moved["best"] == {"solution_id": None, "latency_ms": 1.0}

    # Importing the same directory again adds nothing.
    before = pg_store.stats().counts
    import_traceset(pg_store, out)
    assert pg_store.stats().counts == before


def test_exported_files_are_in_flashinfer_layout(
    sqlite_store: SqliteStore, tmp_path: Path, fib_site: Path
) -> None:
    _fill_engine_records(sqlite_store)
    export_traceset(sqlite_store, tmp_path / "x")
    # flashinfer-bench's own record classes read every file we wrote.
    loaded = load_with_flashinfer_bench(fib_site, tmp_path / "x")
    assert loaded["definitions"] == ["rmsnorm_h128"]
    assert len(loaded["solutions"]) == 5 and len(loaded["workloads"]) == 3
    assert sorted(t[2] for t in loaded["traces"]) == [
        "INCORRECT_NUMERICAL",
        "PASSED",
        "RUNTIME_ERROR",
    ]
    definition = json.loads((tmp_path / "x/definitions/rmsnorm/rmsnorm_h128.json").read_text())
    assert definition == json.loads(
        (TRACESET / "definitions/rmsnorm/rmsnorm_h128.json").read_text()
    )
    solution_files = sorted((tmp_path / "x/solutions/rmsnorm/rmsnorm_h128").glob("*.json"))
    assert len(solution_files) == 5
    lines = (tmp_path / "x/traces/rmsnorm/rmsnorm_h128.jsonl").read_text().splitlines()
    assert {json.loads(line)["solution"] for line in lines} == {
        "rmsnorm_h128_triton_v1",
        "rmsnorm_h128_python_ref",
    }


def test_bad_directories_get_clear_errors(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    with pytest.raises(TraceSetError, match="not a directory"):
        import_traceset(sqlite_store, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceSetError, match="no definitions/"):
        import_traceset(sqlite_store, tmp_path / "empty")
    bad = tmp_path / "bad"
    (bad / "definitions").mkdir(parents=True)
    (bad / "definitions" / "x.json").write_text("{not json")
    with pytest.raises(TraceSetError, match=r"x\.json: not valid JSON"):
        import_traceset(sqlite_store, bad)
    orphan = tmp_path / "orphan"
    (orphan / "solutions").mkdir(parents=True)
    data = json.loads(
        (TRACESET / "solutions/rmsnorm/rmsnorm_h128/rmsnorm_h128_triton_v1.json").read_text()
    )
    (orphan / "solutions" / "s.json").write_text(json.dumps(data))
    with pytest.raises(TraceSetError, match="definition 'rmsnorm_h128'"):
        import_traceset(sqlite_store, orphan)


def _second_definition(store: KernelStore) -> str:
    """rmsnorm_h128's definition again as rmsnorm_h256 (another shape of the same op)."""
    stored = store.get_definition("rmsnorm_h128")
    assert stored is not None
    data = {**stored.definition.model_dump(mode="json"), "name": "rmsnorm_h256"}
    return store.upsert_definition(type(stored.definition).model_validate(data))


def test_a_source_serving_two_definitions_moves_with_its_references(tmp_path: Path) -> None:
    src = SqliteStore(tmp_path / "src.db")
    import_traceset(src, TRACESET)
    other = _second_definition(src)
    root = src.list_solutions(definition_name="rmsnorm_h128")[0]
    # The same source under the second definition, derived from the first one's row.
    shared = src.upsert_solution(
        Solution.model_validate({**root.solution.model_dump(), "definition": other}),
        parent_id=root.id,
    )
    source = root.solution.sources[0].content + "\n# tuned for h256\n"
    tuned = Solution.model_validate(
        {
            **root.solution.model_dump(),
            "definition": other,
            "name": "tuned",
            "sources": [{**root.solution.sources[0].model_dump(), "content": source}],
        }
    )
    child = src.upsert_solution(tuned, parent_id=shared)
    src.create_run(RunRecord(id="run-h256", definition_name=other, initial_solution_id=shared))
    src.update_run("run-h256", RunUpdate(best_solution_id=child))
    src.add_experience(
        ExperienceIn(
            definition_name=other,
            run_id="run-h256",
            title="tune",
            strategy="for h256",
            slow_solution_id=shared,
            fast_solution_id=child,
        )
    )
    out = tmp_path / "export"
    export_traceset(src, out)

    dst = SqliteStore(tmp_path / "dst.db")
    import_traceset(dst, out)
    assert dst.stats().counts == src.stats().counts
    first = dst.find_solution("rmsnorm_h128", root.solution_hash)
    second = dst.find_solution(other, root.solution_hash)
    assert first is not None and second is not None and first.id != second.id
    assert second.parent_id == first.id  # across definitions, by the definition it names
    assert [a.id for a in dst.ancestors(dst.list_solutions(definition_name=other)[-1].id)] == [
        second.id,
        first.id,
    ]
    run = dst.get_run("run-h256")
    assert run is not None and run.initial_solution_id == second.id
    [item] = dst.recent_experiences(run_id="run-h256", limit=5)
    assert item.slow_solution_id == second.id
    assert item.fast_solution_id == run.best_solution_id != second.id
    before = dst.stats().counts
    import_traceset(dst, out)
    assert dst.stats().counts == before


def test_an_export_without_definitions_in_its_references_still_imports(
    sqlite_store: SqliteStore, tmp_path: Path
) -> None:
    """Exports from before a source could serve several definitions name a solution by its
    source hash alone."""
    ids = _fill_engine_records(sqlite_store)
    out = tmp_path / "export"
    export_traceset(sqlite_store, out)
    for path in (out / "solutions").rglob("*.json"):
        data = json.loads(path.read_text())
        assert "parent_definition" in data["accelopt"]
        del data["accelopt"]["parent_definition"]
        path.write_text(json.dumps(data))
    for name in ("runs.jsonl", "experiences.jsonl"):
        path = out / "accelopt" / name
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        old = [{k: v for k, v in r.items() if not k.endswith("_solution_definition")} for r in rows]
        assert old != rows
        path.write_text("".join(json.dumps(r) + "\n" for r in old))

    dst = SqliteStore(tmp_path / "dst.db")
    import_traceset(dst, out)
    leaf = sqlite_store.get_solution(ids["gen3"])
    assert leaf is not None
    found = dst.find_solution("rmsnorm_h128", leaf.solution_hash)
    assert found is not None
    assert [a.solution.name for a in dst.ancestors(found.id)] == [
        a.solution.name for a in sqlite_store.ancestors(ids["gen3"])
    ]
    run = dst.get_run("run-1")
    assert run is not None and run.best_solution_id == found.id
    assert dst.recent_experiences(run_id="run-1", limit=10)[0].fast_solution_id == found.id

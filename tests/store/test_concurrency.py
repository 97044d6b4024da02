"""Eight writers upsert overlapping kernels at once: nothing is lost and nothing is doubled
(every writer's measurement of a profile is kept and pooled)."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from accelopt_mcp.store.base import ExperienceIn, KernelStore
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SqliteStore
from tests.store.samples import make_definition, make_evaluation, make_solution, make_workload

WRITERS = 8
KERNELS = 30
DEF = "exp_f32"


def _source(i: int) -> str:
    return f"def run(x):\n    return x * {i}\n"


def _write(store: KernelStore, writer: int, start: threading.Barrier | None = None) -> dict:
    """Upsert every kernel (each writer in its own order), a profile per kernel, and one
    experience of its own; returns what the store answered."""
    if start is not None:
        start.wait()
    order = [(writer * 7 + k) % KERNELS for k in range(KERNELS)]
    ids: dict[int, str] = {}
    profiles: dict[int, str] = {}
    store.upsert_definition(make_definition(DEF))
    store.upsert_workload(DEF, make_workload(DEF, uuid_="w-shared"))
    for i in order:
        ids[i] = store.upsert_solution(make_solution(DEF, _source(i), name=f"k{i}-by-{writer}"))
        evaluation = make_evaluation(latency_ms=1.0 + i + writer / 100)
        profiles[i] = store.upsert_profile("w-shared", ids[i], evaluation, {"iterations": 10})
    store.add_experience(
        ExperienceIn(definition_name=DEF, title=f"writer {writer}", strategy="concurrency")
    )
    return {"ids": ids, "profiles": profiles}


def _check(store: KernelStore, results: list[dict]) -> None:
    for i in range(KERNELS):
        assert len({r["ids"][i] for r in results}) == 1, f"kernel {i} got several ids"
        assert len({r["profiles"][i] for r in results}) == 1, f"profile {i} got several ids"
    counts = store.stats().counts
    assert counts["definitions"] == 1
    assert counts["workloads"] == 1
    assert counts["solutions"] == KERNELS
    assert counts["profiles"] == KERNELS
    # Every writer's measurement of every profile is kept, and each pooled figure pools all.
    assert counts["measurements"] == KERNELS * WRITERS
    for i in range(KERNELS):
        profile_id = results[0]["profiles"][i]
        assert len(store.list_measurements(profile_id)) == WRITERS
        profile = store.get_profile(profile_id)
        assert profile is not None and profile.evaluation.latency_stats is not None
        assert profile.evaluation.latency_stats.measurements == WRITERS
    assert counts["experiences"] == WRITERS
    stored = {s.id for s in store.list_solutions(definition_name=DEF)}
    assert stored == {results[0]["ids"][i] for i in range(KERNELS)}
    titles = sorted(e.title for e in store.search_experiences(text="writer"))
    assert titles == sorted(f"writer {w}" for w in range(WRITERS))


def _threads(store: KernelStore) -> list[dict]:
    start = threading.Barrier(WRITERS)
    with ThreadPoolExecutor(WRITERS) as pool:
        futures = [pool.submit(_write, store, w, start) for w in range(WRITERS)]
        return [f.result(timeout=120) for f in futures]


def test_sqlite_threads(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "k.db") as store:
        _check(store, _threads(store))


@pytest.mark.postgres
def test_postgres_threads(pg_dsn: str) -> None:
    with PostgresStore(pg_dsn, init_schema=True) as store:
        _check(store, _threads(store))


# Processes: each opens the store itself, on a database nobody has set up yet, so the first
# opens race on creating the schema as well.


def _sqlite_process(path: str, writer: int) -> dict:
    with SqliteStore(path) as store:
        return _write(store, writer)


def _postgres_process(dsn: str, writer: int) -> dict:
    with PostgresStore(dsn, init_schema=True) as store:
        return _write(store, writer)


def _processes(target: Callable[[str, int], dict], location: str) -> list[dict]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(WRITERS) as pool:
        return pool.starmap(target, [(location, w) for w in range(WRITERS)], chunksize=1)


def test_sqlite_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "k.db"
    results = _processes(_sqlite_process, str(path))
    with SqliteStore(path) as store:
        _check(store, results)


@pytest.mark.postgres
def test_postgres_processes(pg_dsn: str) -> None:
    results = _processes(_postgres_process, pg_dsn)
    with PostgresStore(pg_dsn) as store:
        _check(store, results)

"""Kernel store throughput: upserts, queries and lineage, per store, printed as a table.

    .venv/bin/python benchmarks/bench_store.py [--n 10000] [--pg-dsn DSN] [--stores sqlite,postgres]

Without --pg-dsn a throwaway PostgreSQL server is started (tests/pg_server.py; it runs with
fsync off, so its write figures are upper bounds). Targets: SQLite >= 2,000 upserts/s,
lineage of depth 50 < 20 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SqliteStore
from tests.store.samples import (
    make_definition,
    make_evaluation,
    make_solution,
    make_workload,
)

TARGET_UPSERTS_PER_S = 2000.0
TARGET_LINEAGE_MS = 20.0
DEF = "bench_def"
CONFIG = {"iterations": 10, "seeds": [0, 1, 2]}


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _timed(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - began)
    return samples


def bench(
    store: KernelStore, n: int, refresh_statistics: Callable[[], None] = lambda: None
) -> dict[str, float]:
    store.upsert_definition(make_definition(DEF))
    workloads = [store.upsert_workload(DEF, make_workload(DEF, n=8 * (i + 1))) for i in range(4)]
    solutions = [make_solution(DEF, f"def run(x):\n    return x + {i}\n") for i in range(n)]
    evaluations = [make_evaluation(latency_ms=0.5 + (i * 7919 % n) / n) for i in range(n)]
    figures: dict[str, float] = {}

    began = time.perf_counter()
    ids = [store.upsert_solution(s, evolve_metadata={"run_id": "bench"}) for s in solutions]
    figures["solution upserts/s"] = _rate(n, time.perf_counter() - began)

    began = time.perf_counter()
    for i, sid in enumerate(ids):
        store.upsert_profile(workloads[i % len(workloads)], sid, evaluations[i], CONFIG)
    figures["profile upserts/s"] = _rate(n, time.perf_counter() - began)

    # PostgreSQL plans from table statistics that autovacuum refreshes some time after a bulk
    # load; refresh them now so queries are timed as a settled database runs them.
    refresh_statistics()
    repeat = min(n, 2000)
    began = time.perf_counter()
    for s in solutions[:repeat]:
        store.upsert_solution(s)
    figures["repeat upserts/s (dedup)"] = _rate(repeat, time.perf_counter() - began)

    began = time.perf_counter()
    for sid in ids[:repeat]:
        store.get_solution(sid)
    figures["get_solution/s"] = _rate(repeat, time.perf_counter() - began)

    calls = 50
    best = _timed(lambda: store.best_solutions(DEF, hardware="cpu/x86_64", limit=10), calls)
    figures["best_solutions/s"] = _rate(calls, sum(best))
    best = _timed(lambda: store.best_solutions(DEF, limit=10), calls)
    figures["best_solutions/s (any hw)"] = _rate(calls, sum(best))
    best = _timed(lambda: store.best_solutions(DEF, workload_uuid=workloads[0], limit=10), calls)
    figures["best_solutions/s (1 workload)"] = _rate(calls, sum(best))

    chain: list[str] = []
    for depth in range(51):
        source = f"# lineage {uuid.uuid4().hex} {depth}\n"
        parent = chain[-1] if chain else None
        chain.append(store.upsert_solution(make_solution(DEF, source), parent_id=parent))
    up = _timed(lambda: store.ancestors(chain[-1]), 50)
    down = _timed(lambda: store.descendants(chain[0]), 50)
    assert len(store.ancestors(chain[-1])) == 50 and len(store.descendants(chain[0])) == 50
    figures["ancestors depth 50 (ms, median)"] = statistics.median(up) * 1000
    figures["descendants depth 50 (ms, median)"] = statistics.median(down) * 1000
    return figures


def _analyze(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")


def _print(results: dict[str, dict[str, float]]) -> None:
    names = list(results)
    metrics = list(next(iter(results.values())))
    width = max(len(m) for m in metrics) + 2
    print("".ljust(width) + "".join(name.rjust(14) for name in names))
    for metric in metrics:
        print(metric.ljust(width) + "".join(f"{results[s][metric]:14.1f}" for s in names))
    print()
    for name, figures in results.items():
        upserts = figures["solution upserts/s"]
        lineage = max(
            figures["ancestors depth 50 (ms, median)"], figures["descendants depth 50 (ms, median)"]
        )
        print(
            f"{name}: solution upserts {upserts:,.0f}/s = {upserts / TARGET_UPSERTS_PER_S:.2f}x "
            f"the {TARGET_UPSERTS_PER_S:,.0f}/s target; lineage {lineage:.2f} ms = "
            f"{TARGET_LINEAGE_MS / lineage:.1f}x under the {TARGET_LINEAGE_MS:.0f} ms target"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10000, help="solutions (and profiles) to store")
    parser.add_argument("--pg-dsn", help="PostgreSQL server (admin DSN); default: start one")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]
    results: dict[str, dict[str, float]] = {}
    server = None
    with tempfile.TemporaryDirectory(prefix="accelopt-bench-") as tmp:
        try:
            if "sqlite" in kinds:
                with SqliteStore(Path(tmp) / "bench.db") as store:
                    results["sqlite"] = bench(store, args.n)
            if "postgres" in kinds:
                from tests.pg_server import PostgresServer, create_database

                admin = args.pg_dsn
                if admin is None:
                    server = PostgresServer()
                    admin = server.start()
                dsn = create_database(admin, f"bench_{uuid.uuid4().hex[:12]}")
                with PostgresStore(dsn, init_schema=True) as store:
                    results["postgres"] = bench(store, args.n, lambda: _analyze(dsn))
        finally:
            if server is not None:
                server.stop()
    print(f"n = {args.n} solutions + {args.n} profiles per store")
    _print(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

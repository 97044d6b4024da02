"""Run claims under contention: several processes race to claim the same runs.

    .venv/bin/python benchmarks/bench_claims.py [--trials 200] [--claimers 4] [--pg-dsn DSN]

Each trial is one interrupted run (held by a worker that is gone) that every claimer process
tries to take at the same moment, as servers sharing a database do when they start together.
Printed per store: trials, runs taken by more than one claimer (must be 0), runs taken by none
(must be 0), and the median claim round trip. Without --pg-dsn a throwaway PostgreSQL server is
started (tests/pg_server.py).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accelopt_mcp.store import open_store
from accelopt_mcp.store.base import RunRecord
from tests.store.samples import make_definition

DEF = "bench_claims"
DEAD = "bench-host|1|gone"


def _claimer(url: str, name: str, runs: list[str], start: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    store = open_store(url)
    won: list[str] = []
    took: list[float] = []
    try:
        for run_id in runs:
            while time.time() < start:
                time.sleep(0.0005)
            began = time.perf_counter()
            if store.claim_run(run_id, name, lease_s=60, statuses=["running"], steal_from=DEAD):
                won.append(run_id)
            took.append(time.perf_counter() - began)
            start += 0.02  # the next race: all claimers again at one moment
    finally:
        store.close()
    out.put((name, won, took))


def bench(url: str, trials: int, claimers: int) -> dict[str, float]:
    store = open_store(url)
    store.upsert_definition(make_definition(DEF))
    runs = []
    for _ in range(trials):
        run_id = store.create_run(
            RunRecord(id=str(uuid.uuid4()), definition_name=DEF, status="running")
        )
        store.claim_run(run_id, DEAD, lease_s=600, statuses=["running"])
        runs.append(run_id)
    store.close()
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    start = time.time() + 3.0  # every claimer process imported and connected by then
    procs = [
        ctx.Process(target=_claimer, args=(url, f"claimer-{n}", runs, start, out))
        for n in range(claimers)
    ]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    owners: dict[str, list[str]] = {}
    took: list[float] = []
    for name, won, times in results:
        took += times
        for run_id in won:
            owners.setdefault(run_id, []).append(name)
    return {
        "trials": trials,
        "taken_twice": sum(1 for names in owners.values() if len(names) > 1),
        "taken_by_none": sum(1 for run_id in runs if run_id not in owners),
        "claim_ms_median": statistics.median(took) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--claimers", type=int, default=4)
    parser.add_argument("--pg-dsn", default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("sqlite", bench(str(Path(tmp) / "claims.db"), args.trials, args.claimers)))
        if args.pg_dsn:
            rows.append(("postgres", bench(args.pg_dsn, args.trials, args.claimers)))
        else:
            from accelopt_mcp.store.postgres import PostgresStore
            from tests.pg_server import PostgresServer, create_database

            server = PostgresServer()
            try:
                dsn = create_database(server.start(), "bench_claims")
                PostgresStore(dsn, init_schema=True).close()
                rows.append(("postgres", bench(dsn, args.trials, args.claimers)))
            finally:
                server.stop()
    print(f"{args.claimers} claimer processes racing for each run")
    print(
        f"{'store':<10} {'trials':>7} {'twice':>6} {'none':>5} {'claim ms (median)':>18}  verdict"
    )
    for name, figures in rows:
        ok = figures["taken_twice"] == 0 and figures["taken_by_none"] == 0
        print(
            f"{name:<10} {figures['trials']:>7.0f} {figures['taken_twice']:>6.0f} "
            f"{figures['taken_by_none']:>5.0f} {figures['claim_ms_median']:>18.2f}  "
            f"{'PASS' if ok else 'FAIL'}"
        )


if __name__ == "__main__":
    main()

"""Kernel store at scale: query latency and insert rates, SQLite and PostgreSQL side by side.

    .venv/bin/python benchmarks/bench_store.py [--n 100000] [--stores sqlite,postgres]
        [--layouts one,ten] [--repeat 50] [--sample 2000] [--pg-dsn DSN]

One command, one table. For each store and layout it fills a fresh database with n solutions and
n profiles (layout "one": one definition; "ten": ten definitions of n/10 each; every solution has
a parent, one profile on its definition's workload, 90 % of them PASSED) and n/5 memory items,
closes it, opens it again as a new process would, and times (median of --repeat calls, each on
other arguments where the query takes any):

- best_solutions on one definition (on its hardware, and on any hardware),
- lineage: ancestors and descendants along a chain of depth 50,
- the engine's per-attempt profile lookup (list_profiles by solution and workload, as
  engine/profile_cache.py asks before profiling a kernel),
- memory list (recent_experiences by namespace, and by run) and search (search_experiences),

each against the < 5 ms target (PASS/FAIL). Inserts/s through the store API, on the full
tables: the last 2 * --sample rows of each kind are timed, half of them one call at a time,
half in a `store.batch()` (the bulk path imports use; an accelopt without it stores them one
call at a time). `--n 5000` is a quick run. Without --pg-dsn a throwaway
PostgreSQL server is started (tests/pg_server.py; it runs with fsync off, so its write figures
are upper bounds).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accelopt_mcp.models import EvaluationStatus
from accelopt_mcp.store.base import ExperienceIn, KernelStore, RunRecord
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SqliteStore
from tests.store.samples import make_definition, make_evaluation, make_solution, make_workload

TARGET_MS = 5.0
HARDWARE = "cpu/x86_64"
CONFIG = {"iterations": 10, "seeds": [0, 1, 2]}
NAMESPACES = ("cpu", "cpu/team")
# Memory item words: each is in about 3 % of the items, as a topic would be. Two digits, so
# that no word is the start of another (search matches word starts: "fuse1" would find
# "fuse10" to "fuse19" too).
VOCABULARY = [
    f"{a}{b:02d}" for a in ("fuse", "tile", "vector", "unroll", "cache") for b in range(20)
]

LATENCY_ROWS = [
    "best_solutions (hardware)",
    "best_solutions (any hw)",
    "ancestors (depth 50)",
    "descendants (depth 50)",
    "profile lookup (per attempt)",
    "memory list (namespace)",
    "memory list (run)",
    "memory search (2 words)",
]
RATE_ROWS = [
    "solution inserts/s, per call",
    "profile inserts/s, per call",
    "memory inserts/s, per call",
    "solution inserts/s, batch",
    "profile inserts/s, batch",
    "memory inserts/s, batch",
]


def _median_ms(calls: list[Callable[[], object]]) -> float:
    samples = []
    for call in calls:
        began = time.perf_counter()
        call()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples) * 1000


def _batch(store: KernelStore) -> contextlib.AbstractContextManager[Any]:
    """The store's bulk path, or nothing (a store or an accelopt without one)."""
    batch = getattr(store, "batch", None)
    return batch() if batch is not None else contextlib.nullcontext()


def _rate(rows: int, seconds: float) -> float:
    return rows / seconds if rows and seconds > 0 else float("nan")


def _ratio(a: float, b: float) -> str:
    return "n/a" if not (a > 0 and b > 0) else f"{a / b:.2f}x"


def fill(store: KernelStore, n: int, definitions: int, sample: int) -> dict[str, Any]:
    """Store the data set; returns the insert rates and what the queries need."""
    rng = random.Random(7)
    names = [f"bench_def_{d}" for d in range(definitions)]
    workloads: dict[str, str] = {}
    for name in names:
        store.upsert_definition(make_definition(name))
        workloads[name] = store.upsert_workload(name, make_workload(name, n=64))
    per_def = n // definitions
    ids: dict[str, list[str]] = {name: [] for name in names}
    rates: dict[str, float] = {}

    def solution(i: int) -> None:
        name = names[i % definitions]
        own = ids[name]
        parent = own[rng.randrange(len(own))] if own else None
        source = f"def run(x):\n    return x + {i}\n"
        own.append(
            store.upsert_solution(
                make_solution(name, source), parent_id=parent, evolve_metadata={"run_id": "bench"}
            )
        )

    def profile(i: int) -> None:
        name = names[i % definitions]
        passed = rng.random() < 0.9
        status = EvaluationStatus.PASSED if passed else EvaluationStatus.INCORRECT_NUMERICAL
        latency = 0.5 + rng.random()
        evaluation = make_evaluation(status, latency_ms=latency, hardware=HARDWARE)
        store.upsert_profile(workloads[name], ids[name][i // definitions], evaluation, CONFIG)

    runs = [f"bench-run-{r}" for r in range(max(1, n // 1000))]
    for r, run_id in enumerate(runs):
        store.create_run(RunRecord(id=run_id, definition_name=names[r % definitions]))

    def experience(i: int) -> None:
        words = rng.sample(VOCABULARY, 3)
        store.add_experience(
            ExperienceIn(
                definition_name=names[i % definitions],
                title=f"{words[0]} the inner loop",
                strategy=f"{words[1]} then {words[2]}; keeps the working set in cache",
                pseudocode="for i in range(n): y[i] = f(x[i])",
                run_id=runs[i % len(runs)],
                namespace=NAMESPACES[i % len(NAMESPACES)],
                speedup=1.0 + rng.random(),
                iteration=i % 10,
            )
        )

    for kind, count, write in (
        ("solution", per_def * definitions, solution),
        ("profile", per_def * definitions, profile),
        ("memory", n // 5, experience),
    ):
        # Most rows go in as fast as the store takes them; the last 2 * `timed` are timed,
        # one half a call at a time and the other in a batch, side by side on the full table.
        timed = min(sample, count // 4)
        bulk = count - 2 * timed
        with _batch(store):
            for i in range(bulk):
                write(i)
        began = time.perf_counter()
        for i in range(bulk, bulk + timed):
            write(i)
        rates[f"{kind} inserts/s, per call"] = _rate(timed, time.perf_counter() - began)
        began = time.perf_counter()
        with _batch(store):
            for i in range(bulk + timed, count):
                write(i)
        rates[f"{kind} inserts/s, batch"] = _rate(timed, time.perf_counter() - began)

    # A chain of depth 50 (the lineage queries), among everything else.
    chain: list[str] = []
    for depth in range(51):
        source = f"# lineage {uuid.uuid4().hex} {depth}\n"
        chain.append(
            store.upsert_solution(
                make_solution(names[0], source), parent_id=chain[-1] if chain else None
            )
        )
    return {
        "rates": rates,
        "definition": names[0],
        "workload": workloads[names[0]],
        "solutions": ids[names[0]],
        "chain": chain,
        "runs": runs,
    }


def measure(store: KernelStore, data: dict[str, Any], repeat: int) -> dict[str, float]:
    rng = random.Random(11)
    name, workload, chain = data["definition"], data["workload"], data["chain"]
    some = [rng.choice(data["solutions"]) for _ in range(repeat)]
    texts = [" ".join(rng.sample(VOCABULARY, 2)) for _ in range(repeat)]
    assert len(store.ancestors(chain[-1])) == 50 and len(store.descendants(chain[0])) == 50
    assert len(store.best_solutions(name, hardware=HARDWARE, limit=10)) == 10
    assert store.list_profiles(solution_id=some[0], workload_uuid=workload)
    times = {
        "best_solutions (hardware)": [
            lambda: store.best_solutions(name, hardware=HARDWARE, limit=10)
        ]
        * repeat,
        "best_solutions (any hw)": [lambda: store.best_solutions(name, limit=10)] * repeat,
        "ancestors (depth 50)": [lambda: store.ancestors(chain[-1])] * repeat,
        "descendants (depth 50)": [lambda: store.descendants(chain[0])] * repeat,
        "profile lookup (per attempt)": [
            lambda s=s: store.list_profiles(solution_id=s, workload_uuid=workload) for s in some
        ],
        "memory list (namespace)": [
            lambda ns=NAMESPACES[i % 2]: store.recent_experiences(namespace=ns, limit=16)
            for i in range(repeat)
        ],
        "memory list (run)": [
            lambda r=data["runs"][i % len(data["runs"])]: store.recent_experiences(
                run_id=r, limit=16
            )
            for i in range(repeat)
        ],
        "memory search (2 words)": [
            lambda t=t: store.search_experiences(text=t, namespace="cpu", limit=10) for t in texts
        ],
    }
    return {row: _median_ms(calls) for row, calls in times.items()}


@contextlib.contextmanager
def _stores(kinds: list[str], pg_dsn: str | None) -> Iterator[dict[str, Callable[[], Any]]]:
    """For each store kind, a function that makes a fresh empty database and returns a
    function opening it."""
    server = None
    with tempfile.TemporaryDirectory(prefix="accelopt-bench-") as tmp:
        makers: dict[str, Callable[[], Any]] = {}
        if "sqlite" in kinds:

            def sqlite_db() -> Callable[[], KernelStore]:
                path = Path(tmp) / f"{uuid.uuid4().hex[:8]}.db"
                return lambda: SqliteStore(path)

            makers["sqlite"] = sqlite_db
        try:
            if "postgres" in kinds:
                from tests.pg_server import PostgresServer, create_database

                admin = pg_dsn
                if admin is None:
                    server = PostgresServer()
                    admin = server.start()

                def pg_db() -> Callable[[], KernelStore]:
                    dsn = create_database(admin, f"bench_{uuid.uuid4().hex[:12]}")
                    PostgresStore(dsn, init_schema=True).close()
                    return lambda: PostgresStore(dsn)

                makers["postgres"] = pg_db
            yield makers
        finally:
            if server is not None:
                server.stop()


def _cell(value: float, target: float | None) -> str:
    if target is None:
        return "n/a" if value != value else f"{value:,.0f}"  # NaN: no rows went that way
    verdict = "PASS" if value < target else "FAIL"
    return f"{value:.3f} {verdict}"


def _print(results: dict[str, dict[str, float]], n: int) -> None:
    columns = list(results)
    first = max(len(r) for r in LATENCY_ROWS + RATE_ROWS) + 2
    width = max(16, *(len(c) + 2 for c in columns))
    print(f"n = {n:,} solutions + {n:,} profiles + {n // 5:,} memory items per database")
    print(f"SQLite {sqlite3.sqlite_version}; latency: median ms, target < {TARGET_MS:g} ms")
    print("".ljust(first) + "".join(c.rjust(width) for c in columns))
    for row in LATENCY_ROWS:
        cells = [_cell(results[c][row], TARGET_MS) for c in columns]
        print(row.ljust(first) + "".join(cell.rjust(width) for cell in cells))
    for row in RATE_ROWS:
        cells = [_cell(results[c][row], None) for c in columns]
        print(row.ljust(first) + "".join(cell.rjust(width) for cell in cells))
    print()
    for column in columns:
        figures = results[column]
        worst = max(LATENCY_ROWS, key=lambda r: figures[r])
        passed = sum(figures[r] < TARGET_MS for r in LATENCY_ROWS)
        ratios = ", ".join(
            f"{kind} "
            + _ratio(figures[f"{kind} inserts/s, batch"], figures[f"{kind} inserts/s, per call"])
            for kind in ("solution", "profile", "memory")
        )
        print(
            f"{column}: {passed}/{len(LATENCY_ROWS)} under {TARGET_MS:g} ms; slowest {worst} "
            f"{figures[worst]:.3f} ms = {TARGET_MS / figures[worst]:.1f}x under the target; "
            f"batch over per call: {ratios}"
        )
    kinds = {c.split("/")[0] for c in columns}
    if {"sqlite", "postgres"} <= kinds:
        for layout in sorted({c.split("/")[1] for c in columns}):
            lite, pg = results.get(f"sqlite/{layout}"), results.get(f"postgres/{layout}")
            if lite and pg:
                pairs = ", ".join(
                    f"{kind} per call "
                    + _ratio(pg[f"{kind} inserts/s, per call"], lite[f"{kind} inserts/s, per call"])
                    + ", batch "
                    + _ratio(pg[f"{kind} inserts/s, batch"], lite[f"{kind} inserts/s, batch"])
                    for kind in ("solution", "profile", "memory")
                )
                print(f"postgres / sqlite inserts ({layout}): {pairs}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="solutions (and profiles)")
    parser.add_argument("--pg-dsn", help="PostgreSQL server (admin DSN); default: start one")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--layouts", default="one,ten", help="one and/or ten definitions")
    parser.add_argument("--repeat", type=int, default=50, help="calls per latency figure")
    parser.add_argument(
        "--sample", type=int, default=2000, help="rows per kind stored one call at a time"
    )
    args = parser.parse_args()
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]
    layouts = {"one": 1, "ten": 10}
    chosen = [name.strip() for name in args.layouts.split(",") if name.strip()]
    if args.n < 100 or any(name not in layouts for name in chosen):
        parser.error("--n must be at least 100 and --layouts a list of: one, ten")
    results: dict[str, dict[str, float]] = {}
    with _stores(kinds, args.pg_dsn) as makers:
        for kind, make in makers.items():
            for layout in chosen:
                opener = make()
                began = time.perf_counter()
                with opener() as store:
                    data = fill(store, args.n, layouts[layout], args.sample)
                filled = time.perf_counter() - began
                # Measured as a new process sees the database: opened again after the load.
                with opener() as store:
                    figures = measure(store, data, args.repeat)
                results[f"{kind}/{layout}"] = {**figures, **data["rates"]}
                print(f"[{kind}/{layout}: filled in {filled:.0f} s]", file=sys.stderr)
    _print(results, args.n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

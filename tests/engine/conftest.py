"""Fixtures for engine tests: the silu CPU task, a scripted LLM stand-in, stores."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.engine.beam import BeamSearch
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.runs import prepare_run
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import KernelStore, RunRecord
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task
from tests.bench import quick_bench
from tests.engine import kernels
from tests.llm_standin.process import StandinProcess, StartStandin, standin_starter
from tests.pg_server import create_database

REPO = Path(__file__).resolve().parents[2]
TASK_PATH = REPO / "examples/cpu/nkibench/reference/silu_M512_N1024_numpy_0.py"
KERNEL_PATH = REPO / "examples/cpu/nkibench/kernels/silu_M512_N1024_0.py"
KEY_ENV = "ACCELOPT_ENGINE_TEST_KEY"
KEY = "standin-engine-key-5d2e"

# Small and quick: two seeds, three timed runs, one round; a timeout short enough for the
# hanging kernel, long enough for a start on a host busy with the parallel half of the suite.
FAST_BENCH = quick_bench(
    seeds=[0, 1],
    processes=(1, 2),
    max_measurement_rounds=1,
    max_timing_seconds=1.0,
    timeout_seconds=10.0,
    memory_limit_mb=1024,
)


@pytest.fixture(scope="session")
def silu_task() -> Task:
    return load_task(TASK_PATH)


@pytest.fixture(scope="session")
def silu_baseline(silu_task: Task) -> Solution:
    return load_solution(KERNEL_PATH, silu_task)


BOTH_STORES = pytest.mark.parametrize(
    "store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
"""Runs a test on SQLite and on PostgreSQL. The engine talks to the store's interface only,
which the store contract suite checks on every store, so the engine's whole-run tests take
SQLite unless a test marks itself (the widest ones do, to keep a real server in the loop)."""


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KernelStore]:
    if getattr(request, "param", "sqlite") == "sqlite":
        opened: KernelStore = SqliteStore(tmp_path / "kernels.db")
    else:
        admin = request.getfixturevalue("pg_admin_dsn")
        dsn = create_database(admin, f"engine_{uuid.uuid4().hex[:10]}")
        opened = PostgresStore(dsn, init_schema=True)
    try:
        yield opened
    finally:
        opened.close()


OLD_SLOT: dict[str, Any] = {
    "iteration": 1,
    "beam_index": 0,
    "plan_index": 0,
    "attempt_index": 0,
    "parent_id": "p",
    "parent_latency_ms": 10.0,
    "status": "PASSED",
    "solution_id": "s",
    "source_hash": "h",
    "latency_ms": 2.0,
}
"""A passed attempt as a checkpoint written before flags, intervals and ties stored it: 5x
over its parent (10 ms -> 2 ms), of an initial kernel "i" at 10 ms."""
OLD_INITIAL: dict[str, Any] = {
    "solution_id": "i",
    "latency_ms": 10.0,
    "source_hash": "hi",
    "branch": "initial",
}


def text(reply: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "text", "text": reply, **extra}


def executor_with_hang() -> list[dict[str, Any]]:
    """The cycle once with a hanging kernel in it, then the plain cycle over and over."""
    return [*executor_cycle(), text(kernels.reply(kernels.HANG)), *executor_cycle() * 6]


def executor_cycle() -> list[dict[str, Any]]:
    """One of each behaviour; faster, slower, wrong, broken, hanging, no code."""
    return [
        text(kernels.reply(kernels.FAST)),
        text(kernels.reply(kernels.SLOWER)),
        text(kernels.reply(kernels.MEDIUM)),
        text(kernels.reply(kernels.WRONG)),
        text(kernels.reply(kernels.SYNTAX_ERROR)),
        text(kernels.NO_CODE),
        text(kernels.reply(kernels.CRASH)),
        text(kernels.reply(kernels.SLOWER, " (second take)")),
    ]


def summary(n: int) -> dict[str, Any]:
    item = {
        "title": f"lesson-{n:03d}",
        # Names np.exp, which every scripted pair's changed lines call: a stored lesson must
        # name something its pair's diff touches (engine.lesson_filter).
        "strategy": f"strategy number {n}: avoid per-row Python work, one np.exp for all rows",
        "pseudocode": "for row: f(row)  ->  f(all rows at once)",
    }
    return text(json.dumps(item))


def build_script(
    *,
    plans: int = 40,
    executor: list[dict[str, Any]] | None = None,
    summaries: int = 40,
    faults: bool = True,
    latency_s: float = 0.0,
) -> dict[str, Any]:
    # Each reply lists distinct plans (what the "distinct" mode asks for; "independent" mode
    # takes a reply whole as its one plan).
    planner = [
        text(
            json.dumps(
                [
                    f"Plan {n}.{k}: vectorize the row loop in blocks of {64 << k} rows and "
                    "stay in float32."
                    for k in range(4)
                ]
            )
        )
        for n in range(plans)
    ]
    executor_replies = executor if executor is not None else executor_cycle() * 6
    summarizer = [summary(n) for n in range(summaries)]
    if faults:
        planner = [
            {"kind": "status", "status": 429, "retry_after": "0"},
            {"kind": "status", "status": 500},
            {"kind": "garbage"},
            *planner,
        ]
        executor_replies = [{"kind": "status", "status": 503}, *executor_replies]
        summarizer = [text("no json here at all"), *summarizer]
    return {
        "api_key": KEY,
        "latency_s": latency_s,
        "roles": {
            "planner": {"replies": planner, "when_exhausted": "repeat_last"},
            "executor": {"replies": executor_replies, "when_exhausted": "repeat_last"},
            "summarizer": {"replies": summarizer, "when_exhausted": "repeat_last"},
        },
    }


def one_plan_script(plan: str, executor: list[dict[str, Any]]) -> dict[str, Any]:
    """A script whose planner always answers `plan`, whose executor plays `executor` (its last
    reply over and over) and whose summarizer finds nothing to learn."""
    return {
        "api_key": KEY,
        "roles": {
            "planner": {"replies": [text(plan)], "when_exhausted": "repeat_last"},
            "executor": {"replies": executor, "when_exhausted": "repeat_last"},
            "summarizer": {"replies": [text("{}")], "when_exhausted": "repeat_last"},
        },
    }


def write_preset(path: Path, benchmark: dict[str, Any] | None = None, **fields: Any) -> Path:
    """A preset file (what `accelopt optimize --preset` reads) of `fields`, the benchmark
    FAST_BENCH's settings with `benchmark`'s changes."""
    preset = {**fields, "benchmark": {**FAST_BENCH.model_dump(mode="json"), **(benchmark or {})}}
    path.write_text(json.dumps(preset))
    return path


def one_plan_preset(path: Path, **fields: Any) -> Path:
    """A preset for an `accelopt optimize` process of its own: one iteration, beam and plan,
    one lesson (unless `fields` say otherwise), and attempts timed out at 30 s only, so that a
    busy host (tests run in parallel) does not turn a slow attempt into a TIMEOUT."""
    search = {"iterations": 1, "beam": 1, "plans": 1, "topk": 1} | fields
    return write_preset(path, {"timeout_seconds": 30.0}, **search)


def models_config(base_url: str, path: Path, **role_overrides: Any) -> Path:
    config = {
        "default": {
            "base_url": base_url,
            "api_key_env": KEY_ENV,
            "max_retries": 3,
            "retry_base_s": 0.01,
            "retry_max_s": 0.05,
            "timeout_s": 30,
            "concurrency": 4,
        },
        "planner": {"model": "planner"},
        "executor": {"model": "executor"},
        "summarizer": {"model": "summarizer"},
        "prices": {
            "planner": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
            "executor": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
            "summarizer": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        },
    }
    for role, overrides in role_overrides.items():
        config[role].update(overrides)
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def llm_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


@pytest.fixture
def start_standin() -> Iterator[StartStandin]:
    with standin_starter() as start:
        yield start


ScriptedSettings = Callable[..., tuple[StandinProcess, OptimizeConfig]]


@pytest.fixture
def scripted_settings(
    start_standin: StartStandin, llm_key: str, tmp_path: Path
) -> ScriptedSettings:
    """Starts a stand-in playing a script; gives it, with run settings (`settings(**fields)`)
    whose models file (`models`: changes to its roles) points at it, its key in the
    environment."""

    def start(
        script: dict[str, Any], *, models: dict[str, Any] | None = None, **fields: Any
    ) -> tuple[StandinProcess, OptimizeConfig]:
        standin = start_standin(script)
        path = models_config(standin.base_url, tmp_path / "models.json", **(models or {}))
        return standin, settings(path, **fields)

    return start


def run_engine(
    store: KernelStore,
    task: Task,
    baseline: Solution,
    config: OptimizeConfig,
    output_dir: Path | None = None,
) -> tuple[str, RunRecord]:
    run_id = prepare_run(store, task, baseline, config)
    run = asyncio.run(BeamSearch(store, run_id, output_dir=output_dir).run())
    return run_id, run


def settings(models: Path, **fields: Any) -> OptimizeConfig:
    base: dict[str, Any] = {
        "iterations": 2,
        "beam": 2,
        "plans": 2,
        "attempts": 2,
        "topk": 2,
        "exp_n": 3,
        "benchmark": FAST_BENCH,
        "models_config": str(models),
        "workers": 2,
    }
    return OptimizeConfig(**{**base, **fields})

"""What the roles see of the run around them, in a real loop (the scripted stand-in LLM, real
cpu evaluations, a real store): one hardware text and one contract for every role and every
resume; each planner shown the plans given to the other beam kernels of its iteration; the
summarizer shown the memory and able to replace an item with a refined one."""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace
from typing import Any, cast

from accelopt_mcp.engine.beam import BeamSearch, _Opening
from accelopt_mcp.engine.checkpoint import Checkpoint, RunSpec
from accelopt_mcp.engine.checkpoint_writer import CheckpointWriter
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.engine.profile_cache import ProfileCache
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.engine.selection import BeamEntry
from accelopt_mcp.llm import Budget
from accelopt_mcp.models import Environment, Evaluation, Solution, Task
from accelopt_mcp.store.base import KernelStore
from tests.engine import kernels
from tests.engine.conftest import KEY, ScriptedSettings, run_engine, text

PLANS = [
    "Plan A: vectorize the row loop over the whole array in float32.",
    "Plan B: fuse the exp and the divide in place with out= buffers.",
    "Plan C: negate into one preallocated buffer and reuse it for the exp.",
]
REFINED = {
    "title": "One np.exp over all rows, in place",
    "strategy": "Call np.exp once on the whole float32 array with out=, instead of per row: "
    "refines the first lesson with the in-place buffer.",
    "pseudocode": "for row: np.exp(row)  ->  np.exp(x, out=buf)",
    "refines": 1,
}


def _section(content: str, title: str) -> str:
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=\n## |\Z)", content, re.S | re.M)
    assert found is not None, f"no section {title!r}"
    return found.group(1).strip()


def test_one_hardware_text_the_round_and_a_refined_lesson(
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
) -> None:
    lesson = {
        "title": "lesson-000",
        "strategy": "avoid per-row Python work, one np.exp for all rows",
        "pseudocode": "for row: f(row)  ->  f(all rows at once)",
    }
    script: dict[str, Any] = {
        "api_key": KEY,
        "roles": {
            "planner": {"replies": [text(p) for p in PLANS], "when_exhausted": "repeat_last"},
            "executor": {
                "replies": [
                    text(kernels.reply(kernels.MEDIUM)),
                    text(kernels.reply(kernels.FAST)),
                    text(kernels.reply(kernels.FAST, " (second take)")),
                ],
                "when_exhausted": "repeat_last",
            },
            "summarizer": {
                "replies": [text(json.dumps(lesson)), text(json.dumps(REFINED))],
                "when_exhausted": "repeat_last",
            },
        },
    }
    standin, config = scripted_settings(
        script,
        iterations=2,
        beam=2,
        plans=1,
        attempts=1,
        topk=2,
        plan_mode="independent",
    )
    run_id, run = run_engine(store, silu_task, silu_baseline, config)
    assert run.status == "completed", run.error
    _, _, checkpoint = load_run(store, run_id)
    hardware, contract = checkpoint.prompt_hardware, checkpoint.prompt_contract
    assert hardware and contract and "One core" in contract

    requests = [r for r in standin.requests() if r["outcome"] == "text"]
    by_role: dict[str, list[list[dict[str, str]]]] = {}
    for r in requests:
        by_role.setdefault(r["role"], []).append(r["body"]["messages"])
    assert set(by_role) == {"planner", "executor", "summarizer"}, [
        (s.key, s.status, s.speedup_ci_low, s.error) for s in checkpoint.slots.values()
    ] + [(r["role"], r["outcome"]) for r in standin.requests()]
    # One hardware text and one contract, whoever is asked.
    for role, chats in by_role.items():
        for messages in chats:
            assert contract in messages[0]["content"], role
            if role != "summarizer":
                assert _section(messages[-1]["content"], "Hardware") == hardware, role

    # Iteration 2 has two beam kernels: the second planner call is shown the first's plan.
    planners = [m[-1]["content"] for m in by_role["planner"]]
    assert len(planners) == 3
    round_title = "Plans given to the other beam kernels this iteration"
    assert _section(planners[1], round_title) == "(none yet)"
    assert _section(planners[2], round_title) == f"1. {PLANS[1]}"

    # The summarizer of iteration 2 saw iteration 1's lesson and refined it: the old item
    # left the working memory, the new one holds both.
    summaries = [m[-1]["content"] for m in by_role["summarizer"]]
    assert len(summaries) == 2
    assert _section(summaries[0], "Lessons already in memory") == "(none yet)"
    assert "1. lesson-000" in _section(summaries[1], "Lessons already in memory")
    items = store.recent_experiences(run_id=run_id, limit=10)
    assert [item.title for item in items] == [REFINED["title"]]
    memory = OptimizationMemory(store, run_id=run_id, namespace="cpu", capacity=5)
    assert [item.title for item in memory.working_set()] == [REFINED["title"]]
    removed = [i for i in memory.learned() if i.removed]
    assert [item.title for item in removed] == ["lesson-000"]


class _Writer:
    def __init__(self) -> None:
        self.saves = 0

    async def save(self, budget: Budget, **fields: Any) -> None:
        self.saves += 1


class _Profiles:
    def __init__(self, environment: Environment) -> None:
        self.environment = environment

    async def stored_evaluation(self, solution_id: str) -> Evaluation:
        return Evaluation(
            status="RUNTIME_ERROR", environment=self.environment, timestamp="2026-01-01T00:00Z"
        )


def test_a_resumed_run_shows_the_text_it_started_with(silu_task: Task) -> None:
    """Built once from the initial kernel's evaluation, with the pool's cores; a resume reads
    it back, even when the stored evaluations it would be built from now say otherwise (a
    profile reused from another session, another pinning)."""
    spec = cast(
        RunSpec,
        SimpleNamespace(optimize=OptimizeConfig(backend="cpu"), task=silu_task),
    )
    started = Environment(
        hardware="cpu/x86_64/Example CPU 9000",
        libs={"isa": "avx2 fma", "cores_per_evaluation": "2", "numpy": "2.4.6"},
    )
    checkpoint = Checkpoint(
        initial=BeamEntry(solution_id="i", latency_ms=1.0, source_hash="h", branch="initial")
    )
    writer = _Writer()
    search = BeamSearch(cast(KernelStore, None), "run")

    def texts(environment: Environment) -> tuple[str, str]:
        return asyncio.run(
            search._prompt_texts(
                _Opening(
                    spec,
                    LiveRun(checkpoint),
                    cast(CheckpointWriter, writer),
                    Budget(),
                    cast(ProfileCache, _Profiles(environment)),
                ),
                {"workers": 2, "cores": 1},
            )
        )

    hardware, contract = texts(started)
    assert "- Cores: 1 per evaluation (pinned); BLAS threads: 1" in hardware  # the pool's
    assert "AVX2" in hardware and "One core" in contract and writer.saves == 1
    resumed = Checkpoint.model_validate(checkpoint.model_dump(mode="json"))
    checkpoint = resumed
    other = Environment(hardware="cpu/aarch64/Other", libs={"cores_per_evaluation": "8"})
    assert texts(other) == (hardware, contract)
    assert writer.saves == 1  # read back, not built again

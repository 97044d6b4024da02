"""A slow -> fast pair becomes one memory item per run: a pair that stays the best (or the
worst) move for several iterations is summarized the first time only, with no summarizer call
after that. A real loop: the scripted stand-in LLM, real cpu evaluations, a real store."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from accelopt_mcp.engine.memory import DuplicatePair, add_experience
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import ExperienceIn, KernelStore
from accelopt_mcp.store.sqlite import SqliteStore
from tests.engine import kernels
from tests.engine.conftest import ScriptedSettings, build_script, run_engine, text
from tests.store.lineage_samples import DEF, store_family


def test_a_pair_met_again_in_a_later_iteration_is_not_summarized_again(
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
) -> None:
    # Every attempt is slower than the initial kernel, so the beam keeps it, and the executor
    # writes the same two kernels in both iterations: the same two negative pairs each time.
    much_slower = kernels.SLOWER.replace("range(3)", "range(12)")
    replies = [text(kernels.reply(kernels.SLOWER)), text(kernels.reply(much_slower))]
    standin, config = scripted_settings(
        build_script(faults=False, executor=replies * 2),
        models={"executor": {"concurrency": 1}},
        iterations=2,
        beam=1,
        plans=2,
        attempts=1,
        topk=2,
    )
    run_id, run = run_engine(store, silu_task, silu_baseline, config)
    assert run.status == "completed", run.error

    items = store.recent_experiences(run_id=run_id, limit=100)
    pairs = Counter((item.slow_solution_id, item.fast_solution_id) for item in items)
    assert items and max(pairs.values()) == 1, pairs
    assert {item.iteration for item in items} == {1}  # learned when first met
    summarizer_calls = sum(1 for r in standin.requests() if r["role"] == "summarizer")
    assert summarizer_calls == len(items)


def test_a_pair_held_by_a_live_item_is_refused_by_hand_too(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "k.db") as store:
        family = store_family(store)
        lesson = ExperienceIn(
            definition_name=DEF,
            title="fuse the loops",
            strategy="one pass",
            slow_solution_id=family.parent,
            fast_solution_id=family.child[:8],  # a prefix, as the CLI prints ids
        )
        first = add_experience(store, lesson)
        with pytest.raises(DuplicatePair, match=first.id):
            add_experience(store, lesson.model_copy(update={"title": "again"}))
        # The other direction is another pair; once the first is removed, it can be replaced.
        swapped = {"slow_solution_id": family.child, "fast_solution_id": family.parent}
        add_experience(store, lesson.model_copy(update=swapped))
        assert store.remove_experience(first.id)
        assert add_experience(store, lesson).fast_solution_id == family.child

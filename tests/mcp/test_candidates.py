"""profile_kernel with `candidates`: a round of several candidates of one parent in ONE call and
one interleaved evaluation, on the real cpu backend. Each candidate is stored and linked as a
single call would store it, with its speedup over the parent, interval and verdict; a candidate
that fails (syntax, wrong values) never fails the others; bad requests say what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from accelopt_mcp.profiling import CANDIDATES_NO_BREAKDOWN, MAX_CANDIDATES
from tests.mcp.conftest import BENCH, SILU_FAST, SILU_SLOW, SILU_TASK
from tests.mcp.helpers import fails, ok

pytestmark = pytest.mark.anyio

TASK = str(SILU_TASK)
FAST_SOURCE = json.loads(SILU_FAST.read_text())["sources"][0]["content"]
BROKEN = "import numpy as np\n\n\ndef run(x):\n    return (x\n"
WRONG = "import numpy as np\n\n\ndef run(x):\n    return np.zeros_like(x)\n"
"""Runs, fast, and is wrong: a candidate that must come back INCORRECT, not as a winner."""


def profile(**arguments: Any) -> dict[str, Any]:
    return {"task_path": TASK, "iterations": 3, "benchmark": BENCH, **arguments}


async def test_a_round_of_candidates_in_one_call(client: Client) -> None:
    base = await ok(client, "profile_kernel", profile(kernel_path=str(SILU_SLOW)))
    root = base["solution_id"]
    plans = [{"plan": f"plan {n}"} for n in range(4)]
    round_ = await ok(
        client,
        "profile_kernel",
        profile(
            parent_id=root[:8],
            candidates=[
                {"kernel_source": FAST_SOURCE, "name": "vec", "evolve_metadata": plans[0]},
                {"kernel_source": f"# in place\n{FAST_SOURCE}", "evolve_metadata": plans[1]},
                {"kernel_source": BROKEN, "name": "broken", "evolve_metadata": plans[2]},
                {"kernel_source": WRONG, "name": "wrong", "evolve_metadata": plans[3]},
            ],
        ),
    )
    assert round_["parent_id"] == root and round_["interleaved"] is True
    vec, copy, broken, wrong = round_["candidates"]
    for report in (vec, copy):
        assert report["status"] == "PASSED", report
        assert report["parent_id"] == root and report["parent_timing"] == "interleaved"
        # A Python row loop against NumPy in the same rounds: ~3x quiet, ~2.6x busy.
        assert report["speedup_vs_parent"] > 1.2 and report["speedup_vs_parent_verdict"] == "faster"
        assert report["speedup_vs_parent_ci_low"] <= report["speedup_vs_parent"]
        assert report["parent_latency_ms"] == pytest.approx(round_["parent_latency_ms"])
        assert report["initial_solution_id"] == root
    assert vec["solution_name"] == "vec"
    assert broken["status"] == "COMPILE_ERROR" and "line 5" in broken["log"]
    assert wrong["status"].startswith("INCORRECT") and wrong["correct"] is False
    assert round_["best"] in (vec["solution_id"], copy["solution_id"])
    # Pairs: parent and the two that passed, each pair once.
    assert len(round_["pairs"]) == 3
    assert {"vec", "parent"} <= {p["kernel"] for p in round_["pairs"]} | {
        p["baseline"] for p in round_["pairs"]
    }
    assert "faster" in round_["summary"] and "COMPILE_ERROR" in round_["summary"]

    # Stored as single calls store them: linked, notes kept, the same-round figure used.
    for report, plan in zip(round_["candidates"], plans, strict=True):
        stored = await ok(client, "get_solution", {"solution_id": report["solution_id"]})
        assert stored["summary"]["parent_id"] == root and stored["evolve_metadata"] == plan
    lineage = await ok(client, "solution_lineage", {"solution_id": vec["solution_id"]})
    assert lineage["solution"]["speedup_vs_parent_measured"] == "same_rounds"
    assert lineage["solution"]["speedup_vs_parent"] == pytest.approx(vec["speedup_vs_parent"])


async def test_a_round_refuses_what_it_cannot_do(client: Client) -> None:
    one = {"kernel_source": FAST_SOURCE}
    await fails(client, "profile_kernel", profile(candidates=[one]), "give parent_id")
    base = await ok(client, "profile_kernel", profile(kernel_path=str(SILU_SLOW)))
    parent = base["solution_id"]
    await fails(
        client,
        "profile_kernel",
        profile(parent_id=parent, candidates=[one], kernel_source=FAST_SOURCE),
        "kernel_source per candidate",
    )
    await fails(
        client,
        "profile_kernel",
        profile(parent_id=parent, candidates=[one] * (MAX_CANDIDATES + 1)),
        f"1 to {MAX_CANDIDATES} candidates",
    )
    await fails(
        client,
        "profile_kernel",
        profile(parent_id=parent, candidates=[{"name": "x"}]),
        "candidates[0]: give exactly one of kernel_path and kernel_source",
    )
    await fails(
        client,
        "profile_kernel",
        profile(parent_id=parent, candidates=[]),
        "1 to 7 candidates",
    )
    # No candidate of a round gets a breakdown (the round is one interleaved comparison):
    # asked for either way, it is refused in one line, before anything runs or is stored.
    before = await ok(client, "list_solutions", {"definition_name": "silu_n1024"})
    for asked in ({"breakdown": True}, {"benchmark": {**BENCH, "breakdown": True}}):
        text = await fails(
            client,
            "profile_kernel",
            profile(parent_id=parent, candidates=[{"kernel_source": WRONG}], **asked),
            CANDIDATES_NO_BREAKDOWN,
        )
        assert "\n" not in text.strip()
    assert await ok(client, "list_solutions", {"definition_name": "silu_n1024"}) == before


async def test_a_breakdown_is_returned_when_asked_for(client: Client) -> None:
    plain = await ok(client, "profile_kernel", profile(kernel_path=str(SILU_SLOW), store=False))
    assert plain["breakdown"] == []
    traced = await ok(
        client, "profile_kernel", profile(kernel_path=str(SILU_SLOW), store=False, breakdown=True)
    )
    assert traced["status"] == "PASSED"
    # The slow silu loops over rows in Python: the busiest parts are its own source lines.
    lines = [entry["what"] for entry in traced["breakdown"]]
    assert lines and all(entry["ms"] >= 0 for entry in traced["breakdown"])
    assert any(what.startswith("L") and ":" in what for what in lines), lines


async def test_the_library_refuses_a_breakdown_in_a_round(tmp_path: Path) -> None:
    # Not only the tool: the library's own entry point says it, before the store is read.
    from accelopt_mcp.models import BenchmarkConfig
    from accelopt_mcp.profiling import Candidate, profile_candidates
    from accelopt_mcp.store.sqlite import SqliteStore
    from accelopt_mcp.tasks.kernels import solution_from_source
    from accelopt_mcp.tasks.loader import load_task

    task = load_task(SILU_TASK)
    candidate = Candidate(solution=solution_from_source(FAST_SOURCE, task.definition.name))
    store = SqliteStore(tmp_path / "k.db")
    with pytest.raises(ValueError) as raised:
        profile_candidates(
            task,
            [candidate],
            parent_id="0" * 64,
            store=store,
            config=BenchmarkConfig(breakdown=True),
        )
    assert str(raised.value) == CANDIDATES_NO_BREAKDOWN
    assert store.list_solutions(definition_name=task.definition.name) == []

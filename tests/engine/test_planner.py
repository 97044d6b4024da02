"""The planner's two modes: reading a reply of N plans, filling in missing ones, and how
diverse a set of plans is."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from accelopt_mcp.engine.planner import (
    distinct_plans,
    parse_plan_list,
    plan_diversity,
    propose_plans,
)
from accelopt_mcp.engine.prompts import planner_messages
from accelopt_mcp.llm import LlmClient, MalformedReply, role_configs_from_dict
from accelopt_mcp.models import Solution, Task
from tests.engine.conftest import KEY, KEY_ENV, text
from tests.llm_standin.process import StandinProcess, StartStandin

VECTORIZE = "Replace the Python row loop with one vectorized ufunc chain over the whole array."
FLOAT32 = "Stay in float32 throughout: drop the astype(float64) round trip of every row."
IN_PLACE = "Compute exp, add and divide in place with out= so that no temporaries are made."
BLOCKS = "Process the array in blocks of 64 rows so each block stays in the L2 cache."


@pytest.mark.parametrize(
    "reply",
    [
        f"```json\n{json.dumps([VECTORIZE, FLOAT32])}\n```",
        f"Two ideas.\n{json.dumps({'plans': [VECTORIZE, FLOAT32]})}\nGood luck.",
        json.dumps([{"title": "Vectorize", "plan": VECTORIZE}, {"description": FLOAT32}]),
        f"Here they are.\n\n**Plan 1:** {VECTORIZE}\n\n**Plan 2:** {FLOAT32}\n",
        f"## Plan 1\n{VECTORIZE}\n\n## Plan 2\n{FLOAT32}",
    ],
)
def test_plan_lists_are_read_from_json_or_plan_headers(reply: str) -> None:
    plans = parse_plan_list(reply)
    assert len(plans) == 2
    assert plans[0].endswith(VECTORIZE) and plans[1] == FLOAT32


def test_a_prose_reply_is_one_plan_and_stray_lists_are_not_plans() -> None:
    # A shape in prose is a JSON list, but no list of plans.
    reply = "Tile x of shape [512, 1024] into row blocks and vectorize each block."
    assert parse_plan_list(reply) == [reply]
    # A numbered list of steps inside one plan stays one plan.
    steps = "Rewrite the kernel:\n1. drop the loop\n2. stay in float32\n3. use out="
    assert parse_plan_list(steps) == [steps]
    # A single "Plan N:" reply (as a one-plan planner writes it) is kept whole.
    single = f"Plan 3: {VECTORIZE}"
    assert parse_plan_list(single) == [single]
    with pytest.raises(MalformedReply):
        parse_plan_list("   ")


def test_duplicates_are_dropped_on_normalised_text() -> None:
    plans = [VECTORIZE, VECTORIZE.upper(), VECTORIZE.replace(" ", "  ") + "!", FLOAT32, ""]
    assert distinct_plans(plans) == [VECTORIZE, FLOAT32]


def test_plan_diversity() -> None:
    assert plan_diversity([VECTORIZE]) is None
    assert plan_diversity([]) is None
    assert plan_diversity([VECTORIZE, VECTORIZE]) == 0.0
    # Stop words alone make no similarity.
    assert plan_diversity(["the kernel and the plan", "fuse loops"]) == 1.0
    varied = plan_diversity([VECTORIZE, FLOAT32, IN_PLACE, BLOCKS])
    near_copies = plan_diversity([VECTORIZE, VECTORIZE + " Then fuse.", VECTORIZE + " Tile."])
    assert varied is not None and near_copies is not None
    assert 0.7 < varied <= 1.0 and near_copies < 0.25


def _configs(base_url: str) -> Any:
    return role_configs_from_dict(
        {
            "default": {
                "base_url": base_url,
                "api_key_env": KEY_ENV,
                "max_retries": 1,
                "retry_base_s": 0.01,
                "retry_max_s": 0.02,
                "timeout_s": 10,
            },
            "planner": {"model": "planner"},
        }
    )


def _propose(standin: StandinProcess, messages: list[Any], n: int) -> list[str]:
    async def go() -> list[str]:
        async with LlmClient(_configs(standin.base_url)) as client:
            return await propose_plans(client, messages, n)

    return asyncio.run(go())


def _planner_script(*replies: str) -> dict[str, Any]:
    return {"api_key": KEY, "roles": {"planner": {"replies": [text(r) for r in replies]}}}


def test_one_call_gives_n_distinct_plans(
    start_standin: StartStandin, llm_key: str, silu_task: Task, silu_baseline: Solution
) -> None:
    standin = start_standin(_planner_script(json.dumps([VECTORIZE, FLOAT32, IN_PLACE])))
    messages = planner_messages(
        "cpu", silu_task, silu_baseline, None, [], random.Random(0), n_plans=3
    )
    assert "3 distinct optimization plans" in messages[1].content
    assert "JSON list of 3 strings" in messages[0].content
    assert _propose(standin, messages, 3) == [VECTORIZE, FLOAT32, IN_PLACE]
    assert len(standin.requests()) == 1


def test_missing_and_duplicate_plans_are_filled_by_one_follow_up(
    start_standin: StartStandin, llm_key: str, silu_task: Task, silu_baseline: Solution
) -> None:
    first = json.dumps([VECTORIZE, VECTORIZE.lower(), FLOAT32])
    # The follow-up repeats one plan already made and adds two new ones; one is enough.
    second = json.dumps([FLOAT32, IN_PLACE, BLOCKS])
    standin = start_standin(_planner_script(first, second))
    messages = planner_messages(
        "cpu", silu_task, silu_baseline, None, [], random.Random(0), n_plans=3
    )
    assert _propose(standin, messages, 3) == [VECTORIZE, FLOAT32, IN_PLACE]
    requests = standin.requests()
    assert len(requests) == 2
    follow_up = requests[1]["body"]["messages"]
    assert [m["role"] for m in follow_up] == ["system", "user", "assistant", "user"]
    assert follow_up[2]["content"] == first
    ask = follow_up[3]["content"]
    assert "2 distinct plan(s) for this kernel so far; 1 more are needed" in ask
    assert f"1. {VECTORIZE}" in ask and f"2. {FLOAT32}" in ask


def test_a_failed_follow_up_leaves_the_plans_of_the_first_call(
    start_standin: StartStandin, llm_key: str, silu_task: Task, silu_baseline: Solution
) -> None:
    script = _planner_script(json.dumps([VECTORIZE]))
    script["roles"]["planner"]["replies"].append({"kind": "status", "status": 500})
    script["roles"]["planner"]["when_exhausted"] = "repeat_last"
    standin = start_standin(script)
    messages = planner_messages(
        "cpu", silu_task, silu_baseline, None, [], random.Random(0), n_plans=2
    )
    assert _propose(standin, messages, 2) == [VECTORIZE]


def test_a_resumed_kernel_asks_only_for_the_plans_it_lacks(
    start_standin: StartStandin, llm_key: str, silu_task: Task, silu_baseline: Solution
) -> None:
    standin = start_standin(_planner_script(json.dumps([VECTORIZE, IN_PLACE, BLOCKS])))
    messages = planner_messages(
        "cpu", silu_task, silu_baseline, None, [], random.Random(0), n_plans=3
    )

    async def go() -> list[str]:
        async with LlmClient(_configs(standin.base_url)) as client:
            return await propose_plans(client, messages, 2, known=[VECTORIZE])

    assert asyncio.run(go()) == [IN_PLACE, BLOCKS]
    (request,) = standin.requests()
    ask = request["body"]["messages"][-1]["content"]
    assert "1 distinct plan(s) for this kernel so far; 2 more are needed" in ask
    assert f"1. {VECTORIZE}" in ask

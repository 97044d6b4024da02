"""The client's audit trail and budget reservations against the stand-in server and a real
SQLite store: the in-flight row written before the request, updated when it ends; a call
cancelled or killed mid-flight still counted; concurrent calls refused before they are sent
once the reservations reach a cap."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.llm import (
    DEFAULT_OUTPUT_TOKENS,
    Budget,
    BudgetExceeded,
    LlmClient,
    estimate_tokens,
    parse_json_list,
)
from accelopt_mcp.llm.messages import reserved_prompt_tokens
from accelopt_mcp.models import LlmCallIn
from accelopt_mcp.store.base import RunRecord
from accelopt_mcp.store.sqlite import SqliteStore
from tests.llm.conftest import TEST_KEY_ENV, configs_for
from tests.llm_standin.process import StandinProcess, StartStandin
from tests.store.samples import make_definition

REPO = Path(__file__).resolve().parents[2]
FAKE_KEY = "sk-ant-api03-FAKEFAKEFAKE0123456789abcdefghijklmno"
SYSTEM = "ROLE=planner. You propose optimization plans."


def _messages(user: str = "make this matmul faster please") -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _script(*replies: dict[str, Any], **role: Any) -> dict[str, Any]:
    return {"roles": {"planner": {"marker": "ROLE=planner", "replies": list(replies), **role}}}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    with SqliteStore(tmp_path / "kernels.db") as opened:
        definition = make_definition()
        opened.upsert_definition(definition)
        opened.create_run(RunRecord(id="run-a", definition_name=definition.name))
        yield opened


async def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


def test_a_call_is_in_flight_in_the_ledger_until_its_reply_comes(
    start_standin: StartStandin, test_key: str, store: SqliteStore
) -> None:
    standin = start_standin(_script({"kind": "delay", "seconds": 0.6, "text": "tile by 64"}))
    configs = configs_for(standin.base_url)
    user = f"speed this up; my other key is {FAKE_KEY} and yours is {test_key}"

    async def go() -> tuple[str, dict[str, int], Any]:
        async with LlmClient(configs, ledger=store.add_llm_call, run_id="run-a") as client:
            task = asyncio.create_task(
                client.complete("planner", _messages(user), purpose="plan 1/0")
            )
            await _until(lambda: bool(store.list_llm_calls("run-a")))
            (row,) = store.list_llm_calls("run-a")
            await _until(lambda: client.in_flight()["planner"] == 1)
            waiting = client.in_flight()
            reply = await task
            assert client.in_flight() == {"planner": 0, "executor": 0, "summarizer": 0}
            return row, waiting, reply

    row, waiting, reply = asyncio.run(go())

    assert waiting["planner"] == 1
    assert (row.status, row.purpose, row.tokens_out) == ("in_flight", "plan 1/0", 0)
    assert row.tokens_in == estimate_tokens(len(SYSTEM) + len(user))  # characters / 4
    assert row.started_at is not None and row.finished_at is None
    stored = store.get_llm_call(row.id)
    assert stored is not None and reply.call_id == row.id
    assert (stored.status, stored.ok, stored.reply) == ("ok", True, "tile by 64")
    assert (stored.tokens_in, stored.tokens_out) == (reply.tokens_in, reply.tokens_out)
    assert stored.latency_s >= 0.5 and stored.finished_at is not None
    assert stored.started_at == row.started_at and stored.purpose == "plan 1/0"
    assert stored.messages is not None and stored.messages[0].content == SYSTEM
    prompt = stored.messages[1].content
    assert FAKE_KEY not in prompt and test_key not in prompt
    assert prompt.startswith("speed this up; my other key is ***")
    # What was sent was the prompt as given; only what is stored is redacted.
    (request,) = standin.requests()
    assert request["body"]["messages"][1]["content"] == user


def test_every_attempt_and_reask_is_one_row_with_its_purpose(
    start_standin: StartStandin, test_key: str, store: SqliteStore
) -> None:
    standin = start_standin(
        _script(
            {"kind": "status", "status": 503},
            {"text": "no list here"},
            {"text": '```json\n["tile"]\n```'},
        )
    )
    configs = configs_for(standin.base_url)

    async def go() -> list[Any]:
        async with LlmClient(configs, ledger=store.add_llm_call, run_id="run-a") as client:
            plans, _ = await client.complete_parsed(
                "planner", _messages(), parse_json_list, purpose="plan 2/0"
            )
            return plans

    assert asyncio.run(go()) == ["tile"]
    calls = store.list_llm_calls("run-a")
    assert [(c.status, c.purpose) for c in calls] == [
        ("failed", "plan 2/0"),
        ("ok", "plan 2/0"),
        ("ok", "plan 2/0"),
    ]
    assert "HTTP 503" in (calls[0].error or "")
    assert [store.get_llm_call(c.id).reply for c in calls] == [  # type: ignore[union-attr]
        None,
        "no list here",
        '```json\n["tile"]\n```',
    ]


def _two_concurrent_calls(
    standin: StandinProcess, store: SqliteStore, budget: Budget
) -> tuple[Any, Any]:
    configs = configs_for(standin.base_url, max_tokens=200)

    async def go() -> list[Any]:
        async with LlmClient(
            configs, ledger=store.add_llm_call, run_id="run-a", budget=budget
        ) as client:
            return await asyncio.gather(
                client.complete("planner", _messages(), purpose="plan 1/0"),
                client.complete("planner", _messages(), purpose="plan 1/1"),
                return_exceptions=True,
            )

    first, second = asyncio.run(go())
    return first, second


PROMPT_TOKENS = estimate_tokens(len(SYSTEM) + len("make this matmul faster please"))
RESERVED_PROMPT = reserved_prompt_tokens(len(SYSTEM) + len("make this matmul faster please"), 2)
"""What the budget holds for the prompt of _messages() (the high side of its tokens)."""


def test_reservations_refuse_a_concurrent_call_before_it_is_sent(
    start_standin: StartStandin, test_key: str, store: SqliteStore
) -> None:
    # Room for one call's reservation (its prompt and max_tokens=200 out), not two: the second
    # could not fit even once the first is done, whose reply is as long as it may be.
    cap = RESERVED_PROMPT + 200
    standin = start_standin(_script({"text": "plan", "latency_s": 0.3, "completion_tokens": cap}))
    budget = Budget(max_tokens=cap)

    first, second = _two_concurrent_calls(standin, store, budget)

    assert not isinstance(first, BaseException) and first.text == "plan"
    assert isinstance(second, BudgetExceeded) and not second.reserved_only
    assert "token budget reached" in str(second)
    assert len(standin.requests()) == 1  # the second never left
    assert [c.purpose for c in store.list_llm_calls("run-a")] == ["plan 1/0"]
    usage = budget.usage()
    assert (usage.reserved_tokens, usage.in_flight, usage.calls) == (0, 0, 1)
    assert usage.tokens == first.tokens_in + first.tokens_out <= cap
    assert first.tokens_out == 200  # the stand-in, like a server, keeps to the limit sent


def test_a_call_held_back_by_reservations_waits_for_room(
    start_standin: StartStandin, test_key: str, store: SqliteStore
) -> None:
    standin = start_standin(
        _script({"text": "plan", "latency_s": 0.3}, when_exhausted="repeat_last")
    )
    # One reservation at a time: the second fits once the first has settled, not beside it.
    budget = Budget(max_tokens=2 * RESERVED_PROMPT + 300)

    first, second = _two_concurrent_calls(standin, store, budget)

    assert not isinstance(first, BaseException) and not isinstance(second, BaseException)
    log = standin.log()
    assert log["max_in_flight"]["planner"] == 1  # never both at once
    sent = [r["received_at"] for r in log["requests"]]
    assert len(sent) == 2 and sent[1] - sent[0] >= 0.25  # the second after the first's reply
    assert budget.usage().tokens == first.tokens_in + first.tokens_out + second.tokens_in + (
        second.tokens_out
    )
    assert [c.status for c in store.list_llm_calls("run-a")] == ["ok", "ok"]


def test_a_cancelled_call_is_recorded_interrupted_and_charged_its_prompt(
    start_standin: StartStandin, test_key: str, store: SqliteStore
) -> None:
    standin = start_standin(_script({"kind": "delay", "seconds": 5.0}))
    configs = configs_for(standin.base_url)
    budget = Budget(max_tokens=10_000)

    async def go() -> None:
        async with LlmClient(
            configs, ledger=store.add_llm_call, run_id="run-a", budget=budget
        ) as client:
            task = asyncio.create_task(client.complete("planner", _messages(), purpose="p"))
            await _until(lambda: bool(standin.requests()))  # the server has it
            assert client.in_flight()["planner"] == 1
            assert budget.usage().reserved_tokens > DEFAULT_OUTPUT_TOKENS
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert client.in_flight()["planner"] == 0

    asyncio.run(go())

    (call,) = store.list_llm_calls("run-a")
    assert call.status == "interrupted" and "CancelledError" in (call.error or "")
    usage = budget.usage()
    assert (usage.reserved_tokens, usage.in_flight) == (0, 0)
    assert (
        usage.tokens_in
        == call.tokens_in
        == estimate_tokens(len(SYSTEM) + len("make this matmul faster please"))
    )
    assert len(standin.requests()) == 1


_WORKER = """
import asyncio, json, sys
from accelopt_mcp.llm import LlmClient, role_configs_from_dict
from accelopt_mcp.store.sqlite import SqliteStore

store = SqliteStore(sys.argv[1])
configs = role_configs_from_dict(json.loads(sys.argv[2]))

async def main():
    async with LlmClient(configs, ledger=store.add_llm_call, run_id="run-a") as client:
        await client.complete("planner", json.loads(sys.argv[3]), purpose="attempt 1/0/0/0")

asyncio.run(main())
"""


def test_a_killed_workers_call_is_interrupted_and_counts_on_resume(
    start_standin: StartStandin, test_key: str, store: SqliteStore, tmp_path: Path
) -> None:
    standin = start_standin(_script({"kind": "delay", "seconds": 60.0}))
    settings = {
        "default": {
            "base_url": standin.base_url,
            "api_key_env": TEST_KEY_ENV,
            "model": "priced",
            "max_retries": 0,
        },
        "prices": {"priced": {"input_per_mtok": 10.0, "output_per_mtok": 30.0}},
    }
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    messages = _messages("x " * 2000)
    worker = subprocess.Popen(
        [sys.executable, str(script), store.path, json.dumps(settings), json.dumps(messages)],
        cwd=REPO,
        env={**os.environ, TEST_KEY_ENV: test_key, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not standin.requests():  # the request is out: its row was written before
            assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
            assert time.monotonic() < deadline, "the worker never sent its request"
            time.sleep(0.05)
        os.kill(worker.pid, signal.SIGKILL)  # kill -9 while it waits on the reply
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)

    (left,) = store.list_llm_calls("run-a")
    assert left.status == "in_flight" and left.purpose == "attempt 1/0/0/0"
    prompt = estimate_tokens(sum(len(m["content"]) for m in messages))
    assert left.tokens_in == prompt and left.cost_usd == pytest.approx(prompt * 10.0 / 1e6)

    # The next worker takes the run over: the dead worker's call counts against the budget.
    assert store.mark_interrupted_llm_calls("run-a") == 1
    (totals,) = store.llm_totals("run-a")
    assert (totals.calls, totals.interrupted, totals.tokens_in) == (1, 1, prompt)
    assert totals.cost_usd == pytest.approx(prompt * 10.0 / 1e6)
    resumed = Budget(max_tokens=prompt)
    resumed.charge(totals.tokens_in, totals.tokens_out, totals.cost_usd)
    assert resumed.exhausted() is not None
    stored = store.get_llm_call(left.id)
    assert stored is not None and stored.messages is not None and stored.reply is None


# --------------------------------------------------------------------------- the budget alone


def test_budget_reservations_count_until_settled() -> None:
    budget = Budget(max_tokens=1000, max_usd=1.0)
    first = budget.reserve(600, 0.1)
    with pytest.raises(BudgetExceeded, match="600 more reserved by 1 call") as held_back:
        budget.reserve(500, 0.1)  # 600 + 500 > 1000: it would cross the cap beside the first
    assert held_back.value.reserved_only  # 500 alone fits: it may start once the first ends
    assert budget.room() == (400, pytest.approx(0.9))
    second = budget.reserve(400, 0.1)  # exactly to the cap
    with pytest.raises(BudgetExceeded, match="1000 more reserved by 2 call") as held_back:
        budget.reserve(1, 0.0)
    assert held_back.value.reserved_only
    with pytest.raises(BudgetExceeded):
        budget.check()
    assert budget.exhausted() is None  # nothing spent yet: the run is not out of budget
    budget.settle(first, 100, 20, 0.01)
    budget.settle(first, 100, 20, 0.01)  # twice releases once
    assert budget.usage().reserved_tokens == 400 and budget.usage().tokens == 120
    budget.settle(second, spent=False)  # refused by the server: nothing spent
    usage = budget.usage()
    assert (usage.reserved_tokens, usage.reserved_usd, usage.in_flight) == (0, 0.0, 0)
    assert (usage.calls, usage.tokens, usage.cost_usd) == (1, 120, pytest.approx(0.01))
    assert budget.exhausted() is None

    pricey = Budget(max_usd=0.5)
    held = pricey.reserve(10, 0.5)
    with pytest.raises(BudgetExceeded, match=r"cost budget reached: \$0\.0000 of \$0\.5000"):
        pricey.reserve(10, 0.01)
    pricey.settle(held, 10, 0, 0.2)
    pricey.reserve(10, 0.01)
    with pytest.raises(BudgetExceeded, match=r"needs \$0\.4000 more") as too_big:
        pricey.reserve(10, 0.4)  # 0.2 spent + 0.01 held + 0.4 > 0.5, and 0.2 + 0.4 too
    assert not too_big.value.reserved_only
    spent = Budget(max_tokens=100)
    spent.charge(100, 0, 0.0)
    with pytest.raises(BudgetExceeded) as out:
        spent.reserve(1, 0.0)
    assert not out.value.reserved_only and spent.exhausted() is not None


def test_ledger_rows_written_by_the_client_validate_as_records() -> None:
    row = LlmCallIn.model_validate({"role": "planner", "model": "m", "status": "in_flight"})
    assert row.ok is False
    assert LlmCallIn(role="planner", model="m", ok=False).status == "failed"
    assert LlmCallIn(role="planner", model="m").status == "ok"

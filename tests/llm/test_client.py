"""The real client against the stand-in server over real HTTP."""

from __future__ import annotations

import asyncio
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.llm import (
    Budget,
    BudgetExceeded,
    LlmCallFailed,
    LlmClient,
    LlmConfigError,
    LlmReply,
    MalformedReply,
    RoleConfigs,
    estimate_tokens,
    parse_json_list,
    role_configs_from_dict,
)
from accelopt_mcp.llm.messages import reserved_prompt_tokens
from accelopt_mcp.models import LlmCallIn
from accelopt_mcp.redaction import REDACTED
from tests.llm.conftest import TEST_KEY_ENV, configs_for
from tests.llm_standin.process import StartStandin

PLANNER_SYSTEM = "ROLE=planner. You propose optimization plans."
MESSAGES = [
    {"role": "system", "content": PLANNER_SYSTEM},
    {"role": "user", "content": "make this matmul faster please"},
]


def _planner_script(*replies: dict[str, Any], **role: Any) -> dict[str, Any]:
    return {"roles": {"planner": {"marker": "ROLE=planner", "replies": list(replies), **role}}}


def _chars(messages: list[dict[str, str]]) -> int:
    return sum(len(message["content"]) for message in messages)


def _words(messages: list[dict[str, str]]) -> int:
    return sum(len(message["content"].split()) for message in messages)


def outcomes(written: list[LlmCallIn]) -> list[LlmCallIn]:
    """The ledger as a store keeps it: each call's last write (the client writes a call when
    it is sent and again when it ends, under one id), in the order the calls started."""
    last: dict[str | None, LlmCallIn] = {}
    for row in written:
        last[row.id] = row
    return list(last.values())


def _complete(
    configs: RoleConfigs,
    role: str = "planner",
    messages: list[dict[str, str]] = MESSAGES,
    **client_args: Any,
) -> tuple[LlmReply, list[LlmCallIn]]:
    written: list[LlmCallIn] = []

    async def go() -> LlmReply:
        async with LlmClient(configs, ledger=written.append, **client_args) as client:
            return await client.complete(role, messages)

    return asyncio.run(go()), outcomes(written)


def _complete_fails(
    configs: RoleConfigs, *, stamps: list[float] | None = None, **client_args: Any
) -> tuple[Exception, list[LlmCallIn]]:
    """The error a call that fails raises, and its ledger rows; `stamps` gets the
    time.monotonic() of each ledger write (a call's "sent" write, then its end)."""
    written: list[LlmCallIn] = []

    def ledger(row: LlmCallIn) -> None:
        written.append(row)
        if stamps is not None:
            stamps.append(time.monotonic())

    async def go() -> None:
        async with LlmClient(configs, ledger=ledger, **client_args) as client:
            await client.complete("planner", MESSAGES)

    with pytest.raises(Exception) as info:
        asyncio.run(go())
    return info.value, outcomes(written)


def test_happy_path_reports_usage_cost_and_sends_the_role_settings(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(_planner_script({"kind": "text", "text": "tile the inner loop by 64"}))
    configs = role_configs_from_dict(
        {
            "default": {"base_url": standin.base_url, "api_key_env": TEST_KEY_ENV},
            "planner": {
                "model": "priced-model",
                "temperature": 0.9,
                "top_p": 0.95,
                "max_tokens": 321,
                "max_tokens_param": "max_completion_tokens",
                "reasoning_effort": "high",
                "extra_body": {"top_k": 40},
            },
            "prices": {"priced-model": {"input_per_mtok": 3.0, "output_per_mtok": 12.0}},
        }
    )

    reply, rows = _complete(configs, run_id="run-1")

    assert reply.text == "tile the inner loop by 64"
    assert reply.tokens_in == _words(MESSAGES)
    assert reply.tokens_out == 6
    assert reply.cost_usd == pytest.approx((reply.tokens_in * 3.0 + 6 * 12.0) / 1e6)
    assert reply.model == "priced-model" and reply.attempts == 1 and reply.finish_reason == "stop"
    assert [(r.run_id, r.role, r.ok, r.tokens_in, r.tokens_out) for r in rows] == [
        ("run-1", "planner", True, reply.tokens_in, 6)
    ]
    assert rows[0].cost_usd == pytest.approx(reply.cost_usd)
    assert rows[0].latency_s > 0
    (request,) = standin.requests()
    body = request["body"]
    assert request["auth_ok"] and request["role"] == "planner"
    assert body["model"] == "priced-model"
    assert (body["temperature"], body["top_p"], body["max_completion_tokens"]) == (0.9, 0.95, 321)
    assert body["reasoning_effort"] == "high" and body["top_k"] == 40
    assert "max_tokens" not in body
    assert body["messages"] == MESSAGES


def test_429_is_retried_after_the_servers_retry_after(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(
        _planner_script(
            {"kind": "status", "status": 429, "retry_after": "0.4"},
            {"kind": "text", "text": "ok"},
        )
    )

    reply, rows = _complete(configs_for(standin.base_url))

    assert reply.text == "ok" and reply.attempts == 2
    assert [row.ok for row in rows] == [False, True]
    assert rows[0].error is not None and "429" in rows[0].error
    first, second = standin.requests()
    assert second["received_at"] - first["received_at"] >= 0.4


def test_500s_are_retried_until_success(start_standin: StartStandin, test_key: str) -> None:
    standin = start_standin(
        _planner_script(
            {"kind": "status", "status": 500},
            {"kind": "status", "status": 503},
            {"kind": "text", "text": "third time lucky"},
        )
    )

    reply, rows = _complete(configs_for(standin.base_url))

    assert reply.text == "third time lucky" and reply.attempts == 3
    assert [row.ok for row in rows] == [False, False, True]
    assert "HTTP 500" in (rows[0].error or "") and "HTTP 503" in (rows[1].error or "")
    assert len(standin.requests()) == 3


def test_timeouts_are_retried_then_given_up_with_a_clear_error(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(
        _planner_script({"kind": "delay", "seconds": 3}, when_exhausted="repeat_last")
    )
    stamps: list[float] = []

    error, rows = _complete_fails(
        configs_for(standin.base_url, timeout_s=0.3, max_retries=1), stamps=stamps
    )

    # Each attempt was given up on at its timeout, long before the stand-in's reply (3 s after
    # the request) would have come: timed from its "sent" write to its end (0.4 s here, 0.8 s
    # on a busy host), not from before the call, which the client's first call in a process
    # spends importing the OpenAI SDK first (0.8 s of CPU, over 5 s on a busy host).
    assert len(stamps) == 4  # sent, ended; sent, ended
    assert stamps[1] - stamps[0] < 2.5 and stamps[3] - stamps[2] < 2.5, stamps
    assert isinstance(error, LlmCallFailed)
    assert error.attempts == 2
    assert "timed out after 0.3 s" in str(error) and "no retries left" in str(error)
    assert [row.ok for row in rows] == [False, False]
    # The server may have billed a request it timed out on: each counts its prompt's estimate.
    assert [row.tokens_in for row in rows] == [estimate_tokens(_chars(MESSAGES))] * 2
    assert len(standin.requests()) == 2


def test_garbage_and_empty_replies_count_as_failed_attempts(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(
        _planner_script(
            {"kind": "garbage"},
            {"kind": "garbage", "content_type": "text/html"},
            {"kind": "empty_choices"},
            {"kind": "text", "text": "finally"},
        )
    )

    reply, rows = _complete(configs_for(standin.base_url))

    assert reply.text == "finally" and reply.attempts == 4
    errors = [row.error or "" for row in rows[:3]]
    assert all(error.startswith("malformed reply") for error in errors), errors
    assert "no choices" in errors[2]
    assert rows[3].ok


def test_only_garbage_fails_after_the_retries(start_standin: StartStandin, test_key: str) -> None:
    standin = start_standin(_planner_script({"kind": "garbage"}, when_exhausted="repeat_last"))

    error, rows = _complete_fails(configs_for(standin.base_url, max_retries=2))

    assert isinstance(error, LlmCallFailed)
    assert "malformed reply" in error.last_error and error.attempts == 3
    assert len(rows) == 3 and not any(row.ok for row in rows)


def test_a_client_error_is_not_retried(start_standin: StartStandin, test_key: str) -> None:
    standin = start_standin(
        _planner_script(
            {"kind": "status", "status": 400, "message": "context too long"},
            {"kind": "text", "text": "never sent"},
        )
    )

    error, rows = _complete_fails(configs_for(standin.base_url))

    assert isinstance(error, LlmCallFailed)
    assert "not retryable" in str(error) and "context too long" in str(error)
    assert error.attempts == 1 and len(rows) == 1
    assert len(standin.requests()) == 1


def test_concurrency_limit_per_role_is_respected(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(
        {
            "latency_s": 0.25,
            **_planner_script({"kind": "text", "text": "plan"}, when_exhausted="repeat_last"),
        }
    )
    configs = configs_for(standin.base_url, concurrency=2)

    async def go() -> list[LlmReply]:
        async with LlmClient(configs) as client:
            return await asyncio.gather(*(client.complete("planner", MESSAGES) for _ in range(6)))

    started = time.monotonic()
    replies = asyncio.run(go())

    assert [reply.text for reply in replies] == ["plan"] * 6
    assert standin.log()["max_in_flight"]["planner"] == 2
    assert time.monotonic() - started >= 3 * 0.25


def test_token_budget_stops_new_calls_before_they_start(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(
        _planner_script({"kind": "text", "text": "one two three"}, when_exhausted="repeat_last")
    )
    per_call = _words(MESSAGES) + 3
    # Each call holds its prompt (on the high side) and max_tokens=5 of output: room for two
    # calls' spending plus a third's reservation less one token.
    reserved = reserved_prompt_tokens(_chars(MESSAGES), len(MESSAGES)) + 5
    budget = Budget(max_tokens=2 * per_call + reserved - 1)
    configs = configs_for(standin.base_url, max_tokens=5)

    async def go() -> BudgetExceeded:
        async with LlmClient(configs, budget=budget) as client:
            await client.complete("planner", MESSAGES)
            await client.complete("planner", MESSAGES)
            with pytest.raises(BudgetExceeded) as info:
                await client.complete("planner", MESSAGES)
            return info.value

    exceeded = asyncio.run(go())

    assert "token budget" in str(exceeded) and not exceeded.reserved_only
    assert exceeded.usage.tokens == 2 * per_call and exceeded.usage.calls == 2
    assert len(standin.requests()) == 2


def test_cost_budget_stops_new_calls(start_standin: StartStandin, test_key: str) -> None:
    # A reply that would run to a million tokens ($2.50) under a $2.00 cap: the request says
    # 800,000 at most, the reply keeps to it, and the spending lands on the cap, not past it.
    standin = start_standin(
        _planner_script(
            {"kind": "text", "text": "x", "completion_tokens": 1_000_000},
            when_exhausted="repeat_last",
        )
    )
    configs = role_configs_from_dict(
        {
            "default": {
                "base_url": standin.base_url,
                "api_key_env": TEST_KEY_ENV,
                "model": "pricey",
                "max_tokens": 1_000_000,
            },
            "prices": {"pricey": {"input_per_mtok": 0, "output_per_mtok": 2.5}},
        }
    )
    budget = Budget(max_usd=2.0)

    async def go() -> LlmReply:
        async with LlmClient(configs, budget=budget) as client:
            first = await client.complete("planner", MESSAGES)
            await client.complete("planner", MESSAGES)
            return first

    with pytest.raises(BudgetExceeded, match=r"cost budget reached: \$2\.0000 of \$2\.0000"):
        asyncio.run(go())
    (sent,) = standin.requests()
    assert 799_999 <= sent["body"]["max_tokens"] <= 800_000  # what $2.00 buys, rounded down
    assert 1.9999 < budget.usage().cost_usd <= 2.0


def test_wall_time_budget_refuses_a_retry_pause_it_cannot_afford(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(_planner_script({"kind": "status", "status": 429, "retry_after": "30"}))
    started = time.monotonic()

    # 20 s of budget: far from the 30 s pause, and more than a busy host spends before the
    # first reply (the client's first call in a process imports the OpenAI SDK, 0.8 s of CPU,
    # over 5 s on a busy host), which a 5 s budget could run out in before any call was made.
    error, rows = _complete_fails(configs_for(standin.base_url), budget=Budget(max_wall_s=20))

    assert isinstance(error, BudgetExceeded) and "wall-time budget" in str(error)
    assert time.monotonic() - started < 20  # refused at once, not paused for 30 s
    assert len(rows) == 1 and not rows[0].ok


def test_the_key_never_reaches_ledger_rows_or_exceptions(
    start_standin: StartStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-standin-SECRET-0123456789abcdef"
    standin = start_standin(
        {
            "api_key": secret,
            "echo_key_in_errors": True,
            **_planner_script({"kind": "status", "status": 500}, when_exhausted="repeat_last"),
        }
    )
    monkeypatch.setenv(TEST_KEY_ENV, secret)

    error, rows = _complete_fails(configs_for(standin.base_url, max_retries=1))

    assert isinstance(error, LlmCallFailed)
    assert REDACTED in str(error)  # the server did echo it; the client scrubbed it
    rendered = "".join(traceback.format_exception(error))
    assert secret not in rendered
    assert len(rows) == 2
    assert all(secret not in row.model_dump_json() for row in rows)


def test_a_rejected_key_names_the_variable_but_not_the_key(
    start_standin: StartStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "sk-wrong-key-9876543210fedcba"
    standin = start_standin({"echo_key_in_errors": True, **_planner_script()})
    monkeypatch.setenv(TEST_KEY_ENV, wrong)

    error, rows = _complete_fails(configs_for(standin.base_url))

    assert isinstance(error, LlmCallFailed)
    assert "HTTP 401" in str(error) and TEST_KEY_ENV in str(error)
    assert wrong not in "".join(traceback.format_exception(error))
    assert len(rows) == 1 and wrong not in (rows[0].error or "")
    assert standin.requests()[0]["auth_ok"] is False


def test_a_local_server_that_wants_a_key_is_told_apart_from_a_rejected_one(
    start_standin: StartStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stand-in listens on 127.0.0.1, so with the variable unset a placeholder is sent; its
    # 401 must not read as if the key in the variable were wrong.
    standin = start_standin(_planner_script())
    monkeypatch.delenv(TEST_KEY_ENV, raising=False)

    error, _ = _complete_fails(configs_for(standin.base_url, max_retries=0))

    assert isinstance(error, LlmCallFailed)
    assert "HTTP 401" in str(error)
    assert f"{TEST_KEY_ENV} is not set" in str(error), str(error)
    assert "rejected the key in" not in str(error)


def test_missing_key_for_a_remote_endpoint_is_a_clear_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ACCELOPT_ABSENT_KEY", raising=False)
    configs = role_configs_from_dict(
        {
            "default": {
                "base_url": "https://llm.example.invalid/v1",
                "api_key_env": "ACCELOPT_ABSENT_KEY",
            }
        }
    )

    error, rows = _complete_fails(configs)

    assert isinstance(error, LlmConfigError)
    assert "ACCELOPT_ABSENT_KEY is not set" in str(error)
    assert rows == []


def test_a_local_endpoint_needs_no_key(
    start_standin: StartStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    standin = start_standin({"api_key": "not-needed", **_planner_script({"text": "local ok"})})
    monkeypatch.delenv(TEST_KEY_ENV, raising=False)

    reply, _ = _complete(configs_for(standin.base_url))

    assert reply.text == "local ok"


def test_roles_route_by_model_name_and_missing_usage_is_estimated(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(
        {
            "roles": {
                "exec-model": {"replies": [{"text": "```python\nx = 1\n```", "omit_usage": True}]},
                "summ-model": {"replies": [{"text": "summary"}]},
            }
        }
    )
    base = configs_for(standin.base_url).model_dump()
    base["executor"]["model"] = "exec-model"
    base["summarizer"]["model"] = "summ-model"
    configs = RoleConfigs.model_validate(base)
    messages = [{"role": "user", "content": "implement the plan " * 10}]

    executor_reply, _ = _complete(configs, "executor", messages)
    summary_reply, _ = _complete(configs, "summarizer", messages)

    assert executor_reply.text.startswith("```python") and executor_reply.usage_estimated
    assert executor_reply.tokens_in == len(messages[0]["content"]) // 4
    assert summary_reply.text == "summary" and not summary_reply.usage_estimated
    assert [request["role"] for request in standin.requests()] == ["exec-model", "summ-model"]


def test_unknown_role_is_rejected() -> None:
    async def go() -> None:
        async with LlmClient(RoleConfigs()) as client:
            await client.complete("critic", MESSAGES)

    with pytest.raises(LlmConfigError, match="unknown role 'critic'"):
        asyncio.run(go())


def test_every_attempt_lands_in_a_real_store_ledger(
    start_standin: StartStandin, test_key: str, tmp_path: Path
) -> None:
    from accelopt_mcp.store.base import RunRecord
    from accelopt_mcp.store.sqlite import SqliteStore
    from tests.store.samples import make_definition

    standin = start_standin(
        {
            "roles": {
                "planner": {
                    "marker": "ROLE=planner",
                    "replies": [{"kind": "status", "status": 502}, {"text": "p q"}],
                },
                "*": {"replies": [{"text": "one two three"}]},
            }
        }
    )
    with SqliteStore(tmp_path / "kernels.db") as store:
        definition = make_definition()
        store.upsert_definition(definition)
        store.create_run(RunRecord(id="run-ledger", definition_name=definition.name))
        configs = configs_for(standin.base_url)

        async def go() -> list[LlmReply]:
            async with LlmClient(configs, ledger=store.add_llm_call, run_id="run-ledger") as client:
                return [
                    await client.complete("planner", MESSAGES),
                    await client.complete("executor", [{"role": "user", "content": "code it"}]),
                ]

        planner, executor = asyncio.run(go())
        totals = {row.role: row for row in store.llm_totals("run-ledger")}

    assert set(totals) == {"executor", "planner"}
    assert (totals["planner"].calls, totals["planner"].tokens_out) == (2, planner.tokens_out)
    assert (totals["executor"].calls, totals["executor"].tokens_in) == (1, executor.tokens_in)


def test_a_reply_the_parser_rejects_is_asked_for_again(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = start_standin(
        _planner_script(
            {"text": "I would tile it."},
            {"text": 'Plans:\n```json\n["tile", "unroll"]\n```'},
            {"text": "no list again"},
            {"text": "still prose"},
        )
    )
    configs = configs_for(standin.base_url)

    async def go() -> tuple[list[Any], MalformedReply]:
        async with LlmClient(configs) as client:
            plans, _ = await client.complete_parsed("planner", MESSAGES, parse_json_list)
            with pytest.raises(MalformedReply) as info:
                await client.complete_parsed("planner", MESSAGES, parse_json_list)
            return plans, info.value

    plans, rejected = asyncio.run(go())

    assert plans == ["tile", "unroll"]
    assert "no JSON list" in str(rejected) and rejected.reply.text == "still prose"
    assert len(standin.requests()) == 4

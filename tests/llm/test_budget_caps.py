"""A token or dollar budget is a cap: many calls at once, against the stand-in server counting
real usage (and keeping, as a server does, to each request's max_tokens), never end above it.
Each call is admitted only with room for all it may use beside what the others hold, and is
sent with that output limit."""

from __future__ import annotations

import asyncio
from typing import Any

from accelopt_mcp.llm import Budget, BudgetExceeded, LlmClient, LlmReply, role_configs_from_dict
from tests.llm.conftest import TEST_KEY_ENV
from tests.llm_standin.process import StandinProcess, StartStandin

MESSAGES = [
    {"role": "system", "content": "ROLE=planner. You propose optimization plans."},
    {"role": "user", "content": "make this softmax faster " * 20},
]
LONG_REPLY = "token " * 5000  # longer than any call here may write (4096 at most)


def _calls(standin: StandinProcess, budget: Budget, count: int, **role: Any) -> list[Any]:
    configs = role_configs_from_dict(
        {
            "default": {
                "base_url": standin.base_url,
                "api_key_env": TEST_KEY_ENV,
                "model": "priced",
                "concurrency": 4,
                "max_retries": 0,
                **role,
            },
            "prices": {"priced": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}},
        }
    )

    async def go() -> list[Any]:
        async with LlmClient(configs, budget=budget) as client:
            calls = [client.complete("planner", MESSAGES) for _ in range(count)]
            return await asyncio.gather(*calls, return_exceptions=True)

    return asyncio.run(go())


def _replying(start_standin: StartStandin) -> StandinProcess:
    reply = {"kind": "text", "text": LONG_REPLY, "latency_s": 0.05}
    script = {"roles": {"planner": {"marker": "ROLE=planner", "replies": [reply]}}}
    script["roles"]["planner"]["when_exhausted"] = "repeat_last"
    return start_standin(script)


def test_concurrent_calls_never_spend_past_a_token_cap(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = _replying(start_standin)
    budget = Budget(max_tokens=12_000)

    results = _calls(standin, budget, 12)

    done = [r for r in results if isinstance(r, LlmReply)]
    refused = [r for r in results if isinstance(r, BudgetExceeded)]
    assert len(done) + len(refused) == len(results), results
    assert len(done) >= 2 and refused
    usage = budget.usage()
    assert usage.tokens <= 12_000, usage
    assert usage.tokens == sum(r.tokens_in + r.tokens_out for r in done)
    assert (usage.reserved_tokens, usage.in_flight) == (0, 0)
    # Every request carried its limit, and no reply ran past it.
    sent = [request["body"] for request in standin.requests()]
    assert len(sent) == len(done) and all("max_tokens" in body for body in sent)
    assert sorted(r.tokens_out for r in done) == sorted(body["max_tokens"] for body in sent)
    # A call cut down to what was left said so.
    assert any(r.finish_reason == "length" for r in done)


def test_concurrent_calls_never_spend_past_a_dollar_cap(
    start_standin: StartStandin, test_key: str
) -> None:
    standin = _replying(start_standin)
    budget = Budget(max_usd=0.01)  # $4 per million output tokens: about 2,500 tokens

    results = _calls(standin, budget, 12, max_tokens=1000)

    done = [r for r in results if isinstance(r, LlmReply)]
    assert len(done) >= 2 and any(isinstance(r, BudgetExceeded) for r in results)
    assert budget.usage().cost_usd <= 0.01
    assert all(body["max_tokens"] <= 1000 for body in (r["body"] for r in standin.requests()))


def test_the_limit_goes_under_the_name_the_endpoint_takes(monkeypatch: Any) -> None:
    """A role that sets no max_tokens still gets the budget's limit; OpenAI's own endpoint
    (whose reasoning models refuse `max_tokens`) gets it as `max_completion_tokens`."""
    from accelopt_mcp.llm.client import ChatMessage, _request_args
    from accelopt_mcp.llm.config import ModelConfig

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    chat = [ChatMessage(role="user", content="hi")]
    openai_args = _request_args(ModelConfig(model="o4-mini"), chat, 500)
    assert openai_args["max_completion_tokens"] == 500 and "max_tokens" not in openai_args
    local = ModelConfig(model="m", base_url="http://127.0.0.1:8000/v1")
    assert _request_args(local, chat, 500)["max_tokens"] == 500
    assert "max_tokens" not in _request_args(local, chat, None)  # no budget, no limit of ours

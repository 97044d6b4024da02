"""list_llm_calls and get_llm_call through the SDK's in-process client, over a real SQLite
store (and PostgreSQL where the server is there)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from mcp import Client

from accelopt_mcp.store import open_store
from accelopt_mcp.store.base import RunRecord
from tests.mcp.conftest import MODES, served
from tests.mcp.helpers import fails, ok
from tests.store.samples import make_definition, make_llm_call

pytestmark = pytest.mark.anyio

FIRST = "feedface" + "0" * 24
LONG_PROMPT = "explain the kernel\n" + "x = y + 1\n" * 3000


def _fill(url: str) -> None:
    with open_store(url) as store:
        store.upsert_definition(make_definition("d"))
        store.create_run(RunRecord(id="run-1", definition_name="d"))
        store.add_llm_call(
            make_llm_call(
                FIRST,
                purpose="plan 1/0",
                tokens_in=10,
                tokens_out=4,
                started_at=datetime(2026, 3, 1, tzinfo=UTC),
                system="You plan.",
                prompt=LONG_PROMPT,
                reply="tile it",
            )
        )
        for i in range(4):
            store.add_llm_call(
                make_llm_call(
                    role="executor",
                    purpose=f"attempt 1/0/0/{i}",
                    status="failed" if i == 3 else "ok",
                    error="HTTP 500" if i == 3 else None,
                )
            )


@pytest.fixture(
    params=[
        pytest.param(("sqlite", MODES[0])),
        pytest.param(("sqlite", MODES[1])),
        pytest.param(("postgres", MODES[0]), marks=pytest.mark.postgres),
    ]
)
async def client(request: pytest.FixtureRequest, tmp_path: Path):
    kind, mode = request.param
    url = request.getfixturevalue(f"{kind}_url")
    _fill(url)
    async with served(url, tmp_path, mode=mode) as connected:
        yield connected


async def test_list_llm_calls(client: Client) -> None:
    tools = {t.name for t in (await client.list_tools()).tools}
    assert {"list_llm_calls", "get_llm_call"} <= tools

    page = await ok(client, "list_llm_calls", {"run_id": "run-1"})
    assert [c["purpose"] for c in page["calls"]] == [
        "plan 1/0",
        *(f"attempt 1/0/0/{i}" for i in range(4)),
    ]
    assert page["page"]["total"] == 5 and page["page"]["next_offset"] is None
    first = page["calls"][0]
    assert (first["id"], first["role"], first["status"]) == (FIRST, "planner", "ok")
    assert first["started_at"].startswith("2026-03-01")
    assert page["calls"][-1]["status"] == "failed" and page["calls"][-1]["error"] == "HTTP 500"

    executor = await ok(
        client, "list_llm_calls", {"run_id": "run-1", "role": "executor", "limit": 2}
    )
    assert [c["purpose"] for c in executor["calls"]] == ["attempt 1/0/0/0", "attempt 1/0/0/1"]
    assert executor["page"]["total"] == 4 and executor["page"]["next_offset"] == 2
    rest = await ok(client, "list_llm_calls", {"run_id": "run-1", "role": "executor", "offset": 2})
    assert [c["purpose"] for c in rest["calls"]] == ["attempt 1/0/0/2", "attempt 1/0/0/3"]

    await fails(client, "list_llm_calls", {"run_id": "nope"}, "no run with id 'nope'")
    await fails(client, "list_llm_calls", {"run_id": "run-1", "limit": 0}, "limit")


async def test_get_llm_call(client: Client) -> None:
    detail = await ok(client, "get_llm_call", {"call_id": FIRST[:8]})
    assert detail["call"]["id"] == FIRST and detail["call"]["purpose"] == "plan 1/0"
    system, user = detail["messages"]
    assert system["role"] == "system" and system["content"]["text"] == "You plan."
    assert user["content"]["truncated"] is True
    assert user["content"]["total_chars"] == len(LONG_PROMPT)
    assert detail["reply"]["text"] == "tile it"

    text = user["content"]["text"]
    while user["content"]["next_offset"] is not None:
        more = await ok(
            client,
            "get_llm_call",
            {"call_id": FIRST, "text_offset": user["content"]["next_offset"]},
        )
        user = more["messages"][1]
        text += user["content"]["text"]
    assert text == LONG_PROMPT

    listed = await ok(client, "list_llm_calls", {"run_id": "run-1", "role": "executor"})
    bare = await ok(client, "get_llm_call", {"call_id": listed["calls"][0]["id"]})
    assert bare["messages"] is None and bare["reply"] is None

    await fails(client, "get_llm_call", {"call_id": "ffffffff"}, "no LLM call")

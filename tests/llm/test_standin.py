"""The stand-in server itself: auth, routing and its record of requests."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from tests.llm.conftest import TEST_KEY
from tests.llm_standin.process import StartStandin
from tests.llm_standin.script import StandinScript

AUTH = {"authorization": f"Bearer {TEST_KEY}"}


def _chat(model: str, system: str = "") -> dict[str, Any]:
    messages = [{"role": "system", "content": system}] if system else []
    return {"model": model, "messages": [*messages, {"role": "user", "content": "two words"}]}


def test_models_endpoint_lists_scripted_roles_and_checks_the_key(
    start_standin: StartStandin,
) -> None:
    standin = start_standin({"roles": {"alpha": {}, "*": {}}})

    listed = httpx.get(f"{standin.base_url}/models", headers=AUTH)
    refused = httpx.get(f"{standin.base_url}/models", headers={"authorization": "Bearer nope"})

    assert [model["id"] for model in listed.json()["data"]] == ["alpha"]
    assert refused.status_code == 401
    assert "nope" not in refused.text


def test_routing_usage_and_exhaustion(start_standin: StartStandin) -> None:
    standin = start_standin(
        {
            "roles": {
                "planner": {"marker": "[planner]", "replies": [{"text": "a b c"}]},
                "*": {"replies": [{"text": "fallback"}], "when_exhausted": "repeat_last"},
            }
        }
    )
    url = f"{standin.base_url}/chat/completions"

    by_marker = httpx.post(url, json=_chat("m", "you are [planner]"), headers=AUTH).json()
    exhausted = httpx.post(url, json=_chat("m", "you are [planner]"), headers=AUTH)
    fallback = [httpx.post(url, json=_chat("other"), headers=AUTH).json() for _ in range(2)]

    assert by_marker["choices"][0]["message"]["content"] == "a b c"
    assert by_marker["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert exhausted.status_code == 400 and "exhausted" in exhausted.text
    assert [reply["choices"][0]["message"]["content"] for reply in fallback] == ["fallback"] * 2
    log = standin.requests()
    assert [entry["role"] for entry in log] == ["planner", "planner", "*", "*"]
    assert [entry["outcome"] for entry in log] == ["text", "exhausted", "text", "text"]


def test_unrouted_requests_are_refused(start_standin: StartStandin) -> None:
    standin = start_standin({"roles": {"planner": {"replies": [{"text": "x"}]}}})
    response = httpx.post(f"{standin.base_url}/chat/completions", json=_chat("m"), headers=AUTH)
    assert response.status_code == 404 and "no scripted role" in response.text


def test_scripts_are_validated() -> None:
    with pytest.raises(ValidationError, match="status"):
        StandinScript.model_validate({"roles": {"r": {"replies": [{"kind": "status"}]}}})
    with pytest.raises(ValidationError, match="kind"):
        StandinScript.model_validate({"roles": {"r": {"replies": [{"kind": "teapot"}]}}})

"""The check before a run, against the scripted stand-in server (a real HTTP subprocess)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from accelopt_mcp.llm import LlmConfigError
from accelopt_mcp.llm.preflight import PreflightFailed, check_endpoints
from tests.llm.conftest import TEST_KEY, TEST_KEY_ENV, configs_for
from tests.llm_standin.process import StartStandin


def _refusal(configs: Any) -> str:
    with pytest.raises(PreflightFailed) as caught:
        asyncio.run(check_endpoints(configs))
    message = str(caught.value)
    assert "\n" not in message
    return message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_listed_model_passes_without_spending_a_reply(start: StartStandin, test_key: str) -> None:
    standin = start({"roles": {"test-model": {"replies": [{"text": "the only reply"}]}}})
    asyncio.run(check_endpoints(configs_for(standin.base_url)))
    # The list confirmed the model: no chat completion was sent.
    assert [e for e in standin.log()["requests"] if e.get("role")] == []


def test_a_dead_endpoint_is_refused_naming_it(test_key: str) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    message = _refusal(configs_for(url, timeout_s=3))
    assert url in message
    assert "'test-model'" in message
    assert "unreachable" in message
    assert "base_url" in message


def test_a_wrong_key_is_refused_naming_the_variable(
    start: StartStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    standin = start({"roles": {"test-model": {"replies": [{"text": "x"}]}}})
    monkeypatch.setenv(TEST_KEY_ENV, "not-" + TEST_KEY)
    message = _refusal(configs_for(standin.base_url))
    assert "key rejected (HTTP 401)" in message
    assert TEST_KEY_ENV in message
    assert TEST_KEY not in message


def test_an_unknown_model_is_refused_with_what_the_endpoint_serves(
    start: StartStandin, test_key: str
) -> None:
    standin = start({"roles": {"served-model": {"replies": [{"text": "x"}]}}})
    message = _refusal(configs_for(standin.base_url))
    assert "unknown model" in message
    assert "served-model" in message
    assert "ACCELOPT_MODEL" in message


def test_a_vllm_style_404_for_the_model_is_refused(start: StartStandin, test_key: str) -> None:
    # The catch-all role answers every model, as vLLM does, with its "does not exist" 404.
    fault = {"kind": "status", "status": 404, "message": "The model `test-model` does not exist."}
    standin = start({"roles": {"*": {"replies": [fault]}}})
    message = _refusal(configs_for(standin.base_url))
    assert "unknown model (HTTP 404" in message
    assert "does not exist" in message


def test_a_server_serving_any_name_passes_on_the_probe(start: StartStandin, test_key: str) -> None:
    # llama.cpp answers whatever model name it is sent; its list does not name it.
    standin = start({"roles": {"*": {"replies": [{"text": "ok"}]}}})
    asyncio.run(check_endpoints(configs_for(standin.base_url)))
    probes = [e for e in standin.log()["requests"] if e.get("role")]
    assert len(probes) == 1
    assert probes[0]["body"]["max_tokens"] == 1


def test_a_rate_limited_endpoint_passes(start: StartStandin, test_key: str) -> None:
    busy = {"kind": "status", "status": 429, "retry_after": "30"}
    standin = start({"roles": {"*": {"replies": [busy]}}})
    asyncio.run(check_endpoints(configs_for(standin.base_url)))


def test_roles_sharing_an_endpoint_and_model_are_checked_once(
    start: StartStandin, test_key: str
) -> None:
    standin = start(
        {"roles": {"*": {"replies": [{"text": "ok"}], "when_exhausted": "repeat_last"}}}
    )
    asyncio.run(check_endpoints(configs_for(standin.base_url)))
    assert len([e for e in standin.log()["requests"] if e.get("role")]) == 1


def test_an_unset_key_variable_is_a_config_error(
    start: StartStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TEST_KEY_ENV, raising=False)
    with pytest.raises(LlmConfigError, match=TEST_KEY_ENV):
        asyncio.run(check_endpoints(configs_for("https://llm.example.invalid/v1")))


@pytest.fixture
def start(start_standin: StartStandin) -> StartStandin:
    return start_standin

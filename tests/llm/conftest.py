from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from accelopt_mcp.llm import RoleConfigs, role_configs_from_dict
from tests.llm_standin.process import StartStandin, standin_starter

TEST_KEY_ENV = "ACCELOPT_TEST_LLM_KEY"
TEST_KEY = "standin-key-7f3a9c21e8"


@pytest.fixture
def start_standin() -> Iterator[StartStandin]:
    """Start a stand-in server (a real subprocess) from a script dict; stopped after the test."""
    with standin_starter(api_key=TEST_KEY) as start:
        yield start


@pytest.fixture
def test_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(TEST_KEY_ENV, TEST_KEY)
    return TEST_KEY


def configs_for(base_url: str, **overrides: Any) -> RoleConfigs:
    """Fast-retrying role configs pointed at a stand-in; `overrides` go into `default`."""
    default = {
        "base_url": base_url,
        "api_key_env": TEST_KEY_ENV,
        "model": "test-model",
        "timeout_s": 5,
        "max_retries": 3,
        "retry_base_s": 0.01,
        "retry_max_s": 0.05,
        **overrides,
    }
    return role_configs_from_dict({"default": default})

"""Where a model config a client names may send the server's keys (llm/key_destinations.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelopt_mcp.llm.config import role_configs_from_dict
from accelopt_mcp.llm.key_destinations import (
    TRUSTED_CONFIGS_ENV,
    KeyDestinationRefused,
    origin,
    require_trusted_destinations,
)


@pytest.fixture(autouse=True)
def _server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", TRUSTED_CONFIGS_ENV, "VLLM_API_KEY", "OTHER_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server")


def check(default: dict[str, str], **roles: dict[str, str]) -> None:
    require_trusted_destinations(
        role_configs_from_dict({"default": default, **roles}), "model config x.json"
    )


def test_origin_is_scheme_host_and_port_whatever_the_path_and_case() -> None:
    assert origin("https://API.OpenAI.com/v1") == "https://api.openai.com:443"
    assert origin("https://api.openai.com:443/other/") == "https://api.openai.com:443"
    assert origin("http://api.openai.com/v1") == "http://api.openai.com:80"
    assert origin("http://[::1]:8000/v1") == "http://[::1]:8000"


def test_a_key_goes_where_the_operators_configs_send_it() -> None:
    check({"base_url": "https://api.openai.com/v1"})  # openai.json's pair
    check({"base_url": "https://API.OPENAI.COM:443/v1/"})  # the same origin, written otherwise
    check({})  # the default config: OPENAI_API_KEY to OpenAI


@pytest.mark.parametrize(
    "default",
    [
        {"base_url": "http://api.openai.com/v1"},  # another scheme: not the same endpoint
        {"base_url": "https://api.openai.com.evil.example/v1"},
        {"base_url": "http://127.0.0.1:8000/v1"},  # vLLM's endpoint, but not its key
        {"base_url": "https://api.openai.com/v1", "api_key_env": "OTHER_KEY"},
    ],
)
def test_any_other_pair_of_a_set_variable_and_an_endpoint_is_refused(
    default: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHER_KEY", "secret-value")
    with pytest.raises(KeyDestinationRefused) as refused:
        check(default)
    message = str(refused.value)
    assert "model config x.json" in message and TRUSTED_CONFIGS_ENV in message
    assert "sk-server" not in message and "secret-value" not in message


def test_one_role_pointing_elsewhere_is_enough_to_refuse() -> None:
    with pytest.raises(KeyDestinationRefused, match="its summarizer would send"):
        check({}, summarizer={"base_url": "https://elsewhere.example/v1"})


def test_a_variable_not_set_here_sends_nothing_of_the_servers() -> None:
    check({"base_url": "https://anywhere.example/v1", "api_key_env": "OTHER_KEY"})


def test_the_operator_lists_a_config_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = {"base_url": "https://llm.internal.example/v1", "api_key_env": "OTHER_KEY"}
    monkeypatch.setenv("OTHER_KEY", "secret-value")
    with pytest.raises(KeyDestinationRefused):
        check(ours)
    listed = tmp_path / "team.json"
    listed.write_text(json.dumps({"default": ours}))
    monkeypatch.setenv(TRUSTED_CONFIGS_ENV, f"vllm-gpt-oss-120b:{listed}")
    check(ours)
    # Listing it trusts that pair only: the key still goes nowhere else.
    with pytest.raises(KeyDestinationRefused):
        check({**ours, "base_url": "https://llm.internal.example.evil/v1"})


def test_a_listed_config_that_cannot_be_loaded_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRUSTED_CONFIGS_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match=TRUSTED_CONFIGS_ENV):
        check({"base_url": "https://elsewhere.example/v1"})


def test_a_server_takes_over_no_job_whose_config_sends_a_key_elsewhere(tmp_path: Path) -> None:
    """An interrupted job in the database (started before the check existed, or by another
    server of the team sharing it, whose copy path is a client's file here) names a config
    that sends OPENAI_API_KEY to a listener: this server does not take it over, which would
    load that config unchecked and call there; one whose config sends it where the operator
    does is still taken over."""
    from accelopt_mcp.engine.checkpoint import RunSpec
    from accelopt_mcp.engine.config import OptimizeConfig
    from accelopt_mcp.engine.jobs import why_not_here

    def spec(config: dict[str, object]) -> RunSpec:
        path = tmp_path / "models.json"
        path.write_text(json.dumps(config))
        optimize = OptimizeConfig(backend="cpu", cluster="local", models_config=str(path))
        return RunSpec.model_construct(optimize=optimize, request={"origin": "job"})

    evil = {"default": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "OPENAI_API_KEY"}}
    reason = why_not_here("r1", spec(evil), check_key_destinations=True)
    assert reason is not None and "OPENAI_API_KEY" in reason and "sk-server" not in reason
    trusted = spec({"default": {"api_key_env": "OPENAI_API_KEY"}})
    assert why_not_here("r2", trusted, check_key_destinations=True) is None
    # The CLI's job manager (a `suite run`'s) resumes its own user's config, wherever it points.
    assert why_not_here("r1", spec(evil)) is None


def test_the_mcp_servers_job_manager_checks_where_keys_go(tmp_path: Path) -> None:
    from accelopt_mcp.mcp_tools.state import ServerState

    state = ServerState(str(tmp_path / "k.db"), jobs_output_dir=tmp_path / "jobs")
    try:
        assert state.jobs().client_configs
    finally:
        state.close()

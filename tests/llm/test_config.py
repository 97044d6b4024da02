"""Role configs: files, defaults, environment and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelopt_mcp.llm import LlmConfigError, PriceTable, load_role_configs
from accelopt_mcp.llm.config import OPENAI_DEFAULT_BASE_URL, ModelPrice

TEMPLATES = Path(__file__).resolve().parents[2] / "accelopt_mcp" / "llm" / "model_configs"


@pytest.mark.parametrize(
    ("name", "base_url", "local"),
    [
        ("openai.json", "https://api.openai.com/v1", False),
        ("vllm-gpt-oss-120b.json", "http://127.0.0.1:8000/v1", True),
        ("llamacpp.json", "http://127.0.0.1:8080/v1", True),
    ],
)
def test_templates_load(name: str, base_url: str, local: bool) -> None:
    configs = load_role_configs(TEMPLATES / name)
    for role in (configs.planner, configs.executor, configs.summarizer):
        assert role.resolved_base_url() == base_url
        assert role.is_local() is local
        assert not role.api_key_env.startswith("sk-")


def test_role_tables_override_the_default_table(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(
        """
[default]
model = "base-model"
temperature = 0.5
concurrency = 3

[planner]
temperature = 1.0

[summarizer]
model = "small-model"
max_tokens = 100

[prices.base-model]
input_per_mtok = 1.0
output_per_mtok = 4.0
"""
    )
    configs = load_role_configs(path)

    assert (configs.planner.model, configs.planner.temperature) == ("base-model", 1.0)
    assert (configs.executor.model, configs.executor.temperature) == ("base-model", 0.5)
    assert (configs.summarizer.model, configs.summarizer.max_tokens) == ("small-model", 100)
    assert {c.concurrency for c in (configs.planner, configs.executor, configs.summarizer)} == {3}
    assert configs.prices.cost("base-model", 1_000_000, 500_000) == pytest.approx(3.0)
    # the defaults stay listed next to the override
    assert configs.prices.price_of("gpt-4.1-mini") is not None


def test_no_file_means_openai_defaults_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert load_role_configs(None).planner.resolved_base_url() == OPENAI_DEFAULT_BASE_URL
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:9999/v1")
    configs = load_role_configs(None)
    assert configs.executor.resolved_base_url() == "http://localhost:9999/v1"
    assert configs.executor.is_local()
    assert configs.executor.api_key_env == "OPENAI_API_KEY"


def _write(tmp_path: Path, data: object, name: str = "models.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_unknown_role_field_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, {"planner": {"temprature": 0.3}})
    with pytest.raises(LlmConfigError, match=r"role planner.*unknown field 'temprature'"):
        load_role_configs(path)


def test_unknown_top_level_table_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, {"critic": {}})
    with pytest.raises(LlmConfigError, match=r"unknown field 'critic'.*planner"):
        load_role_configs(path)


def test_a_key_in_the_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = _write(tmp_path, {"default": {"api_key": "sk-live-abcdef0123456789"}})
    with pytest.raises(LlmConfigError) as info:
        load_role_configs(path)
    assert "api_key_env" in str(info.value)
    assert "sk-live" not in str(info.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"executor": {"concurrency": 0}}, r"concurrency: Input should be greater than or equal"),
        ({"default": {"api_key_env": "has spaces"}}, r"api_key_env: String should match"),
        ({"prices": {"m": {"input_per_mtok": 1}}}, r"prices.m: output_per_mtok: Field required"),
        ([1, 2], r"top level must be a table"),
    ],
)
def test_bad_values_are_explained(tmp_path: Path, data: object, expected: str) -> None:
    with pytest.raises(LlmConfigError, match=expected):
        load_role_configs(_write(tmp_path, data))


def test_missing_unreadable_and_wrongly_named_files(tmp_path: Path) -> None:
    with pytest.raises(LlmConfigError, match="does not exist"):
        load_role_configs(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(LlmConfigError, match="not valid json"):
        load_role_configs(broken)
    yaml = tmp_path / "models.yaml"
    yaml.write_text("planner: {}")
    with pytest.raises(LlmConfigError, match=r"\.json or \.toml"):
        load_role_configs(yaml)


def test_price_table_matches_dated_names_by_longest_prefix() -> None:
    table = PriceTable(
        prices={
            "gpt-x": ModelPrice(input_per_mtok=1.0, output_per_mtok=1.0),
            "gpt-x-mini": ModelPrice(input_per_mtok=0.1, output_per_mtok=0.2),
        }
    )
    assert table.cost("gpt-x-mini-2025-04-14", 1_000_000, 1_000_000) == pytest.approx(0.3)
    assert table.cost("gpt-x-2025", 1_000_000, 0) == pytest.approx(1.0)
    assert table.cost("openai/gpt-oss-120b", 10**9, 10**9) == 0.0


@pytest.mark.parametrize(
    "base_url",
    [
        "http://bob:hunter2pw@127.0.0.1:99999/v1",
        "http://bob:hunter2pw@[::1/v1",
        "ftp://bob:hunter2pw@llm.example/v1",
        "bob:hunter2pw@llm.example/v1",
    ],
)
def test_an_unusable_base_url_is_refused_at_load_without_echoing_it(
    tmp_path: Path, base_url: str
) -> None:
    """Otherwise the first call dies with an OverflowError or InvalidURL from deep inside the
    HTTP stack, with no ledger row and no hint of the config field at fault."""
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"default": {"base_url": base_url}}))
    with pytest.raises(LlmConfigError, match="base_url") as caught:
        load_role_configs(path)
    assert "hunter2pw" not in str(caught.value)


def test_a_run_stored_with_the_old_path_of_a_shipped_config_still_loads(tmp_path: Path) -> None:
    # Runs started before the configs moved into the package keep their old absolute path.
    old = tmp_path / "templates" / "models" / "llamacpp.json"
    assert not old.exists()
    configs = load_role_configs(old)
    assert configs == load_role_configs(TEMPLATES / "llamacpp.json")
    with pytest.raises(LlmConfigError, match="does not exist"):
        load_role_configs(tmp_path / "templates" / "models" / "no-such-config.json")

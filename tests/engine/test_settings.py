"""RUN_SETTINGS is the one list of the settings a run is started with: every OptimizeConfig
field is in it or named below as not one; `accelopt optimize` has an option and
start_optimization a parameter for each, with the field's bounds; the override map keeps
False and 0 and drops what was not given."""

from __future__ import annotations

from typing import Any

import typer.main

from accelopt_mcp.cli import _register, app
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.presets import PRESETS
from accelopt_mcp.engine.settings import NOT_GIVEN, RUN_SETTINGS, given_settings
from accelopt_mcp.mcp_tools.jobs import TOOLS

_register()

NOT_START_SETTINGS = {
    "benchmark": "start_optimization's own (a JSON object); on the CLI, a preset file's",
    "cluster": "each front end resolves it its way (--cluster / the server's environment)",
    "shuffle_seed": "a preset file's only",
    "summarize": "a preset file's only",
}


def _cli_options() -> dict[str, Any]:
    group: Any = typer.main.get_command(app)
    command = group.commands["optimize"]
    return {
        decl: param
        for param in command.params
        for decl in (*param.opts, *getattr(param, "secondary_opts", ()))
    }


def _mcp_properties() -> dict[str, dict[str, object]]:
    (tool,) = (tool for tool in TOOLS if tool.name == "start_optimization")
    properties: dict[str, dict[str, object]] = tool.parameters["properties"]
    return properties


def test_every_config_field_is_a_setting_or_said_not_to_be() -> None:
    fields = [setting.field for setting in RUN_SETTINGS]
    assert len(fields) == len(set(fields))
    assert set(fields) | set(NOT_START_SETTINGS) == set(OptimizeConfig.model_fields)
    assert not set(fields) & set(NOT_START_SETTINGS)


def test_the_cli_has_an_option_for_every_setting() -> None:
    options = _cli_options()
    missing = [setting.flag for setting in RUN_SETTINGS if setting.flag not in options]
    assert not missing, f"accelopt optimize lacks {missing}"
    for setting in RUN_SETTINGS:
        option = options[setting.flag]
        assert option.default is None, f"{setting.flag} must default to not given"
        assert option.help == setting.describe()
        if setting.value_type() is bool:
            no = "--no-" + setting.flag.removeprefix("--")
            assert option.secondary_opts == [no], f"{setting.flag} cannot be turned off"


def test_the_mcp_tool_has_a_parameter_for_every_setting() -> None:
    properties = _mcp_properties()
    missing = [setting.param for setting in RUN_SETTINGS if setting.param not in properties]
    assert not missing, f"start_optimization lacks {missing}"
    schema_bounds = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum"}
    for setting in RUN_SETTINGS:
        schema = properties[setting.param]
        assert schema["default"] is None, f"{setting.param} must default to not given"
        assert schema["description"] == setting.describe()
        (given, null) = schema["anyOf"]  # type: ignore[misc]
        assert null == {"type": "null"}
        for bound, value in setting.bounds().items():
            assert given[schema_bounds[bound]] == value, (setting.param, bound)
        if setting.choices():
            assert given["enum"] == list(setting.choices())


def test_the_front_ends_keep_their_names() -> None:
    # The names users and agents already call them by.
    flags = {setting.field: setting.flag for setting in RUN_SETTINGS}
    params = {setting.field: setting.param for setting in RUN_SETTINGS}
    assert flags["seed_from_namespace"] == "--seed-memory"
    assert flags["models_config"] == "--config"
    assert flags["max_consecutive_llm_failures"] == "--max-llm-failures"
    assert flags["exp_n"] == "--exp-n"
    assert params["seed_from_namespace"] == "seed_memory"
    assert params["models_config"] == "models_config"


def test_built_in_presets_set_only_what_a_preset_may_set() -> None:
    may = {setting.field for setting in RUN_SETTINGS if setting.preset}
    for name, preset in PRESETS.items():
        assert set(preset) <= may, f"preset {name} sets {set(preset) - may}"


def test_the_override_map_keeps_false_and_zero_and_drops_the_not_given() -> None:
    values = {
        "seed_from_namespace": False,
        "repair_tries": 0,
        "iterations": NOT_GIVEN,
        "namespace": None,
    }
    assert given_settings(values) == {"seed_from_namespace": False, "repair_tries": 0}

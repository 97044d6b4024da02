"""The LLM roles are declared once, as RoleConfigs' ModelConfig fields; everything that names
roles (ROLES, the config-file tables, per-role lookups) must follow from them."""

import pytest

from accelopt_mcp.llm.config import (
    ROLES,
    LlmConfigError,
    ModelConfig,
    RoleConfigs,
    role_configs_from_dict,
)


def test_roles_are_the_model_config_fields_in_declaration_order() -> None:
    declared = [
        name for name, field in RoleConfigs.model_fields.items() if field.annotation is ModelConfig
    ]
    assert list(ROLES) == declared
    assert set(ROLES) >= {"planner", "executor", "summarizer"}


def test_a_config_file_may_hold_a_table_for_every_role_and_each_one_takes_effect() -> None:
    raw = {role: {"model": f"model-for-{role}"} for role in ROLES}
    configs = role_configs_from_dict(raw)
    for role in ROLES:
        assert configs.for_role(role).model == f"model-for-{role}"


def test_a_table_for_a_role_that_is_not_declared_is_refused_by_name() -> None:
    with pytest.raises(LlmConfigError, match="critic"):
        role_configs_from_dict({"critic": {"model": "m"}})
    with pytest.raises(LlmConfigError, match="unknown role 'critic'"):
        RoleConfigs().for_role("critic")

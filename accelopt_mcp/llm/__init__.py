"""OpenAI-compatible chat access for the planner, executor and summarizer roles."""

from accelopt_mcp.llm.budget import (
    Budget,
    BudgetExceeded,
    BudgetLimits,
    BudgetUsage,
    Reservation,
)
from accelopt_mcp.llm.client import DEFAULT_OUTPUT_TOKENS, LlmClient
from accelopt_mcp.llm.config import (
    ROLES,
    LlmConfigError,
    ModelConfig,
    ModelPrice,
    PriceTable,
    RoleConfigs,
    find_model_config,
    load_role_configs,
    model_config_names,
    role_configs_from_dict,
)
from accelopt_mcp.llm.errors import LlmCallFailed, LlmError
from accelopt_mcp.llm.messages import ChatMessage, LlmReply, estimate_tokens
from accelopt_mcp.llm.parsing import MalformedReply, extract_code_block, parse_json_list

__all__ = [
    "DEFAULT_OUTPUT_TOKENS",
    "ROLES",
    "Budget",
    "BudgetExceeded",
    "BudgetLimits",
    "BudgetUsage",
    "ChatMessage",
    "LlmCallFailed",
    "LlmClient",
    "LlmConfigError",
    "LlmError",
    "LlmReply",
    "MalformedReply",
    "ModelConfig",
    "ModelPrice",
    "PriceTable",
    "Reservation",
    "RoleConfigs",
    "estimate_tokens",
    "extract_code_block",
    "find_model_config",
    "load_role_configs",
    "model_config_names",
    "parse_json_list",
    "role_configs_from_dict",
]

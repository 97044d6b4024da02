"""Where the server may send the API keys in its environment, when a client names the config.

A model config pairs an endpoint (`base_url`) with the environment variable whose value is
sent there as the key (`api_key_env`). Whoever names the config picks both. On the command line
that is the user, whose keys they are; through the MCP server it is the client (an agent that
may be prompt-injected, or anyone with the HTTP token), which could point a role at its own
listener and name any variable of the server's environment (OPENAI_API_KEY, SUPABASE_KEY, the
server's token) to be handed that value as a bearer key.

So a config a client names may send a key only where the server's operator already sends it:
each (variable, endpoint origin) pair of the default config (OPENAI_API_KEY to
OPENAI_BASE_URL, else OpenAI), of the configs shipped with the package, and of the configs the
operator lists in $ACCELOPT_MCP_MODEL_CONFIGS. A role whose variable is unset sends nothing of
the server's (a local endpoint gets a placeholder), so it is not refused here.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from accelopt_mcp.llm.config import (
    ROLES,
    LlmConfigError,
    ModelConfig,
    RoleConfigs,
    find_model_config,
    load_role_configs,
    model_config_names,
    shipped_model_config,
)
from accelopt_mcp.redaction import redacted_url

TRUSTED_CONFIGS_ENV = "ACCELOPT_MCP_MODEL_CONFIGS"
"""os.pathsep-separated model configs (paths or shipped names) whose endpoints the operator
trusts with the keys they name, beside the default and the shipped ones."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


class KeyDestinationRefused(LlmConfigError):
    """A config a client named would send a key of the server's environment to an endpoint
    the operator has not paired with that key."""


def origin(url: str) -> str:
    """scheme://host:port of an endpoint (host lower-cased, the scheme's port written out):
    the unit a key is trusted to, whatever path the API sits under."""
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    host = (parsed.hostname or "").lower()
    port = parsed.port or _DEFAULT_PORTS.get(scheme, 0)
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _pairs(configs: RoleConfigs) -> set[tuple[str, str]]:
    return {_pair(configs.for_role(role)) for role in ROLES}


def _pair(config: ModelConfig) -> tuple[str, str]:
    return config.api_key_env, origin(config.resolved_base_url())


def trusted_pairs() -> set[tuple[str, str]]:
    """The (key variable, endpoint origin) pairs the operator's own configs make: the default
    config, every shipped one, and those named in $ACCELOPT_MCP_MODEL_CONFIGS."""
    pairs = _pairs(RoleConfigs())
    for name in model_config_names():
        shipped = shipped_model_config(name)
        if shipped is not None:
            pairs |= _pairs(load_role_configs(shipped))
    for entry in os.environ.get(TRUSTED_CONFIGS_ENV, "").split(os.pathsep):
        if entry.strip():
            try:
                pairs |= _pairs(load_role_configs(find_model_config(entry.strip())))
            except (LlmConfigError, OSError) as exc:
                raise LlmConfigError(
                    f"${TRUSTED_CONFIGS_ENV} names a model config that cannot be loaded "
                    f"({exc}); fix the server's environment"
                ) from None
    return pairs


def require_trusted_destinations(configs: RoleConfigs, where: str) -> None:
    """Raise KeyDestinationRefused when a role of `configs` (a config a client named, `where`)
    would send the value of a variable set in this environment to an endpoint that no
    config of the operator's pairs with that variable."""
    trusted: set[tuple[str, str]] | None = None
    for role in ROLES:
        config = configs.for_role(role)
        if not os.environ.get(config.api_key_env):
            continue
        trusted = trusted_pairs() if trusted is None else trusted
        if _pair(config) in trusted:
            continue
        raise KeyDestinationRefused(
            f"{where}: its {role} would send the key in {config.api_key_env} to "
            f"{redacted_url(config.resolved_base_url())}, where this server sends no key of "
            "its own; name a shipped config, or ask whoever runs the server to list this one "
            f"in ${TRUSTED_CONFIGS_ENV}"
        )

"""Model settings per LLM role (declared once: the fields of RoleConfigs) and the price table.

A config file holds a `default` table that every role inherits, one table per role that
overrides it, and an optional `prices` table. API keys never live in a config: a role names the
environment variable that holds its key.
"""

from __future__ import annotations

import json
import os
import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from accelopt_mcp.tasks.flashinfer_format import unreadable

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"
MODEL_ENV = "ACCELOPT_MODEL"
"""Names the model of every role whose config does not name one (e.g. the model a local vLLM
or llama.cpp server serves, when only OPENAI_BASE_URL points at it)."""

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
M = TypeVar("M", bound=BaseModel)


class LlmConfigError(ValueError):
    """A model config (file, field or environment) is unusable; the message says how to fix it."""


def default_model() -> str:
    """The model a role uses when its config names none: $ACCELOPT_MODEL, else gpt-4.1-mini."""
    return os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


class ModelConfig(BaseModel):
    """How one role talks to its model."""

    # base_url may hold a user:password, so a validation error never repeats a value.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    base_url: str | None = None
    """None: the OPENAI_BASE_URL environment variable, else OpenAI's public endpoint."""
    api_key_env: str = Field(
        default="OPENAI_API_KEY", min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"
    )
    """The NAME of the environment variable that holds the key, never the key itself."""
    model: str = Field(default_factory=default_model, min_length=1)
    """Unset: $ACCELOPT_MODEL, else gpt-4.1-mini."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """OpenAI's reasoning models only accept `max_completion_tokens`; older servers only
    `max_tokens`."""
    reasoning_effort: str | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Sent as is in the request body, for server-specific settings (e.g. vLLM's `top_k`)."""
    timeout_s: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=4, ge=0, le=20)
    retry_base_s: float = Field(default=1.0, ge=0)
    retry_max_s: float = Field(default=60.0, ge=0)
    concurrency: int = Field(default=8, ge=1)

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        # The message never repeats the URL: it may hold a user:password.
        if value is None:
            return value
        try:
            parsed = urlparse(value)
            usable = parsed.scheme in ("http", "https") and bool(parsed.hostname)
            _ = parsed.port  # raises ValueError for a port that is not 0-65535
        except ValueError:
            usable = False
        if not usable:
            raise ValueError(
                "must be an http:// or https:// URL with a host and, if any, a port of 0-65535 "
                "(e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1)"
            )
        return value

    def resolved_base_url(self) -> str:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_BASE_URL

    def is_local(self) -> bool:
        """Local servers (vLLM, llama.cpp) usually accept any key, so none is required."""
        return (urlparse(self.resolved_base_url()).hostname or "") in _LOCAL_HOSTS


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: float = Field(ge=0)
    """USD per one million input (prompt) tokens."""
    output_per_mtok: float = Field(ge=0)


# List prices (USD per 1M tokens) at the time of writing; override them in a config's `prices`.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    name: ModelPrice(input_per_mtok=pin, output_per_mtok=pout)
    for name, (pin, pout) in {
        "gpt-4.1": (2.00, 8.00),
        "gpt-4.1-mini": (0.40, 1.60),
        "gpt-4.1-nano": (0.10, 0.40),
        "gpt-4o": (2.50, 10.00),
        "gpt-4o-mini": (0.15, 0.60),
        "o4-mini": (1.10, 4.40),
        "gpt-5": (1.25, 10.00),
        "gpt-5-mini": (0.25, 2.00),
        "gpt-5-nano": (0.05, 0.40),
    }.items()
}


class PriceTable(BaseModel):
    """Prices by model name. A dated model name ("gpt-4.1-mini-2025-04-14") takes the price of
    its longest listed prefix; a model not listed (a local one) costs nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prices: dict[str, ModelPrice] = Field(default_factory=lambda: dict(DEFAULT_PRICES))

    def with_overrides(self, overrides: dict[str, ModelPrice]) -> PriceTable:
        return PriceTable(prices={**self.prices, **overrides})

    def price_of(self, model: str) -> ModelPrice | None:
        if model in self.prices:
            return self.prices[model]
        prefixes = [name for name in self.prices if model.startswith(name)]
        return self.prices[max(prefixes, key=len)] if prefixes else None

    def cost(self, model: str, tokens_in: int, tokens_out: int) -> float:
        price = self.price_of(model)
        if price is None:
            return 0.0
        return (tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok) / 1e6


class RoleConfigs(BaseModel):
    """The model config of each LLM role, and the prices.

    This is where the roles are declared: every ModelConfig field is one, and everything
    else that names roles follows from these fields (ROLES, the tables a config file may
    hold, the client's per-role concurrency, the models a run records). A new role is one
    field here plus the calls that use it (tests/llm/test_roles.py checks both sides)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    planner: ModelConfig = Field(default_factory=ModelConfig)
    """Proposes an optimization plan for a beam kernel (engine/planner.py)."""
    executor: ModelConfig = Field(default_factory=ModelConfig)
    """Writes the kernel a plan describes, and repairs one that fails (engine/executor.py)."""
    summarizer: ModelConfig = Field(default_factory=ModelConfig)
    """Turns a (slow, fast) kernel pair into a memory item (engine/summarizer.py)."""
    prices: PriceTable = Field(default_factory=PriceTable)

    def for_role(self, role: str) -> ModelConfig:
        if role not in ROLES:
            raise LlmConfigError(f"unknown role {role!r}; the roles are {', '.join(ROLES)}")
        config: ModelConfig = getattr(self, role)
        return config


ROLES: tuple[str, ...] = tuple(
    name for name, field in RoleConfigs.model_fields.items() if field.annotation is ModelConfig
)
"""The LLM roles, in declaration order: the ModelConfig fields of RoleConfigs."""


def _table() -> Any:
    return (dict[str, Any], Field(default_factory=dict))


_ConfigFile = create_model(
    "_ConfigFile",
    __config__=ConfigDict(extra="forbid"),
    __doc__="The file layout (a `default` table, one per role, `prices`); only used to reject "
    "unknown top-level keys with a clear message.",
    default=_table(),
    **{role: _table() for role in ROLES},
    prices=_table(),
)


# Model configs shipped inside the package (package data), usable by name in a source checkout
# and in a wheel install alike.
_SHIPPED_PACKAGE = "accelopt_mcp.llm"
_SHIPPED_FOLDER = "model_configs"


def _shipped_folder() -> Traversable:
    return resources.files(_SHIPPED_PACKAGE) / _SHIPPED_FOLDER


def shipped_configs_location() -> str:
    """Where the shipped model configs are, for messages that point at examples."""
    return str(_shipped_folder())


def model_config_names() -> list[str]:
    """Names of the model configs shipped with the package (openai, llamacpp, ...)."""
    folder = _shipped_folder()
    if not folder.is_dir():
        return []
    return sorted(
        entry.name.removesuffix(".json")
        for entry in folder.iterdir()
        if entry.name.endswith(".json") and entry.is_file()
    )


def shipped_model_config(name: str) -> Path | None:
    """The file of the shipped model config `name`, None when there is no such config."""
    if name not in model_config_names():
        return None
    entry = _shipped_folder() / f"{name}.json"
    if isinstance(entry, Path):
        return entry
    # Installed as a zip: a run keeps the path of its config, so the file must live on disk.
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    copy = cache / "accelopt" / _SHIPPED_FOLDER / f"{name}.json"
    text = entry.read_text(encoding="utf-8")
    if not copy.is_file() or copy.read_text(encoding="utf-8") != text:
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text, encoding="utf-8")
    return copy


def find_model_config(name_or_path: str) -> Path:
    """The model config file a name (a shipped config, see model_config_names) or a path
    means, loaded once so that a broken one is reported now (LlmConfigError says what to fix),
    not at the first LLM call of a run. A file of that name wins over a shipped config."""
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        path = shipped_model_config(name_or_path) or path
    if path.is_file():
        load_role_configs(path)
        return path
    names = ", ".join(model_config_names()) or "none shipped with this install"
    raise LlmConfigError(
        f"model config {name_or_path!r} is neither a file nor a shipped config name ({names}); "
        "give the path of a JSON/TOML model config (examples: the shipped ones in "
        f"{shipped_configs_location()})"
    )


def load_role_configs(path: Path | None = None) -> RoleConfigs:
    """Role configs from a JSON or TOML file; None gives the defaults (OpenAI, or whatever
    OPENAI_BASE_URL points at, with the key from OPENAI_API_KEY and the model from
    ACCELOPT_MODEL, else gpt-4.1-mini)."""
    if path is None:
        return RoleConfigs()
    path = Path(path)
    if not path.is_file():
        path = _moved_shipped_config(path) or path
    raw = _read_config_file(path)
    return role_configs_from_dict(raw, source=str(path))


def _moved_shipped_config(path: Path) -> Path | None:
    """A shipped config at the place older versions kept them (a run stores its config's
    path: templates/models/NAME.json in a source tree, before they moved into the package),
    so that runs started then still resume; None for any other path."""
    if path.parent.name == "models" and path.parent.parent.name == "templates":
        return shipped_model_config(path.stem)
    return None


def role_configs_from_dict(raw: dict[str, Any], *, source: str = "config") -> RoleConfigs:
    layout = _validated(_ConfigFile, raw, source)
    tables: dict[str, dict[str, Any]] = layout.model_dump()
    roles: dict[str, ModelConfig] = {}
    for role in ROLES:
        merged = {**tables["default"], **tables[role]}
        where = f"{source}: role {role} (its own table merged over `default`)"
        roles[role] = _validated(ModelConfig, merged, where)
    overrides = {
        model: _validated(ModelPrice, price, f"{source}: prices.{model}")
        for model, price in tables["prices"].items()
    }
    return RoleConfigs(**roles, prices=PriceTable().with_overrides(overrides))


def _validated(model: type[M], data: Any, where: str) -> M:
    """`data` as a `model`, else LlmConfigError saying what in it is wrong (at `where`)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise LlmConfigError(_describe(exc, where, allowed=list(model.model_fields))) from None


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise LlmConfigError(
            f"model config {path} does not exist; see {shipped_configs_location()} for examples"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LlmConfigError(unreadable(path, "model config", exc)) from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        elif path.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            raise LlmConfigError(f"model config {path}: use a .json or .toml file")
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LlmConfigError(f"model config {path} is not valid {path.suffix[1:]}: {exc}") from None
    if not isinstance(data, dict):
        raise LlmConfigError(f"model config {path}: the top level must be a table/object")
    return data


def _describe(exc: ValidationError, where: str, *, allowed: list[str]) -> str:
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden" and field.endswith("api_key"):
            problems.append(
                f"unknown field {field!r}: keys never go in a config file; put the key in an "
                "environment variable and name that variable in `api_key_env`"
            )
        elif error["type"] == "extra_forbidden":
            problems.append(f"unknown field {field!r} (allowed: {', '.join(allowed)})")
        else:
            problems.append(f"{field}: {error['msg']}")
    return f"{where}: " + "; ".join(problems)

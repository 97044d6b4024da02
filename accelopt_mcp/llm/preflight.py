"""Before a run: is every role's endpoint reachable, does it take the key, does it serve the
model? One cheap check per distinct (endpoint, key variable, model), so that a dead endpoint is
a one-line refusal before any run row exists, not 18 failed attempts and a "completed" run.

The check lists the endpoint's models (GET /models: free, no tokens). When the list confirms
the model, that is enough. When it does not (llama.cpp serves whatever is loaded under any
name; some proxies have no /models route; a list may omit aliases) the check sends one chat
completion capped at one output token, and the server's own answer decides.

What refuses a run: a connection that fails or times out, HTTP 401/403, an unknown model
(404, or a 400 that says so), any other 4xx, and a 5xx on the chat probe. A 429 passes: the
endpoint is there, takes the key and knows the model; it is only busy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accelopt_mcp.llm.client import _api_key as api_key_for
from accelopt_mcp.llm.config import ROLES, ModelConfig, RoleConfigs
from accelopt_mcp.llm.errors import short_error
from accelopt_mcp.redaction import redacted_url

if TYPE_CHECKING:
    # Imported where a check runs, as in llm/client.py: the SDK takes half a second to import,
    # which every `accelopt` command would pay at start-up (the CLI imports this module).
    from openai import AsyncOpenAI

__all__ = ["PreflightFailed", "check_endpoints", "check_endpoints_now", "roles_used"]

_PROBE_TIMEOUT_S = 20.0
# A 400 that says the model is unknown (servers word it differently), not any 400 that names
# a model ("max_tokens is not supported with this model").
_UNKNOWN_MODEL = re.compile(
    r"(unknown|invalid|no such|not found|does not exist|doesn't exist|not exist)\W+(\w+\W+){0,3}"
    r"model|model\W+(\S+\W+){0,4}(not found|does not exist|doesn't exist|unknown|is not "
    r"(served|available|supported)\b(?! with))",
    re.IGNORECASE,
)


class PreflightFailed(ValueError):
    """An endpoint a run needs cannot be used; the message is one line naming the endpoint,
    the model and what to set."""


@dataclass(frozen=True)
class _Target:
    base_url: str
    key_env: str
    model: str
    config: ModelConfig
    roles: tuple[str, ...]


def _targets(configs: RoleConfigs, roles: Sequence[str]) -> list[_Target]:
    grouped: dict[tuple[str, str, str], list[str]] = {}
    first: dict[tuple[str, str, str], ModelConfig] = {}
    for role in roles:
        config = configs.for_role(role)
        key = (config.resolved_base_url(), config.api_key_env, config.model)
        grouped.setdefault(key, []).append(role)
        first.setdefault(key, config)
    return [
        _Target(base_url=k[0], key_env=k[1], model=k[2], config=first[k], roles=tuple(v))
        for k, v in grouped.items()
    ]


async def check_endpoints(
    configs: RoleConfigs, roles: Sequence[str] = ROLES, *, timeout_s: float = _PROBE_TIMEOUT_S
) -> None:
    """Raise PreflightFailed (one line) for the first role whose endpoint cannot serve it;
    LlmConfigError when a role's key variable is unset. Distinct targets are checked at once."""
    targets = _targets(configs, roles)
    problems = await asyncio.gather(*(_check(t, timeout_s) for t in targets))
    for problem in problems:
        if problem is not None:
            raise PreflightFailed(problem)


def roles_used(summarize: bool) -> tuple[str, ...]:
    """The roles a run calls: the summarizer only when it summarizes."""
    return ROLES if summarize else tuple(role for role in ROLES if role != "summarizer")


def check_endpoints_now(
    configs: RoleConfigs, roles: Sequence[str] = ROLES, *, timeout_s: float = _PROBE_TIMEOUT_S
) -> None:
    """check_endpoints from synchronous code, inside a running event loop or not (an MCP
    tool's thread may have one): the check runs on its own loop in a short-lived thread."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llm-check") as pool:
        pool.submit(asyncio.run, check_endpoints(configs, roles, timeout_s=timeout_s)).result()


async def _check(target: _Target, timeout_s: float) -> str | None:
    key = api_key_for(target.roles[0], target.config)
    endpoint = redacted_url(target.base_url, [key])
    who = f"{'/'.join(target.roles)} model {target.model!r} at {endpoint}"
    timeout = min(timeout_s, target.config.timeout_s)
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key=key, base_url=target.base_url, timeout=timeout, max_retries=0)
    try:
        listed = await _listed_models(client)
        if isinstance(listed, str):
            return _refusal(listed, who, target, key)
        if listed is not None and target.model in listed:
            return None
        problem = await _chat_probe(client, target.config)
        if problem is None:
            return None
        if problem.startswith("unknown model") and listed:
            shown = ", ".join(sorted(listed)[:8]) + (", ..." if len(listed) > 8 else "")
            problem += f" (the endpoint lists: {shown})"
        return _refusal(problem, who, target, key)
    finally:
        await client.close()


async def _listed_models(client: AsyncOpenAI) -> set[str] | str | None:
    """The model ids the endpoint lists; None when it has no usable list (ask the chat route);
    a problem text when the endpoint is unreachable or refuses the key."""
    import openai

    try:
        page = await client.models.list()
    except (openai.APITimeoutError, openai.APIConnectionError) as exc:
        return _connection_problem(exc)
    except openai.APIStatusError as exc:
        if exc.status_code in (401, 403):
            return f"key rejected (HTTP {exc.status_code})"
        return None
    except ValueError:
        return None  # not JSON: no list to read
    try:
        return {model.id for model in page.data}
    except (AttributeError, TypeError):
        return None


async def _chat_probe(client: AsyncOpenAI, config: ModelConfig) -> str | None:
    """One chat completion capped at one output token; None when the server served it."""
    args: dict[str, object] = {
        "model": config.model,
        "messages": [{"role": "user", "content": "Reply with the word ok."}],
        config.max_tokens_param: 1,
    }
    if config.extra_body:
        args["extra_body"] = dict(config.extra_body)
    import openai

    try:
        await client.chat.completions.create(**args)  # type: ignore[call-overload]
    except (openai.APITimeoutError, openai.APIConnectionError) as exc:
        return _connection_problem(exc)
    except openai.APIStatusError as exc:
        status = exc.status_code
        message = re.sub(r"^Error code: \d+ - ", "", exc.message)
        if status in (401, 403):
            return f"key rejected (HTTP {status})"
        if status == 429:
            return None  # there, takes the key, knows the model: only busy
        if status == 404 or (status == 400 and _UNKNOWN_MODEL.search(message)):
            return f"unknown model (HTTP {status}: {message})"
        return f"HTTP {status}: {message}"
    except ValueError:
        return None  # it answered, if not in JSON: the run's own calls will say more
    return None


def _connection_problem(exc: Exception) -> str:
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "no answer in time"
    cause = exc.__cause__ or exc
    return f"unreachable ({cause})"


def _refusal(problem: str, who: str, target: _Target, key: str) -> str:
    if problem.startswith("unreachable") or problem == "no answer in time":
        fix = (
            "start the server, or point base_url in the model config (or OPENAI_BASE_URL) at "
            "one that runs"
        )
    elif problem.startswith("key rejected"):
        fix = f"export a valid key in {target.key_env}"
    elif problem.startswith("unknown model"):
        fix = "set `model` in the model config (or ACCELOPT_MODEL) to a model the endpoint serves"
    else:
        fix = "check the endpoint and the model config"
    text = f"LLM check failed for {who}: {problem}; {fix}"
    return short_error(text, [key])

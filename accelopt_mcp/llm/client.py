"""The chat client the engine uses: one OpenAI-compatible endpoint per role, bounded retries,
a concurrency cap per role, a ledger row for every attempt and a spending budget.

Retries are ours, not the SDK's (it is built with max_retries=0), so that every attempt, failed
or not, lands in the ledger and the budget is checked before each one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Literal, TypeVar

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

from accelopt_mcp.llm.budget import Budget, BudgetExceeded
from accelopt_mcp.llm.config import ROLES, LlmConfigError, ModelConfig, RoleConfigs
from accelopt_mcp.llm.parsing import MalformedReply
from accelopt_mcp.models import LlmCallIn
from accelopt_mcp.redaction import redact, redacted_url

log = logging.getLogger(__name__)
T = TypeVar("T")

_PLACEHOLDER_LOCAL_KEY = "not-needed"
# A server asking for a longer pause than this is treated as "give up", not waited on.
_MAX_RETRY_AFTER_S = 300.0
_MAX_ERROR_CHARS = 500


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class LlmReply(BaseModel):
    text: str
    tokens_in: int
    tokens_out: int
    latency_s: float
    """Of the successful attempt only."""
    cost_usd: float
    model: str
    finish_reason: str | None = None
    """"length" means max_tokens cut the reply short."""
    attempts: int = 1
    usage_estimated: bool = False
    """True when the server reported no usage and tokens were estimated from characters."""


class LlmError(Exception):
    """Base of the client's errors; messages never hold a key."""


class LlmCallFailed(LlmError):
    """A call failed for good: retries ran out or the error is not one that retrying fixes."""

    def __init__(self, message: str, *, role: str, model: str, attempts: int, last_error: str):
        super().__init__(message)
        self.role = role
        self.model = model
        self.attempts = attempts
        self.last_error = last_error


LedgerFn = Callable[[LlmCallIn], None]


@dataclass
class _Outcome:
    reply: LlmReply | None = None
    error: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None


class LlmClient:
    """Use one client per event loop (its SDK connections and semaphores belong to the loop)
    and close it with `aclose()` or `async with`. The ledger callback runs in a worker thread;
    an exception from it propagates, since a ledger that silently drops rows is worse than a
    stopped run."""

    def __init__(
        self,
        configs: RoleConfigs,
        *,
        ledger: LedgerFn | None = None,
        run_id: str | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.configs = configs
        self.run_id = run_id
        self.budget = budget
        self._ledger = ledger
        self._semaphores = {
            role: asyncio.Semaphore(configs.for_role(role).concurrency) for role in ROLES
        }
        self._clients: dict[str, tuple[str, AsyncOpenAI]] = {}
        self._stale: list[AsyncOpenAI] = []

    async def __aenter__(self) -> LlmClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        clients = [client for _, client in self._clients.values()] + self._stale
        self._clients.clear()
        self._stale.clear()
        for client in clients:
            await client.close()

    async def complete(
        self, role: str, messages: Sequence[ChatMessage | Mapping[str, str]]
    ) -> LlmReply:
        """One chat completion for `role`. Raises BudgetExceeded before an attempt that would
        start over budget, LlmCallFailed when the call fails for good, LlmConfigError when the
        role's config or environment is unusable."""
        config = self.configs.for_role(role)
        chat = [_as_message(message) for message in messages]
        if not chat:
            raise LlmError(f"{role} call with no messages; pass at least one user message")
        async with self._semaphores[role]:
            return await self._complete_with_retries(role, config, chat)

    async def complete_parsed(
        self,
        role: str,
        messages: Sequence[ChatMessage | Mapping[str, str]],
        parse: Callable[[str], T],
        *,
        tries: int = 2,
    ) -> tuple[T, LlmReply]:
        """complete() then parse(text); a reply that parse() rejects with MalformedReply is
        asked for again, up to `tries` replies in all. Raises the last MalformedReply (with
        `.reply` set to the rejected reply) when none parses."""
        if tries < 1:
            raise ValueError(f"tries must be at least 1, got {tries}")
        last: MalformedReply | None = None
        for _ in range(tries):
            reply = await self.complete(role, messages)
            try:
                return parse(reply.text), reply
            except MalformedReply as exc:
                exc.reply = reply
                last = exc
                log.info("%s reply rejected by the parser: %s", role, exc.reason)
        assert last is not None
        raise last

    # ------------------------------------------------------------------ attempts

    async def _complete_with_retries(
        self, role: str, config: ModelConfig, chat: list[ChatMessage]
    ) -> LlmReply:
        max_attempts = config.max_retries + 1
        for attempt in range(1, max_attempts + 1):
            if self.budget is not None:
                self.budget.check()
            api_key, client = await self._client_for(role, config)
            started = time.monotonic()
            outcome = await self._attempt(client, config, chat, api_key)
            latency = time.monotonic() - started
            if outcome.reply is not None and self.budget is not None:
                self.budget.charge(
                    outcome.reply.tokens_in, outcome.reply.tokens_out, outcome.reply.cost_usd
                )
            await self._record(role, config, outcome, latency)
            if outcome.reply is not None:
                return outcome.reply.model_copy(update={"latency_s": latency, "attempts": attempt})
            error = outcome.error or "unknown error"
            if not outcome.retryable or attempt == max_attempts:
                why = "not retryable" if not outcome.retryable else "no retries left"
                endpoint = redacted_url(config.resolved_base_url(), [api_key])
                raise LlmCallFailed(
                    f"{role} call to model {config.model!r} at {endpoint} failed after "
                    f"{attempt} attempt(s) ({why}): {error}",
                    role=role,
                    model=config.model,
                    attempts=attempt,
                    last_error=error,
                )
            delay = _backoff_s(config, attempt, outcome.retry_after_s)
            log.info("%s attempt %d failed (%s); retrying in %.2f s", role, attempt, error, delay)
            self._check_wall_room(delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")

    async def _attempt(
        self, client: AsyncOpenAI, config: ModelConfig, chat: list[ChatMessage], api_key: str
    ) -> _Outcome:
        secrets = [api_key]
        try:
            completion = await client.chat.completions.create(**_request_args(config, chat))
        except openai.APITimeoutError:
            return _Outcome(error=f"timed out after {config.timeout_s:g} s", retryable=True)
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            return _Outcome(
                error=short_error(f"connection error: {cause}", secrets), retryable=True
            )
        except openai.APIStatusError as exc:
            return _status_outcome(exc, config, secrets)
        except ValueError as exc:
            # The SDK raises json's decode error when a JSON-typed body is not JSON.
            return _Outcome(
                error=short_error(f"malformed reply body: {exc}", secrets), retryable=True
            )
        return self._reply_outcome(completion, config, chat, secrets)

    def _reply_outcome(
        self, completion: object, config: ModelConfig, chat: list[ChatMessage], secrets: list[str]
    ) -> _Outcome:
        if not isinstance(completion, ChatCompletion):
            # A body that is not JSON at all comes back from the SDK as a plain string.
            return _Outcome(
                error=short_error(
                    f"malformed reply: not a chat completion: {completion!r:.200}", secrets
                ),
                retryable=True,
            )
        if not completion.choices:
            return _Outcome(error="malformed reply: no choices", retryable=True)
        choice = completion.choices[0]
        text = choice.message.content if choice.message is not None else None
        if text is None:
            return _Outcome(
                error="malformed reply: the first choice has no message content", retryable=True
            )
        usage = completion.usage
        estimated = usage is None
        if usage is None:
            # Some servers omit usage; a rough estimate keeps token budgets meaningful.
            prompt_chars = sum(len(message.content) for message in chat)
            tokens_in, tokens_out = max(1, prompt_chars // 4), max(1, len(text) // 4)
        else:
            tokens_in, tokens_out = usage.prompt_tokens, usage.completion_tokens
        reply = LlmReply(
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_s=0.0,
            cost_usd=self.configs.prices.cost(config.model, tokens_in, tokens_out),
            model=config.model,
            finish_reason=choice.finish_reason,
            usage_estimated=estimated,
        )
        return _Outcome(reply=reply)

    # ------------------------------------------------------------------ helpers

    async def _client_for(self, role: str, config: ModelConfig) -> tuple[str, AsyncOpenAI]:
        """The role's SDK client, rebuilt when its key changed in the environment."""
        api_key = _api_key(role, config)
        cached = self._clients.get(role)
        if cached is not None and cached[0] == api_key:
            return cached
        if cached is not None:
            self._stale.append(cached[1])
        client = AsyncOpenAI(
            api_key=api_key,
            base_url=config.resolved_base_url(),
            timeout=config.timeout_s,
            max_retries=0,
        )
        self._clients[role] = (api_key, client)
        return api_key, client

    async def _record(
        self, role: str, config: ModelConfig, outcome: _Outcome, latency: float
    ) -> None:
        if self._ledger is None:
            return
        reply = outcome.reply
        row = LlmCallIn(
            run_id=self.run_id,
            role=role,
            model=config.model,
            tokens_in=reply.tokens_in if reply else 0,
            tokens_out=reply.tokens_out if reply else 0,
            latency_s=latency,
            cost_usd=reply.cost_usd if reply else 0.0,
            ok=reply is not None,
            error=outcome.error if reply is None else None,
        )
        # Stores are synchronous; a database round trip must not stall the event loop.
        await asyncio.to_thread(self._ledger, row)

    def _check_wall_room(self, delay: float) -> None:
        if self.budget is None:
            return
        remaining = self.budget.remaining_wall_s()
        if remaining is not None and remaining < delay:
            raise BudgetExceeded(
                f"wall-time budget would run out during a {delay:.1f} s retry pause "
                f"({max(remaining, 0.0):.1f} s left)",
                self.budget.usage(),
            )


def _as_message(message: ChatMessage | Mapping[str, str]) -> ChatMessage:
    return (
        message if isinstance(message, ChatMessage) else ChatMessage.model_validate(dict(message))
    )


def _api_key(role: str, config: ModelConfig) -> str:
    key = os.environ.get(config.api_key_env, "")
    if key:
        return key
    if config.is_local():
        return _PLACEHOLDER_LOCAL_KEY
    raise LlmConfigError(
        f"{role}: the environment variable {config.api_key_env} is not set; export the API key "
        f"for {redacted_url(config.resolved_base_url())} in it (or set api_key_env in the model "
        "config to the variable that holds it)"
    )


def _request_args(config: ModelConfig, chat: list[ChatMessage]) -> dict[str, Any]:
    args: dict[str, Any] = {
        "model": config.model,
        "messages": [message.model_dump() for message in chat],
    }
    if config.temperature is not None:
        args["temperature"] = config.temperature
    if config.top_p is not None:
        args["top_p"] = config.top_p
    if config.max_tokens is not None:
        args[config.max_tokens_param] = config.max_tokens
    if config.reasoning_effort is not None:
        args["reasoning_effort"] = config.reasoning_effort
    if config.extra_body:
        args["extra_body"] = dict(config.extra_body)
    return args


def _status_outcome(
    exc: openai.APIStatusError, config: ModelConfig, secrets: list[str]
) -> _Outcome:
    status = exc.status_code
    message = re.sub(r"^Error code: \d+ - ", "", exc.message)
    detail = short_error(f"HTTP {status}: {message}", secrets)
    if status == 401:
        detail += f" (the server rejected the key in {config.api_key_env})"
    retry_after = _retry_after_s(exc.response.headers)
    if retry_after is not None and retry_after > _MAX_RETRY_AFTER_S:
        return _Outcome(
            error=f"{detail} (server asks to wait {retry_after:.0f} s)", retryable=False
        )
    retryable = status in (408, 409, 429) or status >= 500
    return _Outcome(error=detail, retryable=retryable, retry_after_s=retry_after)


def _retry_after_s(headers: Mapping[str, str]) -> float | None:
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _backoff_s(config: ModelConfig, attempt: int, retry_after: float | None) -> float:
    """Exponential backoff with jitter, never shorter than the server's Retry-After."""
    exponential = min(config.retry_max_s, config.retry_base_s * 2.0 ** (attempt - 1))
    jittered = exponential * random.uniform(0.5, 1.0)
    return max(jittered, retry_after) if retry_after is not None else jittered


def short_error(text: str, secrets: Sequence[str] = ()) -> str:
    """A redacted, one-line, bounded error text for the ledger and exception messages."""
    flat = " ".join(redact(text, secrets).split())
    if len(flat) > _MAX_ERROR_CHARS:
        return flat[: _MAX_ERROR_CHARS - 3] + "..."
    return flat

"""The chat client the engine uses: one OpenAI-compatible endpoint per role, bounded retries,
a concurrency cap per role, a ledger row for every attempt and a spending budget.

Retries are ours, not the SDK's (it is built with max_retries=0), so that every attempt, failed
or not, lands in the ledger and the budget is checked before each one.

An attempt, in order: the budget reserves what it may use (its prompt, estimated on the high
side at RESERVE_CHARS_PER_TOKEN characters a token, plus the output it asks for at most: the
role's max_tokens, or DEFAULT_OUTPUT_TOKENS when none is set, cut down to what is left under a
token or dollar cap, and never under MIN_OUTPUT_TOKENS (or the role's own max_tokens, when
smaller); that limit goes with the request, so no reply can outgrow its reservation; refused
only because calls in flight hold the rest, it waits for one of them to end and asks again,
refused because the spending leaves no room, it raises BudgetExceeded unsent); the ledger
gets its row with status "in_flight", the prompt (redacted: the role's API key and the usual
patterns) and the prompt's estimated tokens and cost; the request is sent; the reservation is
settled with the real usage and the row updated under the same id ("ok" or "failed", tokens,
cost, latency, the redacted reply; a timed-out attempt keeps its prompt estimate, since the
server may have billed it). An attempt cancelled while waiting (the task cancelled, the
process stopping) settles with its prompt estimate and is recorded "interrupted"; a process
killed outright leaves its row in flight, for the next worker to mark interrupted.

Beside it: messages.py (the chat's models and its token estimates), errors.py (the client's
errors, which failures retrying fixes, Retry-After and backoff) and ledger.py (the rows).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from accelopt_mcp.llm.budget import Budget, BudgetExceeded, Reservation
from accelopt_mcp.llm.config import ROLES, LlmConfigError, ModelConfig, RoleConfigs
from accelopt_mcp.llm.errors import (
    LlmCallFailed,
    LlmError,
    Outcome,
    backoff_s,
    short_error,
    status_outcome,
)
from accelopt_mcp.llm.ledger import Attempt, AttemptLedger, LedgerFn
from accelopt_mcp.llm.messages import (
    ChatMessage,
    LlmReply,
    as_message,
    estimate_tokens,
    reserved_prompt_tokens,
)
from accelopt_mcp.llm.parsing import MalformedReply
from accelopt_mcp.redaction import redacted_url

if TYPE_CHECKING:
    # The SDK is imported where a call is made: it takes half a second to import, which every
    # `accelopt` command (profile, db, ...) would pay at start-up otherwise.
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)
T = TypeVar("T")

_PLACEHOLDER_LOCAL_KEY = "not-needed"
_ROOM_RECHECK_S = 1.0
DEFAULT_OUTPUT_TOKENS = 4096
"""Output tokens a call reserves of the budget when its role sets no max_tokens."""
MIN_OUTPUT_TOKENS = 256
"""The least output a call is sent with when a cap cuts it down: less is no useful reply."""


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
        self.budget = budget
        self._ledger = AttemptLedger(ledger, run_id)
        self._semaphores = {
            role: asyncio.Semaphore(configs.for_role(role).concurrency) for role in ROLES
        }
        self._clients: dict[str, tuple[str, AsyncOpenAI]] = {}
        self._stale: list[AsyncOpenAI] = []
        self._in_flight = dict.fromkeys(ROLES, 0)
        self._room = asyncio.Event()
        """Set (and replaced) whenever an attempt settles its reservation."""

    @property
    def run_id(self) -> str | None:
        """The run every ledger row of this client is written under."""
        return self._ledger.run_id

    def in_flight(self) -> dict[str, int]:
        """Calls per role sent and waiting on a reply now (not those queued for a slot)."""
        return dict(self._in_flight)

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
        self,
        role: str,
        messages: Sequence[ChatMessage | Mapping[str, str]],
        *,
        purpose: str | None = None,
    ) -> LlmReply:
        """One chat completion for `role`; `purpose` (free text, e.g. "plan 2/0") goes into
        the ledger rows of its attempts. Raises BudgetExceeded before an attempt that would
        start over budget (counting what calls in flight reserved), LlmCallFailed when the
        call fails for good, LlmConfigError when the role's config or environment is
        unusable."""
        config = self.configs.for_role(role)
        chat = [as_message(message) for message in messages]
        if not chat:
            raise LlmError(f"{role} call with no messages; pass at least one user message")
        async with self._semaphores[role]:
            return await self._complete_with_retries(role, config, chat, purpose)

    async def complete_parsed(
        self,
        role: str,
        messages: Sequence[ChatMessage | Mapping[str, str]],
        parse: Callable[[str], T],
        *,
        tries: int = 2,
        purpose: str | None = None,
    ) -> tuple[T, LlmReply]:
        """complete() then parse(text); a reply that parse() rejects with MalformedReply is
        asked for again, up to `tries` replies in all (each under the same `purpose`). Raises
        the last MalformedReply (with `.reply` set to the rejected reply) when none parses."""
        if tries < 1:
            raise ValueError(f"tries must be at least 1, got {tries}")
        last: MalformedReply | None = None
        for _ in range(tries):
            reply = await self.complete(role, messages, purpose=purpose)
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
        self, role: str, config: ModelConfig, chat: list[ChatMessage], purpose: str | None
    ) -> LlmReply:
        max_attempts = config.max_retries + 1
        chars = sum(len(message.content) for message in chat)
        prompt_tokens = estimate_tokens(chars)
        reserved_prompt = reserved_prompt_tokens(chars, len(chat))
        for attempt in range(1, max_attempts + 1):
            api_key, client = await self._client_for(role, config)
            call = Attempt(
                role=role,
                config=config,
                purpose=purpose,
                api_key=api_key,
                prompt_tokens=prompt_tokens,
                prompt_cost_usd=self.configs.prices.cost(config.model, prompt_tokens, 0),
                reserved_prompt_tokens=reserved_prompt,
                max_output=config.max_tokens,
            )
            reservation = await self._reserve_when_room(call)
            try:
                await self._ledger.record_start(call, chat)
            except BaseException:
                self._settle(call, reservation, None)
                raise
            outcome, latency = await self._send(call, client, chat, reservation)
            self._settle(call, reservation, outcome)
            await self._ledger.record(call, outcome, latency)
            if outcome.reply is not None:
                return outcome.reply.model_copy(
                    update={"latency_s": latency, "attempts": attempt, "call_id": call.id}
                )
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
            delay = backoff_s(config, attempt, outcome.retry_after_s)
            log.info("%s attempt %d failed (%s); retrying in %.2f s", role, attempt, error, delay)
            self._check_wall_room(delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")

    async def _send(
        self,
        call: Attempt,
        client: AsyncOpenAI,
        chat: list[ChatMessage],
        reservation: Reservation | None,
    ) -> tuple[Outcome, float]:
        """The request, counted in flight while it waits; the outcome and its latency. An
        attempt cancelled while waiting is settled with its prompt estimate and recorded as
        interrupted (one that raised something unexpected: as failed), then re-raised."""
        self._in_flight[call.role] += 1
        started = time.monotonic()
        try:
            outcome = await self._attempt(client, call, chat)
        except BaseException as exc:
            self._in_flight[call.role] -= 1
            if reservation is not None and self.budget is not None:
                # The provider may bill the prompt of a request it got: count its estimate.
                self.budget.settle(reservation, call.prompt_tokens, 0, call.prompt_cost_usd)
                self._made_room()
            self._ledger.record_unfinished(call, time.monotonic() - started, exc)
            raise
        self._in_flight[call.role] -= 1
        return outcome, time.monotonic() - started

    async def _attempt(
        self, client: AsyncOpenAI, call: Attempt, chat: list[ChatMessage]
    ) -> Outcome:
        import openai

        config = call.config
        secrets = [call.api_key]
        try:
            completion = await client.chat.completions.create(
                **_request_args(config, chat, call.max_output)
            )
        except openai.APITimeoutError:
            return Outcome(
                error=f"timed out after {config.timeout_s:g} s", retryable=True, prompt_billed=True
            )
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            return Outcome(error=short_error(f"connection error: {cause}", secrets), retryable=True)
        except openai.APIStatusError as exc:
            return status_outcome(exc, config, secrets)
        except ValueError as exc:
            # The SDK raises json's decode error when a JSON-typed body is not JSON.
            return Outcome(
                error=short_error(f"malformed reply body: {exc}", secrets), retryable=True
            )
        return self._reply_outcome(completion, config, chat, secrets)

    def _reply_outcome(
        self, completion: object, config: ModelConfig, chat: list[ChatMessage], secrets: list[str]
    ) -> Outcome:
        from openai.types.chat import ChatCompletion

        if not isinstance(completion, ChatCompletion):
            # A body that is not JSON at all comes back from the SDK as a plain string.
            return Outcome(
                error=short_error(
                    f"malformed reply: not a chat completion: {completion!r:.200}", secrets
                ),
                retryable=True,
            )
        if not completion.choices:
            return Outcome(error="malformed reply: no choices", retryable=True)
        choice = completion.choices[0]
        text = choice.message.content if choice.message is not None else None
        if text is None:
            return Outcome(
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
        return Outcome(reply=reply)

    # ------------------------------------------------------------------ helpers

    async def _client_for(self, role: str, config: ModelConfig) -> tuple[str, AsyncOpenAI]:
        """The role's SDK client, rebuilt when its key changed in the environment."""
        api_key = _api_key(role, config)
        cached = self._clients.get(role)
        if cached is not None and cached[0] == api_key:
            return cached
        if cached is not None:
            self._stale.append(cached[1])
        from openai import AsyncOpenAI

        client = AsyncOpenAI(
            api_key=api_key,
            base_url=config.resolved_base_url(),
            timeout=config.timeout_s,
            max_retries=0,
        )
        self._clients[role] = (api_key, client)
        return api_key, client

    async def _reserve_when_room(self, call: Attempt) -> Reservation | None:
        """Hold the attempt's estimate: its prompt and the most it may write. While only the
        reservations of calls in flight stand in the way, wait for one to settle (checking
        again every second, in case another client shares the budget)."""
        budget = self.budget
        if budget is None:
            return None
        config = call.config
        prices, model = self.configs.prices, config.model
        prompt = call.reserved_prompt_tokens
        wanted = config.max_tokens if config.max_tokens is not None else DEFAULT_OUTPUT_TOKENS
        capped = budget.limits.max_tokens is not None or budget.limits.max_usd is not None
        per_output = prices.cost(model, 0, 1_000_000) / 1_000_000
        while True:
            room = self._room
            output = wanted
            # Sized to what spending leaves, not what calls in flight hold: a call that does
            # not fit beside them waits for them to settle (they mostly use far less than they
            # hold) rather than going out with its reply cut short.
            tokens_left, usd_left = budget.room(held=False)
            if tokens_left is not None:
                output = min(output, tokens_left - prompt)
            if usd_left is not None and per_output > 0:
                output = min(output, int((usd_left - prices.cost(model, prompt, 0)) / per_output))
            output = max(output, min(wanted, MIN_OUTPUT_TOKENS))
            if capped:
                # The reservation holds the most it may use only if the server is told so.
                call.max_output = output
            try:
                return budget.reserve(prompt + output, prices.cost(model, prompt, output))
            except BudgetExceeded as exc:
                if not exc.reserved_only:
                    raise
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(room.wait(), timeout=_ROOM_RECHECK_S)

    def _settle(
        self, call: Attempt, reservation: Reservation | None, outcome: Outcome | None
    ) -> None:
        """Release the reservation; a reply counts what it used, a timeout its prompt's
        estimate, another failure nothing."""
        if reservation is None or self.budget is None:
            return
        reply = outcome.reply if outcome is not None else None
        if reply is not None:
            self.budget.settle(reservation, reply.tokens_in, reply.tokens_out, reply.cost_usd)
        elif outcome is not None and outcome.prompt_billed:
            self.budget.settle(reservation, call.prompt_tokens, 0, call.prompt_cost_usd)
        else:
            self.budget.settle(reservation, spent=False)
        self._made_room()

    def _made_room(self) -> None:
        """Wake the attempts waiting for budget room."""
        self._room.set()
        self._room = asyncio.Event()

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


def check_keys(configs: RoleConfigs, roles: Sequence[str]) -> None:
    """Raise LlmConfigError, sending nothing, when a role's API key variable is not set (and
    its endpoint is not a local server, which needs none)."""
    for role in roles:
        _api_key(role, configs.for_role(role))


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


def _limit_param(config: ModelConfig) -> str:
    """The name the output limit goes under: the role's, except that OpenAI's own endpoint,
    whose reasoning models refuse `max_tokens`, always gets `max_completion_tokens` (every
    model there takes it), so a budget's limit reaches a role that set none."""
    host = urlparse(config.resolved_base_url()).hostname or ""
    if host == "api.openai.com":
        return "max_completion_tokens"
    return config.max_tokens_param


def _request_args(
    config: ModelConfig, chat: list[ChatMessage], max_output: int | None
) -> dict[str, Any]:
    """The request: the model, the messages, the role's sampling settings, and `max_output`
    (the attempt's: the role's max_tokens, or what the budget reserved for) as the output
    limit; None: the server's own."""
    args: dict[str, Any] = {
        "model": config.model,
        "messages": [message.model_dump() for message in chat],
    }
    if config.temperature is not None:
        args["temperature"] = config.temperature
    if config.top_p is not None:
        args["top_p"] = config.top_p
    if max_output is not None:
        args[_limit_param(config)] = max_output
    if config.reasoning_effort is not None:
        args["reasoning_effort"] = config.reasoning_effort
    if config.extra_body:
        args["extra_body"] = dict(config.extra_body)
    return args

"""Riding out a short database outage: one retry policy for the PostgreSQL and Supabase stores.

What is retried: a failure that says the database is away for now -- the connection lost or
refused, the server restarting or shutting down (SQLSTATE class 08, 57P01-57P03), a
serialization failure or deadlock (40001, 40P01), no pooled connection in time, an HTTP
connect or read error, an HTTP 502/503/504. A failure that says something is wrong -- a
missing schema, a rejected password or key, a broken constraint -- raises at once.

The unit retried is a transaction, run again from its start: for the SQL stores one store
operation (each is one transaction, `_tx`), wrapped by `retried_operations`; for the Supabase
store one PostgREST request (PostgREST runs each in a transaction of its own), in its `_run`.
Between attempts the pause doubles from 0.1 s up to 2 s, each drawn between half and all of
that (jitter, so that many clients do not come back in step); retrying stops `retry_s` seconds
after the first failure (default 30 s; the store's `retry_s` argument, else
$ACCELOPT_STORE_RETRY_S; 0 turns it off) and StoreOutageError is raised.

A write whose connection broke while its COMMIT was on the way may have been applied, so a
retry must not apply it twice. Most writes are keyed by what they store (a definition's name,
a workload's uuid, a solution's hash, a profile's key, a run entry's kind and key, a ledger
call's id, a hardware name) and upsert or find the stored row; a measurement equal to a stored
one is not added again; updates (update_run, claim_run and the lease calls of the same
worker, update_solution_links) set the same values again. For the rest, the ids an operation
draws (`replayed_id`) are the same on every attempt, so that a retry writes the same keys
(add_experience's insert then does nothing, a ledger row without an id is upserted), and
`uncertain()` says whether an earlier attempt may have committed: create_run then takes a run
of its id and definition as its own, and the Supabase store an insert that collides with its
own keys (`once`). Left as they are: remove_experience and mark_interrupted_llm_calls, retried
after their COMMIT was applied, report False / 0 (nothing left to change). Inside a batch
(SqlKernelStore.batch) calls share one transaction, so none is retried alone: the batch fails.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from accelopt_mcp.store.base import (
    KernelStore,
    StoreError,
    StoreOutageError,
    StoreUnavailableError,
)

RETRY_ENV = "ACCELOPT_STORE_RETRY_S"
DEFAULT_RETRY_S = 30.0
FIRST_PAUSE_S = 0.1
MAX_PAUSE_S = 2.0

T = TypeVar("T")
C = TypeVar("C", bound=type[KernelStore])


class TransientStoreError(StoreUnavailableError):
    """A failure worth retrying, raised by a store's transaction layer. `cause`: what went
    wrong in a few words, without the store's address (StoreOutageError's message adds it);
    `uncertain`: the transaction may have committed before the answer was lost. Outside a
    retried operation (opening a store) it is what it was before: StoreUnavailableError."""

    def __init__(self, message: str, *, cause: str = "", uncertain: bool = True) -> None:
        super().__init__(message)
        self.cause = cause or message
        self.uncertain = uncertain


def retry_window(retry_s: float | None) -> float:
    """The retry window in seconds: `retry_s` if given, else $ACCELOPT_STORE_RETRY_S, else 30."""
    if retry_s is None:
        raw = os.environ.get(RETRY_ENV, "").strip()
        if not raw:
            return DEFAULT_RETRY_S
        try:
            retry_s = float(raw)
        except ValueError:
            raise StoreError(
                f"{RETRY_ENV}={raw!r} is not a number of seconds; set it to how long a store "
                "call may keep retrying through an outage, e.g. 30 (0 turns retrying off)"
            ) from None
    if isinstance(retry_s, bool) or not isinstance(retry_s, int | float) or not retry_s >= 0:
        raise StoreError(
            f"the store retry window must be 0 or more seconds, got {retry_s!r} "
            f"(the retry_s argument or {RETRY_ENV})"
        )
    return float(retry_s)


@dataclass
class _Operation:
    started: float = field(default_factory=time.monotonic)
    deadline: float | None = None
    """When retrying stops: retry_s after the first failure (None until one)."""
    attempt: int = 1
    uncertain: bool = False
    ids: list[str] = field(default_factory=list)
    drawn: int = 0


_current: ContextVar[_Operation | None] = ContextVar("accelopt_store_operation", default=None)


def uncertain() -> bool:
    """True when an earlier attempt of the operation running now may have committed."""
    operation = _current.get()
    return operation is not None and operation.uncertain


def remaining() -> float | None:
    """Seconds left to retry the operation running now; None before its first failure (or
    outside one). A store waits no longer than this for a connection."""
    operation = _current.get()
    if operation is None or operation.deadline is None:
        return None
    return max(0.0, operation.deadline - time.monotonic())


def replayed_id(make: Callable[[], str]) -> str:
    """A new id from `make`; inside a retried operation, the same ids in the same order on
    every attempt, so that a retry after a lost COMMIT writes the keys the first one wrote."""
    operation = _current.get()
    if operation is None:
        return make()
    if operation.drawn == len(operation.ids):
        operation.ids.append(make())
    value = operation.ids[operation.drawn]
    operation.drawn += 1
    return value


def pause(attempt: int) -> float:
    """The pause before attempt `attempt + 1`: exponential, capped, with jitter."""
    ceiling = min(MAX_PAUSE_S, FIRST_PAUSE_S * 2 ** (attempt - 1))
    return random.uniform(ceiling / 2, ceiling)


def outage_message(location: str, waited_s: float, retry_s: float, cause: str) -> str:
    return (
        f"the store at {location} did not answer for {waited_s:.0f} s: {cause}; what was "
        "stored before is kept: try again, or resume the run, once the database is back "
        f"(retried for {retry_s:g} s; {RETRY_ENV} sets how long)"
    )


def run(attempt: Callable[[], T], *, retry_s: float, location: str) -> T:
    """`attempt()`, again after each TransientStoreError until `retry_s` seconds have passed
    since the first; then StoreOutageError. Inside an operation already being retried it runs
    once: the outer operation retries as a whole."""
    if _current.get() is not None:
        return attempt()
    operation = _Operation()
    token = _current.set(operation)
    try:
        while True:
            try:
                return attempt()
            except TransientStoreError as exc:
                now = time.monotonic()
                if operation.deadline is None:
                    operation.deadline = now + retry_s
                operation.uncertain = operation.uncertain or exc.uncertain
                if now >= operation.deadline:
                    waited = now - operation.started
                    raise StoreOutageError(
                        outage_message(location, waited, retry_s, exc.cause),
                        location=location,
                        retry_s=retry_s,
                    ) from exc
                time.sleep(min(pause(operation.attempt), operation.deadline - now))
                operation.attempt += 1
                operation.drawn = 0
    finally:
        _current.reset(token)


class _Retrying(Protocol):
    """What `retried_operations` needs of a store."""

    retry_s: float
    location: str

    def _retries_calls(self) -> bool:
        """False while a call cannot be run again alone (it shares a transaction with calls
        before it, as in a batch): then a transient failure is raised at once."""
        ...


_NOT_OPERATIONS = frozenset({"close", "batch"})
"""Public KernelStore methods that are no transaction of their own."""


def _operation_names() -> list[str]:
    return [
        name
        for name, value in vars(KernelStore).items()
        if callable(value) and not name.startswith("_") and name not in _NOT_OPERATIONS
    ]


def _retried(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapped(self: _Retrying, *args: Any, **kwargs: Any) -> Any:
        if not self._retries_calls():
            return method(self, *args, **kwargs)
        return run(
            lambda: method(self, *args, **kwargs), retry_s=self.retry_s, location=self.location
        )

    return wrapped


def retried_operations(cls: C) -> C:
    """Run every KernelStore operation of the class through `run` (with the store's `retry_s`
    and `location`). Each is one transaction, so a failed attempt leaves nothing behind but, at
    worst, a commit whose answer was lost (see the module docstring)."""
    for name in _operation_names():
        setattr(cls, name, _retried(getattr(cls, name)))
    return cls

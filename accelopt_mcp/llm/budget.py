"""Spending caps for a run: tokens, US dollars and wall time.

Every call reserves its tokens and cost before it is sent (`reserve`) and settles the
reservation with what it really used when it ends (`settle`). A call is admitted only when what
was spent, what calls in flight have reserved and its own reservation together stay within
every cap, so concurrent calls cannot together spend past a cap: the client sizes each
reservation to what the call may use (a conservative estimate of its prompt plus the output
tokens it asks the server for at most, `room` says how much is left) and sends that output
limit with the request. What is left to chance is only a prompt that holds more tokens than
its estimate. Wall time is checked, not reserved.

A refusal says whether spending alone has reached the cap (the run is out of budget:
`exhausted()`) or only the reservations of calls in flight do (`BudgetExceeded.reserved_only`:
the call may start once they settle, and the client waits for that).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

from pydantic import BaseModel, Field


class BudgetUsage(BaseModel):
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    calls: int = 0
    reserved_tokens: int = 0
    """Held by calls in flight (their estimates), not spent yet."""
    reserved_usd: float = 0.0
    in_flight: int = 0
    """Calls holding a reservation."""

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


class BudgetLimits(BaseModel):
    max_tokens: int | None = Field(default=None, ge=0)
    """Input plus output tokens over all roles."""
    max_usd: float | None = Field(default=None, ge=0)
    max_wall_s: float | None = Field(default=None, ge=0)


class BudgetExceeded(Exception):
    """A cap is reached; the run should stop cleanly and keep what it found."""

    def __init__(self, reason: str, usage: BudgetUsage, *, reserved_only: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage
        self.reserved_only = reserved_only
        """True when what was spent is under every cap and only what calls in flight reserved
        reaches one: the call may start once they settle."""


@dataclass(frozen=True)
class Reservation:
    """What one call holds of the budget until it is settled."""

    id: int
    tokens: int
    cost_usd: float


class Budget:
    """Thread- and task-safe accounting: the lock is never held across an await."""

    def __init__(
        self,
        max_tokens: int | None = None,
        max_usd: float | None = None,
        max_wall_s: float | None = None,
    ) -> None:
        self.limits = BudgetLimits(max_tokens=max_tokens, max_usd=max_usd, max_wall_s=max_wall_s)
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._usage = BudgetUsage()
        self._reservations: dict[int, Reservation] = {}
        self._ids = itertools.count(1)

    def charge(self, tokens_in: int, tokens_out: int, cost_usd: float) -> None:
        """Count spending that held no reservation (e.g. a resumed run's earlier calls)."""
        with self._lock:
            self._charge(tokens_in, tokens_out, cost_usd)

    def _charge(self, tokens_in: int, tokens_out: int, cost_usd: float) -> None:
        self._usage.tokens_in += tokens_in
        self._usage.tokens_out += tokens_out
        self._usage.cost_usd += cost_usd
        self._usage.calls += 1

    def room(self, *, held: bool = True) -> tuple[int | None, float | None]:
        """Tokens and US dollars left under each cap (None: no such cap): less what was spent
        and, `held`, what calls in flight hold (False: what will be left once they settle
        with nothing spent, the most a call can ever be given)."""
        with self._lock:
            usage, limits = self._usage, self.limits
            tokens_held = usage.reserved_tokens if held else 0
            usd_held = usage.reserved_usd if held else 0.0
            tokens = (
                None
                if limits.max_tokens is None
                else limits.max_tokens - usage.tokens - tokens_held
            )
            usd = None if limits.max_usd is None else limits.max_usd - usage.cost_usd - usd_held
            return tokens, usd

    def reserve(self, tokens: int, cost_usd: float) -> Reservation:
        """Hold what a call may use before it is sent. Raises BudgetExceeded, holding
        nothing, when it would not fit under a cap beside what was spent and what other calls
        in flight hold (`reserved_only` when it would fit once they settle)."""
        with self._lock:
            refusal = self._refusal(max(0, tokens), max(0.0, cost_usd))
            if refusal is not None:
                raise refusal
            reservation = Reservation(next(self._ids), max(0, tokens), max(0.0, cost_usd))
            self._reservations[reservation.id] = reservation
            self._usage.reserved_tokens += reservation.tokens
            self._usage.reserved_usd += reservation.cost_usd
            self._usage.in_flight += 1
            return reservation

    def settle(
        self,
        reservation: Reservation,
        tokens_in: int = 0,
        tokens_out: int = 0,
        cost_usd: float = 0.0,
        *,
        spent: bool = True,
    ) -> None:
        """Release a reservation and count what the call really used (`spent` False: a call
        that cost nothing, e.g. one the server refused, is not counted as a call). Settling
        twice releases once."""
        with self._lock:
            if self._reservations.pop(reservation.id, None) is None:
                return
            self._usage.reserved_tokens -= reservation.tokens
            self._usage.reserved_usd -= reservation.cost_usd
            self._usage.in_flight -= 1
            if not self._reservations:  # no drift from float sums once nothing is held
                self._usage.reserved_tokens, self._usage.reserved_usd = 0, 0.0
            if spent:
                self._charge(tokens_in, tokens_out, cost_usd)

    def usage(self) -> BudgetUsage:
        with self._lock:
            return self._usage_now()

    def _usage_now(self) -> BudgetUsage:
        return self._usage.model_copy(update={"wall_s": time.monotonic() - self._started})

    def remaining_wall_s(self) -> float | None:
        if self.limits.max_wall_s is None:
            return None
        return self.limits.max_wall_s - (time.monotonic() - self._started)

    def exhausted(self) -> str | None:
        """Why the run is out of budget (what was spent has reached a cap, or wall time is up),
        or None while every cap has room left. Reservations do not count: they end when
        their calls do."""
        return self._exhausted(self.usage(), reserved=False)

    def _exhausted(
        self, usage: BudgetUsage, *, reserved: bool, tokens: int = 0, usd: float = 0.0
    ) -> str | None:
        """Why a cap is reached by what was spent (and, `reserved`, what calls in flight hold),
        or would be crossed by a new call needing `tokens` and `usd`; None when not."""
        limits = self.limits
        in_flight = usage.in_flight if reserved else None
        reason = _cap_reached(
            "token", limits.max_tokens, usage.tokens, usage.reserved_tokens, tokens, in_flight
        ) or _cap_reached(
            "cost", limits.max_usd, usage.cost_usd, usage.reserved_usd, usd, in_flight
        )
        if reason is not None:
            return reason
        if limits.max_wall_s is not None and usage.wall_s >= limits.max_wall_s:
            return f"wall-time budget reached: {usage.wall_s:.1f} s of {limits.max_wall_s:.1f} s"
        return None

    def check(self) -> None:
        """Raise BudgetExceeded when a new call would start over a cap: what was spent plus
        what calls in flight reserved has reached it (reserved_only tells which)."""
        with self._lock:
            refusal = self._refusal()
        if refusal is not None:
            raise refusal

    def _refusal(self, tokens: int = 0, usd: float = 0.0) -> BudgetExceeded | None:
        """Why a new call needing `tokens` and `usd` may not start now (the lock held), or
        None. reserved_only: it would fit beside what was spent, once calls in flight settle."""
        usage = self._usage_now()
        reason = self._exhausted(usage, reserved=True, tokens=tokens, usd=usd)
        if reason is None:
            return None
        spent_out = self._exhausted(usage, reserved=False, tokens=tokens, usd=usd) is not None
        return BudgetExceeded(reason, usage, reserved_only=not spent_out)


def _cap_reached(
    what: str, cap: float | None, spent: float, reserved: float, need: float, in_flight: int | None
) -> str | None:
    """Why the `what` ("token" or "cost") cap is reached by `spent` (and by what the calls in
    flight have `reserved`, unless `in_flight` is None: not counted), or would be crossed by a
    call needing `need` more; None when not."""
    if cap is None:
        return None
    taken = spent + (reserved if in_flight is not None else 0)
    if taken < cap and taken + need <= cap:
        return None

    def show(amount: float) -> str:
        return f"{amount}" if what == "token" else f"${amount:.4f}"

    flight = (
        f", {show(reserved)} more reserved by {in_flight} call(s) in flight" if in_flight else ""
    )
    more = f", and a call needs {show(need)} more" if need else ""
    used = "tokens used" if what == "token" else "spent"
    return f"{what} budget reached: {show(spent)} of {show(cap)} {used}{flight}{more}"

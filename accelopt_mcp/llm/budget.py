"""Spending caps for a run: tokens, US dollars and wall time.

A call is refused before it starts once a cap is reached; a call already under way is allowed to
finish, so a run may overshoot a cap by at most the calls in flight.
"""

from __future__ import annotations

import threading
import time

from pydantic import BaseModel, Field


class BudgetUsage(BaseModel):
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    calls: int = 0

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

    def __init__(self, reason: str, usage: BudgetUsage) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage


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

    @classmethod
    def from_limits(cls, limits: BudgetLimits) -> Budget:
        return cls(limits.max_tokens, limits.max_usd, limits.max_wall_s)

    def charge(self, tokens_in: int, tokens_out: int, cost_usd: float) -> None:
        with self._lock:
            self._usage.tokens_in += tokens_in
            self._usage.tokens_out += tokens_out
            self._usage.cost_usd += cost_usd
            self._usage.calls += 1

    def usage(self) -> BudgetUsage:
        with self._lock:
            return self._usage.model_copy(update={"wall_s": time.monotonic() - self._started})

    def remaining_wall_s(self) -> float | None:
        if self.limits.max_wall_s is None:
            return None
        return self.limits.max_wall_s - (time.monotonic() - self._started)

    def exhausted(self) -> str | None:
        """Why no new call may start, or None while every cap has room left."""
        usage = self.usage()
        limits = self.limits
        if limits.max_tokens is not None and usage.tokens >= limits.max_tokens:
            return f"token budget reached: {usage.tokens} of {limits.max_tokens} tokens used"
        if limits.max_usd is not None and usage.cost_usd >= limits.max_usd:
            return f"cost budget reached: ${usage.cost_usd:.4f} of ${limits.max_usd:.4f} spent"
        if limits.max_wall_s is not None and usage.wall_s >= limits.max_wall_s:
            return f"wall-time budget reached: {usage.wall_s:.1f} s of {limits.max_wall_s:.1f} s"
        return None

    def check(self) -> None:
        """Raise BudgetExceeded when a cap is reached."""
        reason = self.exhausted()
        if reason is not None:
            raise BudgetExceeded(reason, self.usage())

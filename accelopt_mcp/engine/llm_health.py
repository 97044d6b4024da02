"""Whether the run's LLM service still works: a run whose every call fails is stopped with
status llm_unavailable and the reason, rather than "completing" with nothing but failures.

Two rules, both counting calls that failed for good (the client's retries ran out, or the
error is one no retry fixes): `max_consecutive` failed calls in a row, across roles (0 turns
the rule off); and an iteration in which every attempt failed at the LLM (checked by the
engine when the iteration's chains are done). A call that succeeds resets the count.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LlmHealth:
    max_consecutive: int
    """0: never stop for consecutive failures."""
    consecutive: int = 0
    last_error: str | None = None
    failed_calls: int = 0
    ok_calls: int = 0
    roles_failed: set[str] = field(default_factory=set)

    def succeeded(self) -> None:
        self.consecutive = 0
        self.ok_calls += 1

    def failed(self, role: str, error: str) -> str | None:
        """Count a failed call; the reason to stop the run, once the limit is reached."""
        self.consecutive += 1
        self.failed_calls += 1
        self.last_error = error
        self.roles_failed.add(role)
        if self.max_consecutive and self.consecutive >= self.max_consecutive:
            return (
                f"{self.consecutive} LLM calls in a row failed "
                f"(max_consecutive_llm_failures={self.max_consecutive}); last: {error}"
            )
        return None

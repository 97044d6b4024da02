"""Whether the run's LLM service still works: a run whose every call fails is stopped with
status llm_unavailable and the reason, rather than "completing" with nothing but failures.

Two rules, both counting calls that failed for good (the client's retries ran out, or the
error is one no retry fixes): `max_consecutive` failed calls in a row, across roles (0 turns
the rule off); and an iteration in which every attempt failed at the LLM (checked by the
engine when the iteration's chains are done). A call that succeeds resets the count.

Only failures that say the service is gone count toward the run of failures: no connection, no
answer in time, HTTP 5xx, 429 (after the client's retries), 401/403 and 404 (key or model). A
call refused for what it asked (HTTP 400: a prompt too long for a small local model) says
nothing about the service and neither counts nor resets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SERVICE_GONE = re.compile(
    r"connection error|timed out|HTTP (?:5\d\d|429|401|403|404)\b", re.IGNORECASE
)


def service_gone(error: str) -> bool:
    """Whether a failed call's error says the endpoint, key or model is not usable."""
    return _SERVICE_GONE.search(error) is not None


@dataclass
class LlmHealth:
    max_consecutive: int
    """0: never stop for consecutive failures."""
    consecutive: int = 0
    last_error: str | None = None
    failed_calls: int = 0
    failed_requests: int = 0
    """The HTTP requests of the failed calls, retries included: one ledger row each (what
    list_llm_calls shows), so that a message can count what the ledger holds."""
    roles_failed: set[str] = field(default_factory=set)

    def succeeded(self) -> None:
        self.consecutive = 0

    def failed(self, role: str, error: str, requests: int = 1) -> str | None:
        """Count a failed call (of `requests` HTTP requests, retries included); the reason to
        stop the run, once the limit is reached."""
        self.failed_calls += 1
        self.failed_requests += max(requests, 0)
        self.last_error = error
        self.roles_failed.add(role)
        if not service_gone(error):
            return None
        self.consecutive += 1
        if self.max_consecutive and self.consecutive >= self.max_consecutive:
            return (
                f"{self.consecutive} LLM calls in a row failed "
                f"(max_consecutive_llm_failures={self.max_consecutive}); last: {error}"
            )
        return None

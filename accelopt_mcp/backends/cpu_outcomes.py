"""How a cpu evaluation's stages end early: the two exceptions the harness (cpu_runner.py)
and the task's jail (cpu_task.py) both raise, kept apart so neither imports the other's
module for them. NumPy-free and pydantic-free: the profiling child imports it."""

from __future__ import annotations


class StageError(Exception):
    """Ends the run with an error of a given kind: compile, runtime, reference or setup."""

    def __init__(self, kind: str, message: str, tb: str = "") -> None:
        super().__init__(message)
        self.kind, self.message, self.tb = kind, message, tb


class Verdict(Exception):
    """Ends the run with a failed correctness check."""

    def __init__(
        self, status: str, message: str, correctness: dict[str, float] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.correctness = status, message, correctness

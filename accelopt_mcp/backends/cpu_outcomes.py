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


MAX_STRESS_SETS = 8
"""The most stress sets a task may declare (its stress_inputs() and STRESS_SCALES together):
each costs a reference call and a call of every kernel in the correctness pass."""
MAX_STRESS_NAME_CHARS = 64
"""A stress set's name (it appears in verdicts and logs) is at most this long."""

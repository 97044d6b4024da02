"""Benchmark suites: running one (runner.py: one optimization per task case, then the
percent-of-peak table of table.py), and the suites that ship with the package, in NKIBench
layout (tasks/nkibench.py reads them: `accelopt import nkibench DIR`), so a fresh install has
real tasks to optimize and to report percent of peak on without fetching anything.

The task and kernel modules under each suite are data, not part of this package's code: they
are only ever run in a task's jail, like any task from outside.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent

BUILTIN_SUITES: dict[str, Path] = {"cpu-nkibench": _HERE / "cpu_nkibench"}
"""Suite name -> its directory (a summary.json with reference/ and kernels/ beside it)."""


def builtin_suite(name: str) -> Path:
    """The directory of the built-in suite `name` (ValueError naming the known ones)."""
    try:
        return BUILTIN_SUITES[name]
    except KeyError:
        raise ValueError(
            f"no built-in suite {name!r}; known: {', '.join(sorted(BUILTIN_SUITES))}"
        ) from None

"""Benchmark suites: the built-in CPU NKIBench and running a whole suite (runner.py)."""

from __future__ import annotations

from pathlib import Path

BUILTIN_SUITES: dict[str, Path] = {
    "cpu-nkibench": Path(__file__).resolve().parent / "cpu_nkibench",
}


def builtin_suite(name: str) -> Path:
    try:
        return BUILTIN_SUITES[name]
    except KeyError:
        raise ValueError(
            f"no built-in suite {name!r}; known: {', '.join(sorted(BUILTIN_SUITES))}"
        ) from None

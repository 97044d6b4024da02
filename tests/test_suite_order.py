"""The parallel stage starts the longest files first (tests/conftest.py LONGEST_FIRST): a
renamed or removed file there would silently stop being started first."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST

REPO = Path(__file__).resolve().parents[1]


def test_every_file_started_first_exists() -> None:
    missing = [path for path in LONGEST_FIRST if not (REPO / path).is_file()]
    assert missing == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)

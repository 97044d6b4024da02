"""The parallel stage starts the longest files first (tests/conftest.py LONGEST_FIRST): a
renamed or removed file there would silently stop being started first, and so would every
file if xdist reordered them by their number of tests (its default since 3.7)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST

REPO = Path(__file__).resolve().parents[1]


def test_every_file_started_first_exists() -> None:
    missing = [path for path in LONGEST_FIRST if not (REPO / path).is_file()]
    assert missing == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_the_parallel_stage_keeps_the_collection_order() -> None:
    script = (REPO / "scripts" / "test.sh").read_text()
    # The stage's command, its continuation lines joined.
    command = script.replace("\\\n", " ")
    stage = [line for line in command.splitlines() if line.startswith("stage parallel ")]
    assert len(stage) == 1, stage
    assert "--dist loadfile --no-loadscope-reorder" in stage[0], stage[0]

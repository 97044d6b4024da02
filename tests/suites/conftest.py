from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm_standin.process import StartStandin, standin_starter


@pytest.fixture
def start_standin() -> Iterator[StartStandin]:
    with standin_starter() as start:
        yield start

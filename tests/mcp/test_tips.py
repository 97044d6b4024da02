"""A tip that results repeat (how to declare a roofline, in the log of every profile of a task
without one) is shown in full once per client session, and as a short reminder after that:
within one result, across results, and across tools; a new session gets it in full again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from accelopt_mcp.backends.roofline import HOW_TO_DECLARE, NO_ROOFLINE
from accelopt_mcp.mcp_tools import ServerState, build_server
from accelopt_mcp.mcp_tools.tips import TIPS
from tests.mcp.conftest import BENCH, SILU_FAST, SILU_SLOW, SILU_TASK
from tests.mcp.helpers import ok

pytestmark = pytest.mark.anyio

SHORT = TIPS[0].short


def profile(**arguments: Any) -> dict[str, Any]:
    return {"task_path": str(SILU_TASK), "iterations": 3, "benchmark": BENCH, **arguments}


def count(data: dict[str, Any], text: str) -> int:
    return json.dumps(data, ensure_ascii=False).count(text)


async def test_the_roofline_tip_is_shown_once_per_session(tmp_path: Path) -> None:
    state = ServerState(str(tmp_path / "k.db"), jobs_output_dir=tmp_path / "jobs")
    server = build_server(state)
    try:
        async with Client(server, mode="legacy") as first:
            # The example task declares no roofline: its profiles' logs carry the tip.
            base = await ok(first, "profile_kernel", profile(kernel_path=str(SILU_SLOW)))
            assert NO_ROOFLINE in base["log"] and HOW_TO_DECLARE in base["log"]
            assert SHORT not in base["log"]
            fast = json.loads(SILU_FAST.read_text())["sources"][0]["content"]
            again = await ok(first, "profile_kernel", profile(kernel_source=fast))
            assert NO_ROOFLINE in again["log"] and HOW_TO_DECLARE not in again["log"]
            assert SHORT in again["log"]
            # A round of several: none repeats it, each says where it was.
            round_ = await ok(
                first,
                "profile_kernel",
                profile(
                    parent_id=base["solution_id"],
                    candidates=[{"kernel_source": f"# {n}\n{fast}"} for n in range(2)],
                ),
            )
            assert count(round_, HOW_TO_DECLARE) == 0 and count(round_, SHORT) == 2
        async with Client(server, mode="legacy") as second:
            # A new session: in full again, once.
            later = await ok(second, "profile_kernel", profile(kernel_source=fast, store=False))
            assert HOW_TO_DECLARE in later["log"] and SHORT not in later["log"]
            later = await ok(second, "profile_kernel", profile(kernel_source=fast, store=False))
            assert HOW_TO_DECLARE not in later["log"] and SHORT in later["log"]
    finally:
        state.close()

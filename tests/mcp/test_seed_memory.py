"""A preset's memory seeding is turned off (and on) through start_optimization, and left as the
preset says when seed_memory is not given: a real in-process server, the stored run's
settings read back (the CLI's twin is tests/engine/test_seed_memory.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.mcp_tools.roots import Roots
from accelopt_mcp.store.sqlite import SqliteStore
from tests.mcp.conftest import NKIBENCH_DIR, REPO_ROOT, served
from tests.mcp.helpers import ok

pytestmark = pytest.mark.anyio

TASK = NKIBENCH_DIR / "reference" / "silu_M512_N1024_numpy_0.py"


@pytest.mark.parametrize(
    ("preset_seeds", "given", "expected"),
    [(True, {"seed_memory": False}, False), (False, {"seed_memory": True}, True), (True, {}, True)],
    ids=["turned-off", "turned-on", "not-given"],
)
async def test_seeding_from_start_optimization(
    preset_seeds: bool, given: dict[str, Any], expected: bool, tmp_path: Path
) -> None:
    preset = tmp_path / "preset.json"
    preset.write_text(json.dumps({"iterations": 1, "seed_from_namespace": preset_seeds}))
    db = tmp_path / "kernels.db"
    arguments = {
        "task_path": str(TASK),
        # The run is stored with its settings, then stops on its failing first kernel: no
        # LLM call.
        "kernel_source": "def kernel(x):\n    raise RuntimeError('stop here')\n",
        "preset": str(preset),
        "skip_llm_check": True,
        **given,
    }
    async with served(str(db), tmp_path, roots=Roots.of([tmp_path, REPO_ROOT])) as client:
        started = await ok(client, "start_optimization", arguments)
        finished = await ok(client, "wait_for_job", {"job_id": started["job_id"], "timeout_s": 60})
        assert finished["state"] not in ("pending", "running"), finished
    with SqliteStore(str(db)) as store:
        (run,) = store.list_runs()
        _, spec, _ = load_run(store, run.id)
    assert spec.optimize.seed_from_namespace is expected

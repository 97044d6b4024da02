"""The step-by-step loop as an agent drives it (skills/accelopt/SKILL.md section 4b), over stdio
through the installed `accelopt-mcp` console script: a baseline, a round of three candidates
profiled, timed beside their parent and linked in ONE call, the lineage with latencies, a
lesson filed in the default namespace, found by two words in any order, and read by a job
started afterwards with seed_memory (the scripted LLM stand-in plays the job's models)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from accelopt_mcp.llm.key_destinations import TRUSTED_CONFIGS_ENV
from tests.llm_standin.process import StandinProcess
from tests.llm_standin.script import StandinScript
from tests.mcp.conftest import BENCH, SILU_FAST, SILU_SLOW, SILU_TASK
from tests.mcp.helpers import TOOLS_LIST_BYTES, ok
from tests.mcp.processes import console_script, server_env

pytestmark = pytest.mark.anyio

KEY_ENV = "ACCELOPT_AGENT_LOOP_TEST_KEY"
KEY = "standin-agent-loop-key-41d7"
FAST_SOURCE = json.loads(SILU_FAST.read_text())["sources"][0]["content"]
LESSON = {
    "title": "Fuse the exponential and the divide into in-place ufunc calls",
    "strategy": "Write every elementwise step into one preallocated buffer with out=, so a "
    "silu-like kernel makes no temporaries; the divide by (1 + e^-x) then runs in cache.",
    "pseudocode": "t = exp(-x); y = x / (1 + t)\n->  np.exp(-x, out=o); o += 1; "
    "np.divide(x, o, out=o)",
}


def _script() -> StandinScript:
    plan = "Compute silu in place with out= buffers."
    return StandinScript.model_validate(
        {
            "api_key": KEY,
            "roles": {
                "planner": {
                    "replies": [{"text": json.dumps([plan])}],
                    "when_exhausted": "repeat_last",
                },
                "executor": {
                    "replies": [{"text": f"```python\n{FAST_SOURCE}```"}],
                    "when_exhausted": "repeat_last",
                },
                "summarizer": {"replies": [{"text": "{}"}], "when_exhausted": "repeat_last"},
            },
        }
    )


def _models(base_url: str, folder: Path) -> str:
    path = folder / "models.json"
    path.write_text(
        json.dumps(
            {
                "default": {"base_url": base_url, "api_key_env": KEY_ENV, "max_retries": 1},
                "planner": {"model": "planner"},
                "executor": {"model": "executor"},
                "summarizer": {"model": "summarizer"},
            }
        )
    )
    return str(path)


def _profile(**arguments: Any) -> dict[str, Any]:
    return {"task_path": str(SILU_TASK), "iterations": 3, "benchmark": BENCH, **arguments}


async def test_an_agent_drives_the_loop_over_stdio(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=console_script(),
        args=["--store", str(tmp_path / "kernels.db"), "--jobs-dir", str(tmp_path / "jobs")],
        # The model config _models writes is one the server's operator lists.
        env=server_env(**{KEY_ENV: KEY, TRUSTED_CONFIGS_ENV: str(tmp_path / "models.json")}),
        cwd=str(tmp_path),
    )
    with StandinProcess(_script()) as llm:
        async with Client(params, mode="legacy") as client:
            # What every session pays in context before the first call.
            tools = await client.list_tools()
            size = len(
                json.dumps([t.model_dump(mode="json", exclude_none=True) for t in tools.tools])
            )
            assert size < TOOLS_LIST_BYTES, size

            base = await ok(client, "profile_kernel", _profile(kernel_path=str(SILU_SLOW)))
            assert base["status"] == "PASSED"
            # A round of three candidates of the baseline in ONE call: one interleaved
            # evaluation, each stored and linked, each with its verdict against the parent.
            round_ = await ok(
                client,
                "profile_kernel",
                _profile(
                    parent_id=base["solution_id"][:8],
                    candidates=[
                        {
                            "kernel_source": f"# candidate {number}\n{FAST_SOURCE}",
                            "name": f"candidate-{number}",
                            "evolve_metadata": {"plan": f"plan {number}: in-place ufuncs"},
                        }
                        for number in range(1, 4)
                    ],
                ),
            )
            for candidate in round_["candidates"]:
                assert candidate["status"] == "PASSED", candidate
                assert candidate["parent_id"] == base["solution_id"]
                assert candidate["parent_timing"] == "interleaved"
                assert candidate["initial_solution_id"] == base["solution_id"]
                # A row loop against NumPy calls, in the same rounds: about 3x, 2.6x busy.
                assert candidate["speedup_vs_parent"] > 1.2
                assert candidate["speedup_vs_parent_verdict"] == "faster"
            best = round_["best"]
            assert best in {c["solution_id"] for c in round_["candidates"]}

            lineage = await ok(client, "solution_lineage", {"solution_id": best[:8]})
            found = [lineage["solution"], *lineage["ancestors"]]
            assert [k["id"] for k in found] == [best, base["solution_id"]]
            assert all(k["best_latency_ms"] for k in found), found
            # Timed with its parent in the same rounds: the figure the round reported.
            assert found[0]["speedup_vs_parent_measured"] == "same_rounds"
            picked = next(c for c in round_["candidates"] if c["solution_id"] == best)
            assert found[0]["speedup_vs_parent"] == pytest.approx(picked["speedup_vs_parent"])

            added = await ok(
                client,
                "add_memory",
                {"item": {"definition_name": base["definition_name"], **LESSON, "speedup": 2.0}},
            )
            assert added["namespace"] == "cpu" and not added.get("note"), added
            # Two words, in the other order than in the text, far apart.
            hits = await ok(client, "search_memory", {"text": "divide exponential"})
            assert hits["items"] and hits["items"][0]["title"] == LESSON["title"], hits

            started = await ok(
                client,
                "start_optimization",
                {
                    "task_path": str(SILU_TASK),
                    "kernel_path": str(SILU_SLOW),
                    "iterations": 1,
                    "beam": 1,
                    "plans": 1,
                    "attempts": 1,
                    "workers": 1,
                    "seed_memory": True,
                    "models_config": _models(llm.base_url, tmp_path),
                    "benchmark": BENCH,
                },
            )
            final = await ok(
                client, "wait_for_job", {"job_id": started["job_id"], "timeout_s": 180}
            )
            assert final["state"] == "completed", final
        planner_prompts = [
            r["body"]["messages"][-1]["content"] for r in llm.requests() if r["role"] == "planner"
        ]
        # The job started afterwards read the lesson filed without a namespace.
        assert planner_prompts and LESSON["title"] in planner_prompts[0]

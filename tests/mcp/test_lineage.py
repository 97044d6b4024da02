"""The step-by-step loop of an agent over MCP: one profile_kernel call profiles and links a
candidate (parent, name, notes), speedups say what they are against, insert_solution fills in
what a stored source lacks or refuses a contradiction, a syntax error is a COMPILE_ERROR
evaluation (MCP and CLI alike), and ids are taken by a unique prefix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from accelopt_mcp.store.base import KernelStore, RunRecord
from accelopt_mcp.tasks.kernels import default_kernel_name
from tests.mcp.conftest import BENCH, NKIBENCH_DIR, SILU_FAST, SILU_SLOW, SILU_TASK
from tests.mcp.helpers import fails, ok
from tests.mcp.processes import server_env

pytestmark = pytest.mark.anyio


@pytest.fixture
def client(admin_client: Client) -> Client:
    """These tests store records by hand (insert_*, import_directory): the admin tools."""
    return admin_client


TASK = str(SILU_TASK)
SLOW_SOURCE = json.loads(SILU_SLOW.read_text())["sources"][0]["content"]
FAST_SOURCE = json.loads(SILU_FAST.read_text())["sources"][0]["content"]
BROKEN = "import numpy as np\n\n\ndef run(x):\n    return (x\n"
"""Not valid Python: '(' was never closed, line 5."""


def profile(**arguments: Any) -> dict[str, Any]:
    return {"task_path": TASK, "iterations": 3, "benchmark": BENCH, **arguments}


def variant(source: str, tag: str) -> str:
    """The same kernel as another source (another hash, so another solution)."""
    return f"# {tag}\n{source}"


# --------------------------------------------------------------------------- the loop


async def test_one_call_profiles_and_links_each_candidate(client: Client) -> None:
    base = await ok(client, "profile_kernel", profile(kernel_path=str(SILU_SLOW)))
    assert base["status"] == "PASSED" and base["stored"] == "stored as a new solution"
    assert base["parent_id"] is None and base["speedup_vs_parent"] is None
    assert base["initial_solution_id"] is None and base["speedup_vs_reference"] > 0
    root = base["solution_id"]

    plan = {"plan": "vectorize the row loop", "notes": "one NumPy expression"}
    first = await ok(
        client,
        "profile_kernel",
        profile(
            kernel_source=FAST_SOURCE, name="vectorized", parent_id=root[:8], evolve_metadata=plan
        ),
    )
    assert first["status"] == "PASSED" and first["solution_name"] == "vectorized"
    assert first["parent_id"] == root  # the prefix resolved
    # The parent was timed in the same rounds: a speedup with its interval, labelled.
    assert first["parent_timing"] == "interleaved"
    assert first["speedup_vs_parent_ci_low"] <= first["speedup_vs_parent"]
    high = first["speedup_vs_parent_ci_high"]  # null: no upper bound (a busy host can do that)
    assert high is None or first["speedup_vs_parent"] <= high
    # A Python loop against one NumPy expression in the same rounds: ~3x quiet, ~2.6x when busy.
    assert first["speedup_vs_parent"] > 1.2
    assert first["speedup_vs_parent_verdict"] == "faster"
    assert first["parent_latency_ms"] > first["latency_ms"]
    assert "over the parent" in first["summary"] and "over the reference" in first["summary"]
    assert first["initial_solution_id"] == root
    assert first["speedup_vs_initial"] == first["speedup_vs_parent"]

    stored = await ok(client, "get_solution", {"solution_id": first["solution_id"]})
    assert stored["evolve_metadata"] == plan
    assert stored["summary"]["name"] == "vectorized"
    assert stored["summary"]["parent_id"] == root

    # A grandchild, its parent not timed again: figures from the stored profiles.
    second = await ok(
        client,
        "profile_kernel",
        profile(
            kernel_source=variant(FAST_SOURCE, "v2"),
            parent_id=first["solution_id"],
            time_parent=False,
        ),
    )
    assert second["parent_timing"] == "stored"
    assert second["speedup_vs_parent_verdict"] is None  # no verdict from figures timed apart
    assert second["parent_latency_ms"] == pytest.approx(first["latency_ms"])
    assert second["speedup_vs_parent"] == pytest.approx(first["latency_ms"] / second["latency_ms"])
    assert second["initial_solution_id"] == root and second["initial_timing"] == "stored"
    assert second["speedup_vs_initial"] == pytest.approx(base["latency_ms"] / second["latency_ms"])
    assert "over the parent" in second["summary"] and "initial kernel" in second["summary"]

    lineage = await ok(client, "solution_lineage", {"solution_id": second["solution_id"][:8]})
    chain = [lineage["solution"], *lineage["ancestors"]]
    assert [k["id"] for k in chain] == [second["solution_id"], first["solution_id"], root]
    assert [k["best_latency_ms"] for k in chain] == pytest.approx(
        [second["latency_ms"], first["latency_ms"], base["latency_ms"]]
    )
    # Timed beside its parent: the same-round figure, not a ratio of the two stored medians.
    assert chain[1]["speedup_vs_parent"] == pytest.approx(first["speedup_vs_parent"])
    assert chain[1]["speedup_vs_parent_measured"] == "same_rounds"
    assert chain[0]["speedup_vs_parent_measured"] == "apart"  # its parent was not timed again
    assert chain[0]["speedup_vs_initial"] == pytest.approx(
        base["latency_ms"] / second["latency_ms"]
    )
    assert chain[2]["speedup_vs_parent"] is None  # the root has none
    # list_solutions shows the same figures.
    listed = await ok(client, "list_solutions", {"definition_name": "silu_n1024"})
    best = {s["id"]: s["best_latency_ms"] for s in listed["items"]}
    assert [best[k["id"]] for k in chain] == [k["best_latency_ms"] for k in chain]

    # Pasted kernels are told apart by name.
    assert second["solution_name"] == default_kernel_name("silu_n1024", variant(FAST_SOURCE, "v2"))
    assert second["solution_name"].startswith("silu_n1024-")


async def test_a_run_names_the_initial_kernel(client: Client, store: KernelStore) -> None:
    base = await ok(client, "profile_kernel", profile(kernel_source=SLOW_SOURCE))
    run_id = "5e1ec7ed-0000-4000-8000-00000000000a"
    store.create_run(
        RunRecord(id=run_id, definition_name="silu_n1024", initial_solution_id=base["solution_id"])
    )
    # No parent given: the run says where the lineage starts.
    found = await ok(
        client,
        "profile_kernel",
        profile(kernel_source=FAST_SOURCE, evolve_metadata={"run_id": run_id}),
    )
    assert found["parent_id"] is None and found["speedup_vs_parent"] is None
    assert found["initial_solution_id"] == base["solution_id"]
    assert found["speedup_vs_initial"] == pytest.approx(base["latency_ms"] / found["latency_ms"])


# --------------------------------------------------------------------------- insert_solution


def solution_record(source: str, name: str, author: str = "user") -> dict[str, Any]:
    record = json.loads(SILU_FAST.read_text())
    record["sources"][0]["content"] = source
    return {**record, "name": name, "author": author}


async def test_insert_solution_on_a_stored_source_refuses_contradictions(
    client: Client,
) -> None:
    await ok(client, "insert_definition", {"definition": json.loads(SILU_TASK.read_text())})
    parent = await ok(client, "insert_solution", {"solution": json.loads(SILU_SLOW.read_text())})
    other = await ok(
        client,
        "insert_solution",
        {"solution": solution_record("def run(x):\n    return x\n", "other")},
    )
    assert parent["created"] is True and parent["message"] == "stored as a new solution"

    notes = {"plan": "vectorize"}
    kernel = solution_record(FAST_SOURCE, "vec", author="agent")
    first = await ok(
        client,
        "insert_solution",
        {"solution": kernel, "parent_id": parent["id"], "evolve_metadata": notes},
    )
    assert first["created"] is True and first["parent_id"] == parent["id"]

    again = await ok(
        client,
        "insert_solution",
        {"solution": kernel, "parent_id": parent["id"][:8], "evolve_metadata": notes},
    )
    assert (again["id"], again["created"], again["filled"]) == (first["id"], False, [])
    assert "nothing to change" in again["message"]
    # Leaving links out drops nothing: the stored ones stay and are reported.
    bare = await ok(client, "insert_solution", {"solution": kernel})
    assert bare["parent_id"] == parent["id"] and bare["name"] == "vec"

    short = first["id"][:8]
    conflicts = [
        ({"solution": kernel, "parent_id": other["id"]}, f"has parent {parent['id'][:8]}"),
        ({"solution": {**kernel, "name": "renamed"}}, "is named 'vec', not 'renamed'"),
        ({"solution": {**kernel, "author": "someone"}}, "has author 'agent'"),
        (
            {"solution": kernel, "evolve_metadata": {"plan": "tile"}},
            "evolve_metadata['plan'] = 'vectorize', not 'tile'",
        ),
    ]
    for arguments, expected in conflicts:
        message = await fails(client, "insert_solution", arguments, f"solution {short}", expected)
        assert "\n" not in message  # one line
    # profile_kernel refuses it the same way, before anything is timed.
    await fails(
        client,
        "profile_kernel",
        profile(kernel_source=FAST_SOURCE, parent_id=other["id"]),
        f"has parent {parent['id'][:8]}",
    )
    assert (await ok(client, "query_profiles", {"solution_id": first["id"]}))["items"] == []
    # A kernel cannot descend from itself or from its own descendant.
    await fails(
        client,
        "insert_solution",
        {"solution": json.loads(SILU_SLOW.read_text()), "parent_id": first["id"]},
        "cannot be the parent",
    )


@pytest.mark.skipif(
    not hasattr(KernelStore, "update_solution_links"),
    reason="needs KernelStore.update_solution_links (the store side of the fill-in)",
)
async def test_insert_solution_fills_in_what_a_stored_source_lacks(client: Client) -> None:
    pasted = await ok(client, "profile_kernel", profile(kernel_source=FAST_SOURCE))
    assert pasted["solution_name"] == default_kernel_name("silu_n1024", FAST_SOURCE)
    parent = await ok(client, "insert_solution", {"solution": json.loads(SILU_SLOW.read_text())})

    notes = {"plan": "vectorize", "notes": "in place"}
    filled = await ok(
        client,
        "insert_solution",
        {
            "solution": solution_record(FAST_SOURCE, "vectorized", author="agent"),
            "parent_id": parent["id"],
            "evolve_metadata": notes,
        },
    )
    assert filled["id"] == pasted["solution_id"] and filled["created"] is False
    assert set(filled["filled"]) == {"parent_id", "name", "author", "evolve_metadata"}
    assert "filled in" in filled["message"]
    stored = await ok(client, "get_solution", {"solution_id": filled["id"]})
    assert stored["summary"]["parent_id"] == parent["id"]
    assert stored["summary"]["name"] == "vectorized" and stored["summary"]["author"] == "agent"
    assert stored["evolve_metadata"] == notes
    # profile_kernel fills in too: a new note on the stored kernel.
    again = await ok(
        client,
        "profile_kernel",
        profile(kernel_source=FAST_SOURCE, evolve_metadata={"round": 2}),
    )
    assert again["filled"] == ["evolve_metadata"] and again["parent_id"] == parent["id"]
    stored = await ok(client, "get_solution", {"solution_id": filled["id"]})
    assert stored["evolve_metadata"] == {**notes, "round": 2}


# --------------------------------------------------------------------------- COMPILE_ERROR


async def test_a_syntax_error_is_a_compile_error_naming_the_line(
    client: Client, tmp_path: Path
) -> None:
    pasted = await ok(client, "profile_kernel", profile(kernel_source=BROKEN))
    assert pasted["status"] == "COMPILE_ERROR" and pasted["correct"] is False
    assert pasted["log"].startswith("syntax error in kernel_source line 5: '(' was never closed")
    assert "return (x" in pasted["log"] and "/tmp" not in pasted["log"]
    assert pasted["summary"].startswith("COMPILE_ERROR: syntax error in kernel_source line 5")
    assert pasted["solution_id"] and pasted["profile_id"]  # kept, like any failed kernel
    found = await ok(client, "query_profiles", {"status": "COMPILE_ERROR"})
    assert [p["solution_id"] for p in found["items"]] == [pasted["solution_id"]]

    kernel = tmp_path / "my_kernel.py"
    kernel.write_text(BROKEN)
    from_file = await ok(client, "profile_kernel", profile(kernel_path=str(kernel), store=False))
    assert from_file["status"] == "COMPILE_ERROR"
    assert f"syntax error in {kernel} line 5" in from_file["log"]

    document = tmp_path / "my_solution.json"
    document.write_text(json.dumps(solution_record(BROKEN, "broken")))
    from_json = await ok(client, "profile_kernel", profile(kernel_path=str(document), store=False))
    assert f"syntax error in {document}, source main.py line 5" in from_json["log"]

    compared = await ok(
        client,
        "compare_kernels",
        {
            "task_path": TASK,
            "kernels": [{"kernel_source": FAST_SOURCE}, {"kernel_source": BROKEN}],
            "iterations": 3,
            "max_timing_seconds": 1.0,
        },
    )
    broken = next(k for k in compared["kernels"] if k["status"] != "PASSED")
    assert broken["status"] == "COMPILE_ERROR" and broken["rank"] is None
    assert broken["log"].startswith("syntax error in kernels[1].kernel_source line 5")

    await fails(
        client,
        "start_optimization",
        {"task_path": TASK, "kernel_source": BROKEN, "skip_llm_check": True},
        "not valid Python: kernel_source line 5",
    )
    assert (await ok(client, "list_jobs"))["jobs"] == []


def test_the_cli_reports_a_syntax_error_as_a_compile_error(tmp_path: Path) -> None:
    kernel = tmp_path / "my_kernel.py"
    kernel.write_text(BROKEN)
    script = Path(sys.executable).parent / "accelopt"
    done = subprocess.run(
        [str(script), "profile", str(kernel), "--task", TASK, "--no-store"],
        capture_output=True,
        text=True,
        env=server_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # like any failing kernel
    assert "COMPILE_ERROR" in done.stdout
    assert "line 5: '(' was never closed" in done.stdout and "my_kernel.py" in done.stdout
    assert "/tmp/accelopt" not in done.stdout + done.stderr


# --------------------------------------------------------------------------- id prefixes


async def test_ids_are_taken_by_a_unique_prefix(client: Client, store: KernelStore) -> None:
    await ok(client, "insert_definition", {"definition": json.loads(SILU_TASK.read_text())})
    parent = (await ok(client, "insert_solution", {"solution": json.loads(SILU_SLOW.read_text())}))[
        "id"
    ]
    child = (
        await ok(
            client,
            "insert_solution",
            {"solution": solution_record(FAST_SOURCE, "vec"), "parent_id": parent[:8]},
        )
    )["id"]
    assert (await ok(client, "get_solution", {"solution_id": child[:8]}))["summary"]["id"] == child
    assert (await ok(client, "get_solution", {"solution_id": child[:13].upper()}))["summary"][
        "id"
    ] == child
    whole = await ok(client, "get_solution", {"solution_id": child.upper()})
    assert whole["summary"]["id"] == child and whole["profiles_total"] == 0
    lineage = await ok(client, "solution_lineage", {"solution_id": parent[:10]})
    assert [d["id"] for d in lineage["descendants"]] == [child]
    assert (await ok(client, "query_profiles", {"solution_id": child[:8]}))["items"] == []

    await fails(client, "get_solution", {"solution_id": "0000000000"}, "no solution with id")
    await fails(client, "get_solution", {"solution_id": child[:6]}, "8+ characters")
    dashless = child.replace("-", "")[:12]
    assert (await ok(client, "get_solution", {"solution_id": dashless}))["summary"]["id"] == child

    # Two runs whose ids share their first 8 characters: that prefix names neither.
    runs = ["abcdef12-1111-4000-8000-000000000001", "abcdef12-2222-4000-8000-000000000002"]
    for run_id in runs:
        store.create_run(RunRecord(id=run_id, definition_name="silu_n1024"))
    await fails(client, "list_llm_calls", {"run_id": "abcdef12"}, "matches 2 runs")
    one = await ok(client, "list_llm_calls", {"run_id": "abcdef12-2"})
    assert one["run_id"] == runs[1]
    assert (await ok(client, "list_llm_calls", {"run_id": runs[0]}))["run_id"] == runs[0]
    await fails(client, "job_status", {"job_id": "abcdef12"}, "matches 2 jobs")
    await fails(client, "job_status", {"job_id": "fedcba98"}, "no job with id 'fedcba98'")


async def test_one_source_is_profiled_for_two_definitions(client: Client, tmp_path: Path) -> None:
    """The same shape-generic kernel for the same op at another shape (NKIBench's layout):
    profile_kernel stores it once per definition instead of refusing the second."""
    reference = NKIBENCH_DIR / "reference" / "rmsnorm_M256_N1024_numpy_0.py"
    other = tmp_path / "rmsnorm_M64_N512_numpy_0.py"
    other.write_text(
        reference.read_text().replace("M = 256", "M = 64").replace("N = 1024", "N = 512")
    )
    source = (NKIBENCH_DIR / "kernels" / "rmsnorm_M256_N1024_fast.py").read_text()
    runs = []
    for task in (reference, other, reference):
        runs.append(
            await ok(client, "profile_kernel", profile(kernel_source=source, task_path=str(task)))
        )
    first, second, again = runs
    assert first["status"] == second["status"] == "PASSED"
    assert first["stored"] == second["stored"] == "stored as a new solution"
    assert first["solution_id"] != second["solution_id"]
    assert again["solution_id"] == first["solution_id"] and "already stored" in again["stored"]
    assert first["profile_id"] != second["profile_id"]
    for run in (first, second):
        listed = await ok(client, "query_profiles", {"solution_id": run["solution_id"]})
        assert [p["id"] for p in listed["items"]] == [run["profile_id"]]

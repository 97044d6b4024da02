"""What the MCP tools show between kernels: list_solutions and solution_lineage give the speedup
over the parent timed in the same rounds (interval, verdict) where it was, and label a ratio of
two stored medians `apart`; query_profiles counts the times a kernel was timed beside its
children; memory items say what they were measured on. Rows are stored through the store's
API; one profile_kernel call checks that a parent timed beside its child is stored by id."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

from accelopt_mcp.models import MeasuringConditions
from accelopt_mcp.store.base import ExperienceIn, KernelStore
from tests.mcp.conftest import SILU_FAST, SILU_SLOW, SILU_TASK
from tests.mcp.helpers import ok
from tests.store.lineage_samples import CONFIG, DEF, WORKLOAD, beside, store_family, timed
from tests.store.samples import make_solution

pytestmark = pytest.mark.anyio


@pytest.fixture
def client(admin_client: Client) -> Client:
    """These tests store records by hand (insert_*, import_directory): the admin tools."""
    return admin_client


def by_id(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in items}


async def test_list_solutions_and_lineage_say_how_the_speedup_was_measured(
    client: Client, store: KernelStore
) -> None:
    family = store_family(store)
    slower = beside(0.916, 0.783, 0.993, baseline_id=family.parent)
    store.upsert_profile(WORKLOAD, family.child, timed(0.617, day=2, comparisons=(slower,)), CONFIG)
    store.upsert_profile(WORKLOAD, family.sibling, timed(0.8, day=3), CONFIG)
    store.upsert_profile(WORKLOAD, family.grandchild, timed(0.5, day=4), CONFIG)

    listed = by_id((await ok(client, "list_solutions", {"definition_name": DEF}))["items"])
    child = listed[family.child]
    assert child["speedup_vs_parent"] == 0.916 and child["speedup_vs_parent_measured"] == (
        "same_rounds"
    )
    assert (child["speedup_vs_parent_ci_low"], child["speedup_vs_parent_ci_high"]) == (
        0.783,
        0.993,
    )
    assert child["speedup_vs_parent_verdict"] == "slower"
    sibling = listed[family.sibling]
    assert sibling["speedup_vs_parent"] == pytest.approx(1.0 / 0.8)
    assert sibling["speedup_vs_parent_measured"] == "apart"
    assert sibling["speedup_vs_parent_ci_low"] < 1.25 < sibling["speedup_vs_parent_ci_high"]
    root = listed[family.parent]
    assert root["speedup_vs_parent"] is None and root["speedup_vs_parent_measured"] is None

    # A filter that leaves the parent out still shows the child's figure against it.
    ported = make_solution(DEF, "# ported\n", name="ported", language="triton")
    port = store.upsert_solution(ported, parent_id=family.parent)
    store.upsert_profile(WORKLOAD, port, timed(0.25, day=5), CONFIG)
    only = await ok(client, "list_solutions", {"definition_name": DEF, "language": "triton"})
    (shown,) = only["items"]
    assert shown["id"] == port and shown["speedup_vs_parent"] == pytest.approx(4.0)
    assert shown["speedup_vs_parent_measured"] == "apart"

    lineage = await ok(client, "solution_lineage", {"solution_id": family.grandchild})
    me = lineage["solution"]
    first, top = lineage["ancestors"]
    assert [first["id"], top["id"]] == [family.child, family.parent]
    assert me["speedup_vs_parent"] == pytest.approx(0.617 / 0.5)
    assert me["speedup_vs_parent_measured"] == "apart"
    assert me["speedup_vs_initial"] == pytest.approx(1.0 / 0.5)
    assert me["speedup_vs_initial_measured"] == "apart"
    # The child over the root, which is its parent: the same-round figure both ways.
    assert (first["speedup_vs_parent"], first["speedup_vs_initial"]) == (0.916, 0.916)
    assert first["speedup_vs_initial_measured"] == "same_rounds"
    assert first["speedup_vs_initial_verdict"] == "slower"
    assert top["speedup_vs_parent"] is None and top["speedup_vs_initial"] is None


async def test_query_profiles_counts_the_timings_beside_children(
    client: Client, store: KernelStore
) -> None:
    family = store_family(store)
    for day, kernel in ((2, family.child), (3, family.child), (4, family.sibling)):
        timing = beside(1.2, 1.1, 1.3, baseline_id=family.parent)
        store.upsert_profile(WORKLOAD, kernel, timed(0.8, day=day, comparisons=(timing,)), CONFIG)
    store.upsert_profile(WORKLOAD, family.child, timed(0.7, day=5), {**CONFIG, "cores": 2})

    (parent,) = (await ok(client, "query_profiles", {"solution_id": family.parent}))["items"]
    assert parent["measurements_total"] == 1 and len(parent["measurements"]) == 1
    assert parent["timed_beside_children"] == 3 and parent["measured_total"] == 4
    children = (await ok(client, "query_profiles", {"solution_id": family.child}))["items"]
    assert [(p["timed_beside_children"], p["measured_total"]) for p in children] == [(0, 2), (0, 1)]


async def test_memory_items_say_what_they_were_measured_on(
    client: Client, store: KernelStore
) -> None:
    conditions = MeasuringConditions(cores=2, cpus=[0, 1], blas_threads=2, host_load=3.8)
    store.add_experience(
        ExperienceIn(
            definition_name=DEF, title="Split heads across cores", strategy="one head per core",
            speedup=1.99, conditions=conditions,
        )
    )  # fmt: skip
    store.add_experience(ExperienceIn(definition_name=DEF, title="By hand", strategy="a trick"))
    items = (await ok(client, "list_memory"))["items"]
    assert [i["measured_on"] for i in items] == [
        "2 cores (cores 0,1), 2 BLAS threads, host load 3.8",
        None,
    ]
    assert items[0]["conditions"]["cpus"] == [0, 1] and items[1]["conditions"] is None
    (found,) = (await ok(client, "search_memory", {"text": "split heads"}))["items"]
    assert found["measured_on"].startswith("2 cores")


async def test_a_parent_timed_by_profile_kernel_is_stored_by_id(
    client: Client, store: KernelStore
) -> None:
    await ok(client, "insert_definition", {"definition": json.loads(SILU_TASK.read_text())})
    parent = await ok(client, "insert_solution", {"solution": json.loads(SILU_SLOW.read_text())})
    child = await ok(
        client,
        "profile_kernel",
        {
            "task_path": str(SILU_TASK),
            "kernel_path": str(SILU_FAST),
            "parent_id": parent["id"],
            "iterations": 3,
            "benchmark": {"seeds": [0, 1], "warmup_runs": 1, "max_measurement_rounds": 1,
                          "min_processes": 1, "max_processes": 2, "max_timing_seconds": 1.0},
        },
    )  # fmt: skip
    assert child["status"] == "PASSED" and child["parent_timing"] == "interleaved"
    (profile,) = store.list_profiles(solution_id=child["solution_id"])
    (comparison,) = profile.evaluation.comparisons
    assert (comparison.baseline, comparison.baseline_id) == ("parent", parent["id"])
    # The parent has no profile of its own: only the same-round figure is known.
    lineage = await ok(client, "solution_lineage", {"solution_id": child["solution_id"]})
    assert lineage["solution"]["speedup_vs_parent_measured"] == "same_rounds"
    assert lineage["solution"]["speedup_vs_parent"] == pytest.approx(child["speedup_vs_parent"])

"""Every tool argument that names a stored record by id (a solution, run, job, memory item,
suite, LLM call; at the top level or inside an object such as add_memory's item or
compare_kernels' kernels) takes what the tools print: a unique prefix of 8 characters, and
refuses a prefix that names two records with one clear message. The arguments are found from
the live schemas, so a new id argument without a case here fails the test."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp import Client

from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.tasks.kernels import solution_from_source
from tests.id_twins import DEF, FAST_SOURCE, TWIN, Records, stored_records
from tests.mcp.conftest import BENCH, SILU_TASK
from tests.mcp.helpers import text_of

pytestmark = pytest.mark.anyio


def walk(schema: dict[str, Any], defs: dict[str, Any], path: str, out: set[str]) -> None:
    """Every property named *_id or *_ids, as a dotted path ('kernels[].solution_id')."""
    if "$ref" in schema:
        walk(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, path, out)
        return
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            walk(option, defs, path, out)
    if "items" in schema:
        walk(schema["items"], defs, f"{path}[]", out)
    for name, prop in schema.get("properties", {}).items():
        where = f"{path}.{name}" if path else name
        if name.endswith(("_id", "_ids")):
            out.add(where)
        walk(prop, defs, where, out)


def cases() -> dict[tuple[str, str], tuple[str, Callable[[str, Records], dict[str, Any]]]]:
    """(tool, argument path) -> (the kind it names, its arguments given that id)."""
    task = str(SILU_TASK)

    def item(**ids: str) -> dict[str, Any]:
        return {"item": {"definition_name": DEF, "title": "t", "strategy": "s", **ids}}

    return {
        ("profile_kernel", "parent_id"): (
            "solution",
            lambda i, _: {
                "task_path": task,
                "kernel_source": FAST_SOURCE,
                "parent_id": i,
                "time_parent": False,
                "store": False,
                "iterations": 3,
                "benchmark": BENCH,
            },
        ),
        ("compare_kernels", "kernels[].solution_id"): (
            "solution",
            lambda i, _: {
                "task_path": task,
                "kernels": [{"solution_id": i}, {"kernel_source": FAST_SOURCE}],
                "iterations": 3,
                "max_timing_seconds": 1.0,
            },
        ),
        ("list_solutions", "run_id"): ("run", lambda i, _: {"definition_name": DEF, "run_id": i}),
        ("get_solution", "solution_id"): ("solution", lambda i, _: {"solution_id": i}),
        ("solution_lineage", "solution_id"): ("solution", lambda i, _: {"solution_id": i}),
        ("query_profiles", "solution_id"): ("solution", lambda i, _: {"solution_id": i}),
        ("query_profiles", "run_id"): ("run", lambda i, _: {"run_id": i}),
        ("list_llm_calls", "run_id"): ("run", lambda i, _: {"run_id": i}),
        ("get_llm_call", "call_id"): ("call", lambda i, _: {"call_id": i}),
        ("insert_solution", "parent_id"): (
            "solution",
            lambda i, _: {
                "solution": solution_from_source(
                    "# another\n" + FAST_SOURCE, DEF, name="child"
                ).model_dump(mode="json"),
                "parent_id": i,
            },
        ),
        ("insert_profile", "solution_id"): (
            "solution",
            lambda i, r: {
                "workload_uuid": r["workload"],
                "solution_id": i,
                "evaluation": {
                    "status": "RUNTIME_ERROR",
                    "environment": {"hardware": "cpu/test"},
                    "timestamp": "2026-01-01T00:00:00Z",
                },
                "benchmark_config": {},
            },
        ),
        ("list_memory", "run_id"): ("run", lambda i, _: {"run_id": i}),
        ("add_memory", "item.run_id"): ("run", lambda i, _: item(run_id=i)),
        ("add_memory", "item.slow_solution_id"): (
            "solution",
            lambda i, _: item(slow_solution_id=i),
        ),
        ("add_memory", "item.fast_solution_id"): (
            "solution",
            lambda i, _: item(fast_solution_id=i),
        ),
        ("remove_memory", "experience_id"): ("experience", lambda i, _: {"experience_id": i}),
        ("job_status", "job_id"): ("run", lambda i, _: {"job_id": i}),
        ("job_result", "job_id"): ("run", lambda i, _: {"job_id": i}),
        ("cancel_job", "job_id"): ("run", lambda i, _: {"job_id": i}),
        ("wait_for_job", "job_id"): ("run", lambda i, _: {"job_id": i, "timeout_s": 1}),
        ("suite_status", "suite_id"): ("suite", lambda i, _: {"suite_id": i}),
        ("cancel_suite", "suite_id"): ("suite", lambda i, _: {"suite_id": i}),
    }


NOT_FOUND = ("no solution with id", "no run with id", "no job with id", "no memory item with id")
NOT_FOUND += ("no suite with id", "no LLM call", "no solution", "prefix needs")


async def test_every_id_argument_takes_a_prefix_and_names_an_ambiguous_one(
    admin_client: Client, store: KernelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    unique, pair = stored_records(store, monkeypatch)

    listed = (await admin_client.list_tools()).tools
    found: set[tuple[str, str]] = set()
    for tool in listed:
        paths: set[str] = set()
        walk(tool.input_schema, tool.input_schema.get("$defs", {}), "", paths)
        found |= {(tool.name, p) for p in paths}
    table = cases()
    assert found == set(table), f"id arguments without a case: {found - set(table)}"

    # Ambiguous first (nothing runs), then the unique prefixes (remove_memory last-ish).
    for (tool, path), (kind, arguments) in table.items():
        result = await admin_client.call_tool(tool, arguments(TWIN, unique))
        text = text_of(result)
        assert result.is_error, f"{tool} {path}: {TWIN} names two records, yet: {text[:300]}"
        assert "matches" in text and "give more of the id" in text, (tool, path, text)
        if kind != "call":  # the ledger's own message does not list them
            assert pair[0][kind] in text and pair[1][kind] in text, (tool, path, text)
    for (tool, path), (kind, arguments) in table.items():
        prefix = unique[kind][:8]
        result = await admin_client.call_tool(tool, arguments(prefix, unique))
        text = text_of(result)
        # Accepted: it succeeded, or failed for a reason other than the id (a run made by
        # hand has no job output, for instance).
        assert not any(n in text for n in NOT_FOUND) and "matches" not in text, (tool, path, text)
        if tool in ("get_solution", "solution_lineage", "insert_solution") or result.is_error:
            # The whole id it resolved to is in the answer (a hand-made run is no job: the
            # refusal names it in full).
            assert unique[kind] in text, (tool, path, text)
        if tool not in ("job_status", "job_result", "cancel_job", "wait_for_job"):
            assert not result.is_error, (tool, path, text)

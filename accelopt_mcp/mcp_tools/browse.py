"""Read-only resources for browsing (definitions, kernels, runs, memory) and the prompt that
starts the optimize workflow. Unlike the tools, the resources close over the state: the SDK
hands no Context to a resource whose URI has no parameters."""

from __future__ import annotations

import json
from functools import partial
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from accelopt_mcp.mcp_tools.app import AccelOptServer
from accelopt_mcp.mcp_tools.state import ServerState
from accelopt_mcp.mcp_tools.views import (
    SOURCE_CHARS,
    definition_summary,
    memory_item,
    redacted_tail,
    run_summary,
    solution_summary,
)

LISTING_LIMIT = 200
R = TypeVar("R")


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, default=str)


def _found(record: R | None, missing: str) -> R:
    """The record a resource's URI names; ResourceNotFoundError(`missing`) when there is none."""
    if record is None:
        raise ResourceNotFoundError(missing)
    return record


def register(server: AccelOptServer, state: ServerState) -> None:
    json_resource = partial(server.resource, mime_type="application/json")

    @json_resource(
        "accelopt://definitions",
        name="definitions",
        description="Every stored definition (name, op type, axes).",
    )
    def definitions() -> str:
        found = sorted(state.store().list_definitions(), key=lambda d: d.name)
        return _json([definition_summary(d).model_dump() for d in found[:LISTING_LIMIT]])

    @json_resource(
        "accelopt://definitions/{name}",
        name="definition",
        description="One definition in full (FlashInfer-Trace JSON).",
    )
    def definition(name: str) -> str:
        stored = _found(state.store().get_definition(name), f"no definition named {name!r}")
        return stored.definition.to_json()

    @json_resource(
        "accelopt://definitions/{name}/solutions",
        name="definition-solutions",
        description="Solutions of a definition, fastest correct first (results flagged "
        "untrusted, e.g. above_peak, rank nothing; list_solutions with include_flagged shows "
        "them).",
    )
    def definition_solutions(name: str) -> str:
        store = state.store()
        _found(store.get_definition(name), f"no definition named {name!r}")
        entries = store.ranked_solutions(name)[:LISTING_LIMIT]
        return _json([solution_summary(e.solution, e.best_profile).model_dump() for e in entries])

    @server.resource(  # the one resource that is not JSON
        "accelopt://solutions/{solution_id}",
        name="kernel-source",
        description="A kernel's entry source file (the first 16k characters).",
        mime_type="text/x-python",
    )
    def solution_source(solution_id: str) -> str:
        stored = _found(
            state.store().get_solution(solution_id), f"no solution with id {solution_id!r}"
        )
        text = stored.solution.entry_source.content
        if len(text) > SOURCE_CHARS:
            return text[:SOURCE_CHARS] + "\n# [... cut; get_solution pages the rest ...]\n"
        return text

    @json_resource(
        "accelopt://runs",
        name="runs",
        description="The newest optimization runs.",
    )
    def runs() -> str:
        return _json([run_summary(r).model_dump() for r in state.store().list_runs(limit=50)])

    @json_resource(
        "accelopt://runs/{run_id}",
        name="run",
        description="One run: status, best kernel, cost, configuration.",
    )
    def run(run_id: str) -> str:
        record = _found(state.store().get_run(run_id), f"no run with id {run_id!r}")
        summary = run_summary(record).model_dump()
        summary["config"] = record.config
        summary["error"] = redacted_tail(record.error, 2000)
        return _json(summary)

    @json_resource(
        "accelopt://memory/{namespace}",
        name="memory",
        description="The working memory (newest 16 items) of a namespace, oldest first.",
    )
    def memory(namespace: str) -> str:
        items = state.store().recent_experiences(namespace=namespace, limit=16)
        return _json([memory_item(e).model_dump() for e in items])

    @server.prompt(
        name="optimize_kernel",
        description="Optimize a kernel the AccelOpt way with this server's tools.",
    )
    def optimize_kernel(
        kernel_path: str, task_path: str = "", backend: str = "cpu", store_url: str = ""
    ) -> str:
        task = task_path or "(ask the user for the task: a definition .json or NKIBench .py)"
        return "\n".join(
            [
                f"Optimize the kernel at {kernel_path} against the task {task} on the "
                f"`{backend}` backend with the accelopt tools.",
                "1. check_database"
                + (f' with url="{store_url}"' if store_url else "")
                + ": if ok is false, show the user its message and next_steps and stop.",
                "2. list_backends: make sure the backend is usable here; if not, say why.",
                "3. profile_kernel on the kernel: it must be correct before it is optimized.",
                "4. search_memory for ideas recorded for similar kernels.",
                "5. start_optimization (a few iterations first), then wait_for_job to follow "
                "progress; job_status and job_result at any time; cancel_job to stop.",
                "6. Report: the speedup, the best kernel (get_solution), its lineage, the cost, "
                "and the experience items the run learned (list_memory with its run_id).",
            ]
        )

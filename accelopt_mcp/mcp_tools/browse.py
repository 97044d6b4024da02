"""Read-only resources for browsing (definitions, kernels, runs, memory) and the prompt that
starts the optimize workflow. Unlike the tools, the resources close over the state: the SDK
hands no Context to a resource whose URI has no parameters."""

from __future__ import annotations

import json
from typing import Any

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


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, default=str)


def register(server: AccelOptServer, state: ServerState) -> None:
    @server.resource(
        "accelopt://definitions",
        name="definitions",
        description="Every stored definition (name, op type, axes).",
        mime_type="application/json",
    )
    def definitions() -> str:
        found = sorted(state.store().list_definitions(), key=lambda d: d.name)
        return _json([definition_summary(d).model_dump() for d in found[:LISTING_LIMIT]])

    @server.resource(
        "accelopt://definitions/{name}",
        name="definition",
        description="One definition in full (FlashInfer-Trace JSON).",
        mime_type="application/json",
    )
    def definition(name: str) -> str:
        stored = state.store().get_definition(name)
        if stored is None:
            raise ResourceNotFoundError(f"no definition named {name!r}")
        return stored.definition.to_json()

    @server.resource(
        "accelopt://definitions/{name}/solutions",
        name="definition-solutions",
        description="Solutions of a definition, fastest correct first (results flagged "
        "untrusted, e.g. above_peak, rank nothing; list_solutions with include_flagged shows "
        "them).",
        mime_type="application/json",
    )
    def definition_solutions(name: str) -> str:
        store = state.store()
        if store.get_definition(name) is None:
            raise ResourceNotFoundError(f"no definition named {name!r}")
        entries = store.ranked_solutions(name)[:LISTING_LIMIT]
        return _json([solution_summary(e.solution, e.best_profile).model_dump() for e in entries])

    @server.resource(
        "accelopt://solutions/{solution_id}",
        name="kernel-source",
        description="A kernel's entry source file (the first 16k characters).",
        mime_type="text/x-python",
    )
    def solution_source(solution_id: str) -> str:
        stored = state.store().get_solution(solution_id)
        if stored is None:
            raise ResourceNotFoundError(f"no solution with id {solution_id!r}")
        text = stored.solution.entry_source.content
        if len(text) > SOURCE_CHARS:
            return text[:SOURCE_CHARS] + "\n# [... cut; get_solution pages the rest ...]\n"
        return text

    @server.resource(
        "accelopt://runs",
        name="runs",
        description="The newest optimization runs.",
        mime_type="application/json",
    )
    def runs() -> str:
        return _json([run_summary(r).model_dump() for r in state.store().list_runs(limit=50)])

    @server.resource(
        "accelopt://runs/{run_id}",
        name="run",
        description="One run: status, best kernel, cost, configuration.",
        mime_type="application/json",
    )
    def run(run_id: str) -> str:
        record = state.store().get_run(run_id)
        if record is None:
            raise ResourceNotFoundError(f"no run with id {run_id!r}")
        summary = run_summary(record).model_dump()
        summary["config"] = record.config
        summary["error"] = redacted_tail(record.error, 2000)
        return _json(summary)

    @server.resource(
        "accelopt://memory/{namespace}",
        name="memory",
        description="The working memory (newest 16 items) of a namespace, oldest first.",
        mime_type="application/json",
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

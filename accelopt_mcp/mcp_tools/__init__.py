"""The MCP server's tools, resources and prompt, one module per area."""

from __future__ import annotations

import logging
from typing import Any

from accelopt_mcp.mcp_tools.app import AccelOptServer
from accelopt_mcp.mcp_tools.state import ServerState

log = logging.getLogger("accelopt_mcp.server")

INSTRUCTIONS = """\
accelopt optimizes accelerator kernels the AccelOpt way (planner -> executor -> profiler ->
summarized experience memory, in a beam search) and keeps every kernel, profile and experience
in a kernel database with lineage.
Start with check_database (stop and relay its next_steps when ok is false) and list_backends.
profile_kernel checks and times one kernel. start_optimization runs the whole loop as a
background job: follow it with wait_for_job / job_status, read job_result, cancel_job to stop.
Browse with list_definitions, list_solutions, get_solution, solution_lineage, query_profiles;
read and curate the optimization memory with list_memory, search_memory, add_memory,
remove_memory. Long texts come in slices: pass next_offset back to get more."""


def build_server(state: ServerState, **settings: Any) -> AccelOptServer:
    """An MCP server exposing every tool over the given state (database, jobs)."""
    from accelopt_mcp import __version__
    from accelopt_mcp.mcp_tools import browse, kernels, memory, profiling

    settings.setdefault("log_level", "WARNING")
    server = AccelOptServer(
        state,
        name="accelopt",
        title="AccelOpt kernel optimizer",
        version=__version__,
        instructions=INSTRUCTIONS,
        **settings,
    )
    profiling.register(server, state)
    kernels.register(server, state)
    memory.register(server, state)
    try:
        from accelopt_mcp.mcp_tools import jobs
    except ModuleNotFoundError as exc:  # a build without the engine still browses and profiles
        if not (exc.name or "").startswith("accelopt_mcp.engine"):
            raise
        log.warning("optimization jobs are unavailable: %s", exc)
    else:
        jobs.register(server, state)
    browse.register(server, state)
    return server


__all__ = ["AccelOptServer", "ServerState", "build_server"]

"""The MCP server's tools, resources and prompt, one module per area. A tool is a plain
function of its module, listed in the module's TOOLS; one that needs the database or the jobs
takes `ctx: ToolContext` and gets the ServerState the server's lifespan hands every request."""

from __future__ import annotations

import logging
import os
from typing import Any

from accelopt_mcp.mcp_tools.app import AccelOptServer, compact_tool
from accelopt_mcp.mcp_tools.state import ServerState, state_lifespan

log = logging.getLogger("accelopt_mcp.server")

INSTRUCTIONS = """\
accelopt optimizes accelerator kernels the AccelOpt way (planner -> executor -> profiler ->
summarized experience memory, in a beam search) and keeps every kernel, profile and experience
in a kernel database with lineage.
Start with check_database (stop and relay its next_steps when ok is false) and list_backends.
profile_kernel checks, times and stores one kernel; give parent_id, name and evolve_metadata
to link a candidate in the same call, or parent_id and candidates to time a round of up to 7
beside their parent in one evaluation (a verdict each). Read `status`: TIMEOUT is slow, not
wrong. compare_kernels ranks 2-8 against each other.
start_optimization runs the whole loop as a background job: follow it with wait_for_job /
job_status, read job_result, cancel_job to stop. start_suite runs a whole benchmark (one
optimization per task, e.g. builtin='cpu-nkibench') and suite_status gives its percent-of-peak
table. Results are JSON; every speedup says what it
is against (_vs_reference, _vs_parent, _vs_initial). Ids may be given by a unique prefix of 8+
characters.
Browse with list_definitions, list_solutions, get_solution, solution_lineage, query_profiles;
read and curate the optimization memory with list_memory, search_memory, add_memory,
remove_memory. Long texts come in slices: pass next_offset back to get more."""

ADMIN_TOOLS_ENV = "ACCELOPT_ADMIN_TOOLS"
"""Set to 1 (or true, yes, on) to list the admin tools without --admin-tools."""


def admin_tools_from_env() -> bool:
    """Whether $ACCELOPT_ADMIN_TOOLS asks for the admin tools."""
    return os.environ.get(ADMIN_TOOLS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def build_server(
    state: ServerState, *, resume_jobs: bool = False, admin_tools: bool = False, **settings: Any
) -> AccelOptServer:
    """An MCP server exposing the tools over the given state (database, jobs). Its lifespan
    hands the state to each request, resumes interrupted jobs first when `resume_jobs`, and
    closes the state when the server stops. `admin_tools` adds the tools that write records
    by hand (insert_*, import_directory: kernels_admin.ADMIN_TOOLS); an agent that optimizes never
    needs them, and each listed tool costs every session context."""
    from accelopt_mcp import __version__
    from accelopt_mcp.mcp_tools import browse, compare, kernels, kernels_admin, llm_calls, profiling

    tools = [*profiling.TOOLS, *compare.TOOLS, *kernels.TOOLS, *llm_calls.TOOLS]
    if admin_tools:
        tools += kernels_admin.ADMIN_TOOLS
    try:
        from accelopt_mcp.mcp_tools import jobs, memory, suites
    except ModuleNotFoundError as exc:  # a build without the engine still browses and profiles
        if not (exc.name or "").startswith("accelopt_mcp.engine"):
            raise
        log.warning("optimization memory and jobs are unavailable: %s", exc)
    else:
        tools += [*memory.TOOLS, *jobs.TOOLS, *suites.TOOLS]
    settings.setdefault("log_level", "WARNING")
    server = AccelOptServer(
        name="accelopt",
        title="AccelOpt kernel optimizer",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=[compact_tool(t) for t in tools],
        lifespan=state_lifespan(state, resume_jobs=resume_jobs),
        **settings,
    )
    server.result_schemas = {t.name: t.output_schema for t in tools}
    browse.register(server, state)
    return server


__all__ = [
    "ADMIN_TOOLS_ENV",
    "AccelOptServer",
    "ServerState",
    "admin_tools_from_env",
    "build_server",
]

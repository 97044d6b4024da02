"""The kernel database's admin tools: insert records (idempotent upserts) and import
directories, which a server lists only when started with --admin-tools (ADMIN_TOOLS: an
optimizing agent never calls them, and every listed tool's schema costs each session
context). They refuse an unknown definition or solution as the browse tools (kernels.py) do."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp import transfer
from accelopt_mcp.linking import store_kernel
from accelopt_mcp.mcp_tools import ids
from accelopt_mcp.mcp_tools.app import NotFoundError
from accelopt_mcp.mcp_tools.kernels import definition_named
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import View
from accelopt_mcp.models import Definition, Evaluation, Solution, Workload, from_record
from accelopt_mcp.transfer.traceset import TransferCounts

UPSERT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)


class Inserted(View):
    kind: str
    id: str
    """Key of the stored row (name, uuid or id)."""


class SolutionInserted(View):
    kind: str = "solution"
    id: str
    created: bool
    """True: stored as a new row; false: this source was stored already (same id)."""
    name: str
    """The stored name."""
    parent_id: str | None = None
    """The stored parent."""
    filled: list[str] = Field(default_factory=list)
    """Fields of the stored row this call filled in (parent_id, name, author,
    evolve_metadata)."""
    notes: list[str] = Field(default_factory=list)
    message: str
    """What happened, in one line."""


class Imported(View):
    path: str
    format: str
    counts: TransferCounts


def insert_definition(ctx: ToolContext, definition: Definition) -> Inserted:
    """Store a definition (FlashInfer-Trace layout: name, op_type, axes, inputs, outputs,
    and `reference` Python code defining `run`). Storing it again replaces it."""
    return Inserted(kind="definition", id=state_of(ctx).store().upsert_definition(definition))


def insert_workload(
    ctx: ToolContext,
    definition_name: Annotated[str, Field(description="A stored definition.")],
    workload: Workload,
) -> Inserted:
    """Store a workload (values of the definition's variable axes) for a stored definition."""
    store = state_of(ctx).store()
    definition_named(store, definition_name)
    return Inserted(kind="workload", id=store.upsert_workload(definition_name, workload))


def insert_solution(
    ctx: ToolContext,
    solution: Solution,
    parent_id: Annotated[
        str | None, Field(description="The solution it was derived from (id or 8+ prefix).")
    ] = None,
    evolve_metadata: Annotated[
        dict[str, Any] | None, Field(description="Free-form notes, e.g. {'plan': ...}.")
    ] = None,
) -> SolutionInserted:
    """Store a solution (kernel) of a stored definition. A source stored already keeps its
    row and id: a missing parent, a placeholder name, the default author and absent
    evolve_metadata keys are filled in (`filled` says which); a value that contradicts the
    stored one is refused. profile_kernel does this and profiles in one call."""
    store = state_of(ctx).store()
    definition_named(store, solution.definition)
    parent = ids.solution(store, parent_id).id if parent_id is not None else None
    linked = store_kernel(store, solution, parent_id=parent, evolve_metadata=evolve_metadata)
    return from_record(SolutionInserted, linked, id=linked.solution_id, message=linked.describe())


def insert_profile(
    ctx: ToolContext,
    workload_uuid: str,
    solution_id: Annotated[str, Field(description="Solution id or 8+ prefix.")],
    evaluation: Annotated[
        dict[str, Any],
        Field(
            description="A FlashInfer-Trace evaluation: status, environment {hardware}, "
            "timestamp, correctness {max_relative_error, max_absolute_error}, performance "
            "{latency_ms, reference_latency_ms, speedup_factor}, log, flags."
        ),
    ],
    benchmark_config: Annotated[
        dict[str, Any], Field(description="How it was measured (seeds, iterations, ...).")
    ],
) -> Inserted:
    """Store an evaluation of a solution on a workload (profile_kernel measures and stores
    one itself). Each is kept as a measurement; the profile of that (workload, solution,
    config, hardware) shows their pooled figure."""
    store = state_of(ctx).store()
    solution_id = ids.solution(store, solution_id).id
    record = Evaluation.model_validate(evaluation)
    if store.get_workload(workload_uuid) is None:
        raise NotFoundError(
            f"no workload with uuid {workload_uuid!r}; get_definition lists the workloads of "
            "a definition and insert_workload adds one"
        )
    profile_id = store.upsert_profile(workload_uuid, solution_id, record, benchmark_config)
    return Inserted(kind="profile", id=profile_id)


def import_directory(
    ctx: ToolContext,
    path: Annotated[str, Field(description="Directory on the server's machine.")],
    format: Annotated[
        transfer.ImportFormat,
        Field(description="auto detects FlashInfer-Trace (definitions/...) or NKIBench."),
    ] = "auto",
) -> Imported:
    """Load a FlashInfer-Trace directory (definitions/, workloads/, solutions/, traces/) or an
    NKIBench directory (summary.json, reference/, kernels/) into the database. Idempotent."""
    state = state_of(ctx)
    folder = state.roots.tree(path, "path")
    chosen, counts = transfer.import_directory(state.store(), folder, fmt=format)
    return Imported(path=path, format=chosen, counts=counts)


ADMIN_TOOLS = [
    Tool.from_function(tool, annotations=UPSERT)
    for tool in (
        insert_definition,
        insert_workload,
        insert_solution,
        insert_profile,
        import_directory,
    )
]

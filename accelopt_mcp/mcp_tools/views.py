"""What the tools return: compact summaries of stored records, pages with the offset of the next
page, and text cut to a size an MCP client accepts (Claude Code rejects a tool result over about
25k tokens). Every speedup says what it is against: `_vs_reference` (the task's reference),
`_vs_parent`, `_vs_initial` (where the lineage starts)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from accelopt_mcp.comparing import shown_counters
from accelopt_mcp.models import MeasuringConditions, from_record
from accelopt_mcp.redaction import redact
from accelopt_mcp.store.base import (
    ExperienceRecord,
    RunRecord,
    StoredDefinition,
    StoredProfile,
    StoredSolution,
    StoredWorkload,
)

# An argument several tools take (the profiling ones and start_optimization).
ClusterArg = Annotated[
    str | None,
    Field(
        description="Ray cluster to profile on (host:port, ray://host:port, auto; 'local': "
        "this host). Default: the server's ACCELOPT_RAY_ADDRESS, else the server's host."
    ),
]

MAX_PAGE = 200
DEFAULT_PAGE = 50
SOURCE_CHARS = 16_000
LOG_CHARS = 600


class View(BaseModel):
    """Base of what the tools return: a field's docstring is its description in the tool's
    output schema."""

    model_config = ConfigDict(use_attribute_docstrings=True)


def _iso(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime) else value


Timestamp = Annotated[str | None, BeforeValidator(_iso)]
"""A stored time as the tools show it: ISO 8601 text (datetime.isoformat()); null when none."""


class TextSlice(View):
    text: str
    offset: int
    total_chars: int
    truncated: bool
    """True when more text follows; ask again with next_offset."""
    next_offset: int | None = None


def cut(text: str, offset: int = 0, limit: int = SOURCE_CHARS) -> TextSlice:
    offset = max(0, min(offset, len(text)))
    end = min(len(text), offset + limit)
    return TextSlice(
        text=text[offset:end],
        offset=offset,
        total_chars=len(text),
        truncated=end < len(text),
        next_offset=end if end < len(text) else None,
    )


def clip(text: str | None, limit: int = LOG_CHARS) -> str | None:
    """The tail of a long text (errors sit at the end of a log), marked as clipped."""
    if text is None or len(text) <= limit:
        return text
    return f"[... {len(text) - limit} chars clipped ...]\n" + text[-limit:]


def redacted_tail(text: str | None, limit: int = LOG_CHARS) -> str | None:
    """clip(), with secrets masked. Stores keep logs and errors redacted already; this covers
    rows stored before they did. Only the tail (and a margin, so that a secret cut at its start
    is still recognised) is masked, so a long log costs no more than a short one."""
    if not text:
        return text
    source = text[-(limit + 512) :]
    tail = redact(source)
    if len(tail) <= limit and len(source) == len(text):
        return tail
    clipped = len(text) - len(source) + len(tail) - limit
    return f"[... {clipped} chars clipped ...]\n" + tail[-limit:]


class PageInfo(View):
    total: int
    offset: int
    limit: int
    next_offset: int | None = None
    """Pass as `offset` to get the next page; null at the end."""


def page_info(total: int, offset: int, limit: int) -> PageInfo:
    end = offset + limit
    return PageInfo(
        total=total, offset=offset, limit=limit, next_offset=end if end < total else None
    )


# --------------------------------------------------------------------------- records


class TimedFigures(View):
    """A kernel's figures from one timing: its median with interval, and its speedup over the
    task's reference with interval."""

    median_ms: float | None = None
    ci_low_ms: float | None = None
    """Lower end of the median's confidence interval (null: the backend gave none)."""
    ci_high_ms: float | None = None
    speedup_vs_reference: float | None = None
    """Reference median / this median; null when it failed or had no reference."""
    speedup_vs_reference_ci_low: float | None = None
    speedup_vs_reference_ci_high: float | None = None
    """null with a lower end given: no upper bound (too few samples, or
    a latency interval reaching 0)."""


class DefinitionSummary(View):
    name: str
    op_type: str
    description: str | None = None
    tags: list[str] = Field(default_factory=list)
    axes: dict[str, Any]
    """Axis name -> its constant value, or 'var'."""
    inputs: list[str]
    outputs: list[str]


def definition_summary(stored: StoredDefinition) -> DefinitionSummary:
    d = stored.definition
    return DefinitionSummary(
        name=d.name,
        op_type=d.op_type,
        description=d.description,
        tags=list(d.tags),
        axes={n: getattr(a, "value", "var") for n, a in d.axes.items()},
        inputs=list(d.inputs),
        outputs=list(d.outputs),
    )


class WorkloadSummary(View):
    uuid: str
    axes: dict[str, int]


def workload_summary(stored: StoredWorkload) -> WorkloadSummary:
    return WorkloadSummary(uuid=stored.uuid, axes=dict(stored.workload.axes))


class ProfileSummary(View):
    id: str
    solution_id: str
    workload_uuid: str
    status: str
    hardware: str
    latency_ms: float | None = None
    reference_latency_ms: float | None = None
    speedup_vs_reference: float | None = None
    """Reference median / this median."""
    flags: list[str] = Field(default_factory=list)
    """Warnings of the evaluation (e.g. noisy_timing, above_peak)."""
    trusted: bool = True
    """False when a flag says its numbers cannot be believed (e.g. above_peak,
    constant_output): such a profile ranks nothing (never a best, unless asked for)."""
    hardware_counters: dict[str, float] = Field(default_factory=dict)
    log: str | None = None
    """The tail of the evaluation log."""
    created_at: Timestamp = None


def profile_summary(p: StoredProfile) -> ProfileSummary:
    return from_record(
        ProfileSummary,
        p,
        status=p.eval_status,
        hardware=p.eval_hardware,
        speedup_vs_reference=p.speedup,
        hardware_counters=shown_counters(p.evaluation),
        log=redacted_tail(p.evaluation.log) or None,
    )


class SolutionSummary(View):
    id: str
    name: str
    definition_name: str
    language: str
    author: str
    parent_id: str | None = None
    run_id: str | None = None
    description: str | None = None
    best_latency_ms: float | None = None
    """Fastest correct latency (trusted results only, unless flagged ones were asked for);
    null when none qualifies."""
    best_speedup_vs_reference: float | None = None
    best_hardware: str | None = None
    best_flags: list[str] = Field(default_factory=list)
    """Flags of the profile behind best_latency_ms (e.g. noisy_timing)."""
    best_trusted: bool | None = None
    """False when that profile is flagged untrusted (only when flagged ones were asked for)."""
    created_at: Timestamp = None


def solution_summary(s: StoredSolution, best: StoredProfile | None = None) -> SolutionSummary:
    run_id = s.evolve_metadata.get("run_id")
    return from_record(
        SolutionSummary,
        s,
        name=s.solution.name,
        language=s.spec_language,
        run_id=str(run_id) if run_id is not None else None,
        description=s.solution.description,
        best_latency_ms=best.latency_ms if best else None,
        best_speedup_vs_reference=best.speedup if best else None,
        best_hardware=best.eval_hardware if best else None,
        best_flags=best.flags if best else [],
        best_trusted=best.trusted if best else None,
    )


class MemoryItem(View):
    id: str
    title: str
    strategy: str
    pseudocode: str
    definition_name: str
    namespace: str
    run_id: str | None = None
    iteration: int | None = None
    speedup_vs_slow: float | None = None
    """The fast kernel's speedup over the slow one it was learned from (slow latency / fast
    latency)."""
    slow_solution_id: str | None = None
    fast_solution_id: str | None = None
    measured_on: str | None = None
    """What the measurement behind speedup_vs_slow was taken under (cores and which, BLAS
    threads, host load, evaluations at once): the lesson may hold only there. Null for an item
    added by hand."""
    conditions: MeasuringConditions | None = None
    """The same, field by field."""
    removed: bool = False
    created_at: Timestamp = None


def memory_item(e: ExperienceRecord) -> MemoryItem:
    return from_record(
        MemoryItem,
        e,
        strategy=clip(e.strategy, 4000) or "",
        pseudocode=clip(e.pseudocode, 4000) or "",
        speedup_vs_slow=e.speedup,
        measured_on=e.conditions.text() if e.conditions is not None else None,
    )


class RunSummary(View):
    id: str
    definition_name: str
    status: str
    current_iteration: int
    best_solution_id: str | None = None
    best_latency_ms: float | None = None
    cost_usd: float = 0.0
    error: str | None = None
    created_at: Timestamp = None


def run_summary(r: RunRecord) -> RunSummary:
    return from_record(RunSummary, r, error=redacted_tail(r.error))

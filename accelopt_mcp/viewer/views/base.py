"""What every page of the viewer shares: the base of its views, `NotFound`, reading a run
leniently (as much of a broken or half-written run as validates, and what could not be read),
and which of a kernel's profiles it is shown by."""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accelopt_mcp.engine.checkpoint import Checkpoint, RunSpec, read_run
from accelopt_mcp.store.base import KernelStore, RunRecord, StoredProfile

MAX_SCAN = 100_000
"""Most memory items or calls read for one view."""
PCT_COUNTER = "roofline_pct_of_peak"
"""The hardware counter a kernel's percent of peak is read from."""


class NotFound(LookupError):
    """No record with that id; the message says which and what to do."""


class View(BaseModel):
    """Base of the viewer's views: a field's docstring is its description."""

    model_config = ConfigDict(use_attribute_docstrings=True)


# --------------------------------------------------------------------------- reading a run


class ReadRun(BaseModel):
    """A run as far as it could be read."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run: RunRecord
    spec: RunSpec | None = None
    checkpoint: Checkpoint
    problems: list[str] = Field(default_factory=list)


def read_leniently(store: KernelStore, run: RunRecord) -> ReadRun:
    """The run's spec and checkpoint, or as much of them as validates (a run written by an
    older or newer version, or cut off while it was being written)."""
    entries = store.run_entries(run.id)
    try:
        spec, checkpoint = read_run(run, entries)
        return ReadRun(run=run, spec=spec, checkpoint=checkpoint)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        first = first_error(exc)
    problems = [
        f"the run's settings could not be read ({first}): figures that need them are left out"
    ]
    raw = run.config.get("checkpoint") if isinstance(run.config, dict) else None
    try:
        checkpoint = Checkpoint.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError as exc:
        problems.append(f"its checkpoint could not be read ({first_error(exc)})")
        checkpoint = Checkpoint()
    for entry in entries:
        try:
            checkpoint.read_entry(entry)
        except (ValidationError, TypeError, AttributeError) as exc:
            problems.append(
                f"its {entry.kind} entry {entry.key} could not be read ({first_error(exc)})"
            )
    return ReadRun(run=run, checkpoint=checkpoint, problems=problems)


def first_error(exc: Exception) -> str:
    """An error's first line: for a validation error, where and what its first complaint is."""
    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error.get("loc", ()))
        return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# --------------------------------------------------------------------------- a kernel's profile


def best_profile(profiles: Iterable[StoredProfile], hardware: str | None) -> StoredProfile | None:
    """The profile a node is shown by: on the run's hardware, passed and trusted first, then
    the fastest, then the newest."""

    def rank(p: StoredProfile) -> tuple[int, int, int, float]:
        return (
            0 if hardware is None or p.eval_hardware == hardware else 1,
            0 if p.eval_status == "PASSED" else 1,
            0 if p.trusted else 1,
            p.latency_ms if p.latency_ms is not None else math.inf,
        )

    found = sorted(profiles, key=rank)
    return found[0] if found else None


def percent_of_peak(profile: StoredProfile | None) -> float | None:
    """Its percent of the roofline (PCT_COUNTER), where known and finite."""
    if profile is None:
        return None
    value = profile.evaluation.hardware_counters.get(PCT_COUNTER)
    return value if value is not None and math.isfinite(value) else None

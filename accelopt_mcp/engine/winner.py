"""Deciding a run's winners under noise, and writing the fastest kernel of a finished run.

Where the intervals of two kernels overlap and the tie decides who leads the beam (the run's
best) or who takes its last slot (selection.next_beam), the two are re-measured head-to-head,
in the same interleaved rounds on one device, and the verdict decides. Re-measures cost device
time, so an iteration runs at most MAX_TIE_BREAKS of them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from accelopt_mcp.engine.profile_cache import ProfileCache
from accelopt_mcp.engine.selection import (
    AttemptRecord,
    BeamChoice,
    BeamEntry,
    HeadToHead,
    TieDecision,
    next_beam,
)
from accelopt_mcp.models import KernelComparison, SourceFile
from accelopt_mcp.stats import finite_or_none
from accelopt_mcp.store.base import KernelStore

log = logging.getLogger(__name__)

MAX_TIE_BREAKS = 2
"""Head-to-head re-measures per iteration at most: one for first place, one for the last beam
slot, the two decisions a tie can change. A tie beyond it keeps the old rule."""

Measure = Callable[[TieDecision], Awaitable[HeadToHead]]
"""Re-measures the two kernels of a tie (TieDecision.placed, .challenger)."""


async def settle_beam(
    old: list[BeamEntry],
    attempts: list[AttemptRecord],
    width: int,
    measure: Measure,
    *,
    iteration: int,
    max_tie_breaks: int = MAX_TIE_BREAKS,
) -> BeamChoice:
    """The next beam with its ties re-measured, in the order next_beam decides them (first
    place, then the last slot on the order that left), at most `max_tie_breaks` of them."""
    outcomes: dict[frozenset[str], HeadToHead] = {}
    for _ in range(max_tie_breaks):
        choice = next_beam(old, attempts, width, outcomes, iteration=iteration)
        pending = next((tie for tie in choice.ties if tie.head_to_head is None), None)
        if pending is None:
            return choice
        outcomes[pending.pair] = await measure(pending)
    return next_beam(old, attempts, width, outcomes, iteration=iteration)


async def head_to_head(profiles: ProfileCache, a: str, b: str) -> HeadToHead:
    """Kernels a and b (stored solution ids) re-measured against each other. A re-measure that
    fails gives no verdict (the old rule decides) rather than failing the run."""
    try:
        comparison = await profiles.compare([a, b])
    except Exception as exc:
        log.warning("head-to-head of %s and %s failed: %s", a, b, exc)
        return HeadToHead(verdict=None, note=f"the re-measure failed: {exc}"[:300])
    return head_to_head_of(comparison, a, b)


def head_to_head_of(comparison: KernelComparison, a: str, b: str) -> HeadToHead:
    """The verdict on a against b in a comparison labelled by their ids."""
    for pair in comparison.pairs:
        if {pair.kernel, pair.baseline} != {a, b}:
            continue
        faster, slower = pair.kernel, pair.baseline
        speedup, low, high = pair.speedup, pair.ci_low, pair.ci_high
        if pair.verdict == "slower" or speedup < 1.0:
            # Backends list the faster median first; should one not, turn the pair around.
            faster, slower = slower, faster
            speedup = 1.0 / speedup if speedup > 0 else float("inf")
            low, high = (1.0 / high if high > 0 else 0.0), (1.0 / low if low > 0 else float("inf"))
        clear = pair.verdict in ("faster", "slower")
        return HeadToHead(
            verdict="faster" if clear else "indistinguishable",
            faster=faster,
            slower=slower,
            speedup=finite_or_none(speedup),
            ci_low=low,
            ci_high=finite_or_none(high),
            interleaved=comparison.interleaved,
        )
    failed = [
        f"{k.label[:8]} {k.evaluation.status.value}"
        for k in comparison.kernels
        if not k.evaluation.passed
    ]
    passed = [k.label for k in comparison.kernels if k.evaluation.passed and k.label in (a, b)]
    if len(passed) == 1:
        # A kernel that fails the re-measure loses the tie: otherwise failing on purpose when
        # compared would keep an incumbent in its place for free.
        winner = passed[0]
        return HeadToHead(
            verdict="faster",
            faster=winner,
            slower=b if winner == a else a,
            interleaved=comparison.interleaved,
            note="the other did not pass in the re-measure: " + ", ".join(failed),
        )
    note = "did not pass in the re-measure: " + ", ".join(failed) if failed else "no pair timed"
    return HeadToHead(verdict=None, interleaved=comparison.interleaved, note=note)


def write_winner(
    store: KernelStore, best: BeamEntry | None, output_dir: Path | None, run_id: str
) -> str | None:
    """Write <output_dir>/<run>/best_<entry file> and best_solution.json; the entry file's
    path, or None when there is no winner or no folder to write it to."""
    if best is None or output_dir is None:
        return None
    stored = store.get_solution(best.solution_id)
    if stored is None:
        return None
    folder = Path(output_dir) / run_id
    folder.mkdir(parents=True, exist_ok=True)
    source: SourceFile = stored.solution.entry_source
    path = folder / f"best_{Path(source.path).name}"
    path.write_text(source.content, encoding="utf-8")
    (folder / "best_solution.json").write_text(stored.solution.to_json(), encoding="utf-8")
    return str(path)

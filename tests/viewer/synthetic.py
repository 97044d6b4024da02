"""Runs written straight into a store through its interface, as the engine writes them (a run
row with its settings and checkpoint, slot entries, solutions with lineage, profiles): any
size, on any store, in a second, with the shapes the engine rarely makes on demand (ancestors
outside the run, ties, flagged kernels, a broken row)."""

from __future__ import annotations

from dataclasses import dataclass, field

from accelopt_mcp.engine.checkpoint import Checkpoint, IterationSummary, RunSpec, run_config
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.runs import prepare_run
from accelopt_mcp.engine.selection import AttemptRecord, BeamEntry, HeadToHead, TieDecision
from accelopt_mcp.models import (
    BreakdownEntry,
    Environment,
    Evaluation,
    EvaluationStatus,
    Solution,
    Task,
)
from accelopt_mcp.store.base import ExperienceIn, KernelStore, RunRecord, RunUpdate
from tests.store.lineage_samples import beside
from tests.store.samples import passed_evaluation

HARDWARE = "cpu/x86_64/synthetic"
REFERENCE_MS = 4.0
BENCH = {"seeds": [0]}


def passed(
    latency: float, *, flags: tuple[str, ...] = (), parent_ms: float | None = None
) -> Evaluation:
    comparisons = []
    if parent_ms is not None:
        ratio = parent_ms / latency
        comparisons.append(beside(ratio, ratio * 0.97, ratio * 1.03, baseline_latency_ms=parent_ms))
    return passed_evaluation(
        latency,
        ci=(latency * 0.98, latency * 1.02),
        samples=(latency * 0.95, latency * 1.1),
        reference_ms=REFERENCE_MS,
        speedup_ci=(REFERENCE_MS / latency * 0.97, REFERENCE_MS / latency * 1.03),
        relative_spread=0.02,
        hardware=HARDWARE,
        timestamp="2026-12-01T00:00:00Z",
        hardware_counters={"roofline_pct_of_peak": 100.0 * 0.2 / latency, "memory_bound": 1.0},
        comparisons=comparisons,
        breakdown=[
            BreakdownEntry(what="np.exp", ms=latency * 0.6, share=0.6, calls=1),
            BreakdownEntry(what="L7: y = x / (1 + e)", ms=latency * 0.3, share=0.3, calls=1),
        ],
        flags=list(flags),
    )


def failed(status: EvaluationStatus = EvaluationStatus.COMPILE_ERROR) -> Evaluation:
    return Evaluation(
        status=status,
        environment=Environment(hardware=HARDWARE),
        timestamp="2026-12-01T00:00:00Z",
        log="SyntaxError: invalid syntax (kernel.py, line 3)",
    )


def variant(base: Solution, tag: str, extra: str = "") -> Solution:
    source = base.sources[0]
    content = f"{source.content}\n# variant {tag}{extra}\n"
    return base.model_copy(
        update={
            "name": f"{base.name}-{tag}",
            "sources": [source.model_copy(update={"content": content}), *base.sources[1:]],
        }
    )


@dataclass
class Synthetic:
    run_id: str
    initial_id: str
    ancestor_ids: list[str]
    """Kernels above the initial one, outside the run (nearest first)."""
    solution_ids: list[str] = field(default_factory=list)
    """The run's own kernels, in the order written."""
    flagged_id: str | None = None
    failed_id: str | None = None
    best_id: str | None = None
    tie: TieDecision | None = None


def write_run(
    store: KernelStore,
    task: Task,
    base: Solution,
    *,
    kernels: int = 12,
    iterations: int = 3,
    status: str = "completed",
    hostile: str = "",
) -> Synthetic:
    """A run of `kernels` kernels over `iterations` iterations, each a child of the one before
    in its iteration's first place (one chain, with siblings), its initial kernel the child of
    two imported kernels outside the run; one kernel failed, one flagged above_peak, a tie."""
    store.upsert_definition(task.definition)
    workload = store.upsert_workload(task.definition.name, task.workload)
    grand = store.upsert_solution(variant(base, "imported-grandparent"))
    parent = store.upsert_solution(variant(base, "imported-parent"), parent_id=grand)
    initial_solution = variant(base, "initial", hostile)
    config = OptimizeConfig(iterations=iterations, beam=2, plans=2, attempts=2, exp_n=4)
    run_id = prepare_run(store, task, initial_solution, config)
    initial = store.upsert_solution(initial_solution, parent_id=parent)
    store.upsert_profile(workload, initial, passed(3.0), BENCH)
    made = Synthetic(run_id=run_id, initial_id=initial, ancestor_ids=[parent, grand])
    checkpoint = Checkpoint(
        initial=BeamEntry(solution_id=initial, latency_ms=3.0, source_hash="h0", branch="initial"),
        hardware=HARDWARE,
        seed_experience_ids=[],
        elapsed_before_s=42.0,
    )
    per_iteration = max(1, kernels // iterations)
    head, head_ms = initial, 3.0
    written = 0
    for iteration in range(1, iterations + 1):
        best_here: tuple[str, float] | None = None
        count = per_iteration if iteration < iterations else kernels - written
        for index in range(count):
            b, p, a = 0, index // 2, index % 2
            meta = {
                "run_id": run_id,
                "iteration": iteration,
                "beam_index": b,
                "plan_index": p,
                "attempt_index": a,
                "plan": f"plan {iteration}/{b}/{p}: tile the rows {hostile}",
            }
            sid = store.upsert_solution(
                variant(base, f"{run_id[:8]}-{iteration}-{index}", hostile if index == 0 else ""),
                parent_id=head,
                evolve_metadata=meta,
            )
            made.solution_ids.append(sid)
            written += 1
            latency = head_ms * (0.9 - 0.01 * index)
            flags: tuple[str, ...] = ()
            if made.failed_id is None and index == 1:
                evaluation = failed()
                made.failed_id = sid
            elif made.flagged_id is None and index == 2:
                flags = ("above_peak",)
                evaluation = passed(latency * 0.1, flags=flags, parent_ms=head_ms)
                made.flagged_id = sid
            else:
                evaluation = passed(latency, parent_ms=head_ms)
            store.upsert_profile(workload, sid, evaluation, BENCH)
            record = AttemptRecord(
                iteration=iteration,
                beam_index=b,
                plan_index=p,
                attempt_index=a,
                parent_id=head,
                parent_latency_ms=head_ms,
                status=evaluation.status.value,
                solution_id=sid,
                source_hash=f"h{sid[:6]}",
                latency_ms=evaluation.performance.latency_ms if evaluation.performance else None,
                flags=list(flags),
                parent_speedup=head_ms / latency if evaluation.passed else None,
                speedup_ci_low=head_ms / latency * 0.97 if evaluation.passed else None,
                speedup_ci_high=head_ms / latency * 1.03 if evaluation.passed else None,
                speedup_measured="same_rounds" if evaluation.passed else None,
                error=None if evaluation.passed else "SyntaxError: invalid syntax",
            )
            store.put_run_entry(run_id, "slot", record.key, record.model_dump(mode="json"))
            if evaluation.passed and not flags and (best_here is None or latency < best_here[1]):
                best_here = (sid, latency)
        store.put_run_entry(
            run_id, "plans", f"{iteration}/0", {"plans": [f"plan {iteration}/0/0", None]}
        )
        if best_here is not None:
            head, head_ms = best_here
        checkpoint.history.append(
            IterationSummary(
                iteration=iteration,
                best_latency_ms=head_ms,
                attempts=count,
                passed=count - 1,
                failed=1,
                experiences_added=1,
                beam=[head],
            )
        )
        checkpoint.completed_iteration = iteration
    checkpoint.beam = [
        BeamEntry(solution_id=head, latency_ms=head_ms, source_hash="hb", branch="x")
    ]
    others = [s for s in made.solution_ids if s not in (head, made.failed_id, made.flagged_id)]
    if others:
        made.tie = TieDecision(
            iteration=iterations,
            place="first",
            slot=1,
            placed=head,
            challenger=others[-1],
            head_to_head=HeadToHead(
                verdict="indistinguishable",
                faster=head,
                slower=others[-1],
                speedup=1.01,
                ci_low=0.98,
                ci_high=1.04,
            ),
            kept=head,
            reason="lower median",
        )
        checkpoint.ties.append(made.tie)
    made.best_id = head
    store.add_experience(
        ExperienceIn(
            definition_name=task.definition.name,
            title=f"tile the rows {hostile}",
            strategy="one np.exp for all rows",
            run_id=run_id,
            slow_solution_id=initial,
            fast_solution_id=made.solution_ids[0],
            speedup=1.1,
            iteration=1,
        )
    )
    run = store.get_run(run_id)
    assert run is not None
    spec = RunSpec.model_validate(
        {k: run.config[k] for k in ("optimize", "task", "initial_solution", "request")}
    )
    store.update_run(
        run_id,
        RunUpdate(
            status=status,  # type: ignore[arg-type]
            config=run_config(spec, checkpoint),
            current_iteration=iterations,
            initial_solution_id=initial,
            best_solution_id=head,
            best_latency_ms=head_ms,
            tokens_in=1000,
            tokens_out=200,
            cost_usd=0.0123,
        ),
    )
    return made


def write_broken_run(store: KernelStore, task: Task) -> str:
    """A run row cut off while it was written: no settings, a checkpoint without an initial
    kernel, one slot entry that no longer validates."""
    store.upsert_definition(task.definition)
    run_id = store.create_run(
        RunRecord(
            id="0badc0de-0000-4000-8000-000000000001",
            definition_name=task.definition.name,
            status="running",
            config={"checkpoint": {"completed_iteration": 1}},
        )
    )
    store.put_run_entry(run_id, "slot", "1/0/0/0", {"iteration": "not a number"})
    return run_id

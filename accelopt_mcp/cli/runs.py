"""`accelopt runs list|show|call`: optimization runs, their trace and their LLM calls."""

from __future__ import annotations

from typing import Annotated

import typer

from accelopt_mcp.cli.common import JsonOption, StoreOption, full_id, opened_store
from accelopt_mcp.cli.output import Table, console, fail, plain, print_json, say, short_id
from accelopt_mcp.engine.runs import (
    BestFigures,
    RunNotFound,
    best_figures,
    figure_text,
    load_run,
    run_state,
    speedup,
)
from accelopt_mcp.engine.selection import AttemptRecord
from accelopt_mcp.store.base import KernelStore, LlmCallRecord

app = typer.Typer(
    rich_markup_mode=None,
    help="Optimization runs: list them, show one's trace.",
    no_args_is_help=True,
)

RUN_HINT = "list runs with `accelopt runs list`"
APART_NOTE = (
    "timed apart: the ratio of two medians taken in different evaluations (other times, maybe "
    "another host load), with no interval; a figure 'same rounds' was timed beside its parent "
    "and carries one"
)


@app.command("list")
def list_runs(
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 20,
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Runs, newest first."""
    with opened_store(store) as db:
        rows = []
        for run in db.list_runs(status=status, limit=limit):
            try:
                _, spec, checkpoint = load_run(db, run.id)
            except ValueError:
                continue
            initial = checkpoint.initial.latency_ms if checkpoint.initial else None
            rows.append(
                {
                    "id": run.id,
                    "definition": run.definition_name,
                    "state": run_state(run, checkpoint),
                    "iteration": run.current_iteration,
                    "iterations": spec.optimize.iterations,
                    "initial_latency_ms": initial,
                    "best_latency_ms": run.best_latency_ms,
                    "speedup": speedup(initial, run.best_latency_ms),
                    # Two medians from different times (the initial kernel's first profile,
                    # the best one's): no same-round figure.
                    "speedup_measured": "apart",
                    "cost_usd": run.cost_usd,
                    "created_at": run.created_at,
                }
            )
    if as_json:
        print_json(rows)
        return
    table = Table(title="runs")
    table.add_id_column()
    for column in ("definition", "state", "iter", "best ms", "vs initial (timed apart)", "cost $"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            short_id(str(row["id"])),
            plain(row["definition"]),
            str(row["state"]),
            f"{row['iteration']}/{row['iterations']}",
            f"{row['best_latency_ms']:.4g}" if row["best_latency_ms"] else "-",
            f"{row['speedup']:.2f}x" if row["speedup"] else "-",
            f"{row['cost_usd']:.4f}",
        )
    console.print(table)
    if rows:
        say(APART_NOTE)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="Run id, or a prefix of 8+ characters.")],
    calls: Annotated[
        bool,
        typer.Option(
            "--calls",
            help="List the run's LLM calls instead, one line each, in the order they started.",
        ),
    ] = False,
    role: Annotated[str | None, typer.Option(help="With --calls: only this role's calls.")] = None,
    call: Annotated[
        str | None,
        typer.Option(
            "--call",
            help="Print one LLM call in full: its prompt and reply (id or 8+ character prefix).",
        ),
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """A run's trace: per iteration its plans, attempts (status, latency) and experiences;
    with --calls its LLM calls, with --call ID one call's prompt and reply."""
    with opened_store(store) as db:
        run_id = full_id(db, "run", run_id, noun="run", hint=RUN_HINT)
        if call is not None:
            _print_call(db, call, as_json, run_id=run_id)
            return
        if calls:
            _print_calls(db, run_id, role, as_json)
            return
        try:
            run, spec, checkpoint = load_run(db, run_id)
        except (RunNotFound, ValueError) as exc:
            fail(str(exc))
        experiences = db.recent_experiences(run_id=run_id, limit=100_000)
        llm = db.llm_totals(run_id)
    cfg = spec.optimize
    best = best_figures(checkpoint, run.best_solution_id, cfg.benchmark.confidence)
    if as_json:
        print_json(
            {
                "run": run.model_dump(mode="json", exclude={"config"}),
                "settings": spec.optimize.model_dump(mode="json"),
                "checkpoint": checkpoint.model_dump(mode="json"),
                "best": best.model_dump(mode="json") if best else None,
                "ties": [t.describe() for t in checkpoint.ties],
                "experiences": [e.model_dump(mode="json") for e in experiences],
                "llm": [t.model_dump(mode="json") for t in llm],
            }
        )
        return
    say(
        (f"run {run.id}", "bold"),
        f" {run.definition_name}: {run_state(run, checkpoint)}, iteration "
        f"{run.current_iteration}/{cfg.iterations} (T={cfg.iterations} B={cfg.beam} "
        f"N={cfg.plans} K={cfg.attempts} TopK={cfg.topk} ExpN={cfg.exp_n}, backend "
        f"{cfg.backend}, plans {cfg.plan_mode}, repair_tries {cfg.repair_tries}, memory "
        f"{cfg.memory_policy})",
    )
    state = run_state(run, checkpoint)
    if state in ("running", "pending") and run.worker_id and run.lease_expires_at:
        until = run.lease_expires_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        say(f"held by worker {run.worker_id} (lease until {until})")
    elif state == "interrupted":
        say(f"interrupted: nobody holds it; continue with `accelopt resume {run.id}`")
    if checkpoint.initial:
        say(f"initial {checkpoint.initial.solution_id} {checkpoint.initial.latency_ms:.4g} ms")
    if run.best_latency_ms:
        say(_best_line(run.best_solution_id, run.best_latency_ms, best))
    for totals in llm:
        unfinished = [
            f"{n} {what}"
            for n, what in (
                (totals.failed, "failed"),
                (totals.interrupted, "interrupted"),
                (totals.in_flight, "in flight"),
            )
            if n
        ]
        say(
            f"LLM {totals.role}: {totals.calls} calls"
            + (f" ({', '.join(unfinished)})" if unfinished else "")
            + f", {totals.tokens_in}+{totals.tokens_out} tokens, ${totals.cost_usd:.4f}"
        )
    if run.error:
        label = "stopped" if run.status in ("llm_unavailable", "failed") else "note"
        say(f"{label}: {run.error}")
    if checkpoint.slots and not any(s.passed for s in checkpoint.slots.values()):
        say(
            f"no attempt passed ({len(checkpoint.slots)} tried): the initial kernel is still "
            "the best"
        )
    summaries = {item.iteration: item for item in checkpoint.history}
    iterations = sorted({s.iteration for s in checkpoint.slots.values()})
    for iteration in iterations:
        console.rule(f"iteration {iteration}")
        done = summaries.get(iteration)
        if done is not None:
            diversity = (
                f", plan diversity {done.plan_diversity:.2f}"
                if done.plan_diversity is not None
                else ""
            )
            say(
                f"{done.passed}/{done.attempts} passed ({done.flagged} flagged, "
                f"{done.repaired} after a repair){diversity}, {done.experiences_added} "
                f"experience(s), {done.wall_s:.0f} s"
            )
        for key, plans in sorted(checkpoint.plans.items()):
            if not key.startswith(f"{iteration}/"):
                continue
            for index, plan in enumerate(plans):
                text = (plan or "(planner failed)").replace("\n", " ")
                say(f"plan {key}/{index}: {text[:160]}")
        table = Table()
        for column in ("slot", "status", "latency ms", "vs parent", "solution", "note"):
            table.add_column(column)
        for slot in sorted(
            checkpoint.slots_of(iteration),
            key=lambda s: (s.beam_index, s.plan_index, s.attempt_index),
        ):
            table.add_row(
                slot.key,
                slot.status,
                f"{slot.latency_ms:.4g}" if slot.latency_ms is not None else "-",
                _slot_speedup(slot),
                (slot.solution_id or "-")[:8],
                plain(_slot_note(slot)),
            )
        console.print(table)
        for tie in checkpoint.ties_of(iteration):
            say(tie.describe())
        for item in experiences:
            if item.iteration == iteration:
                said = f"{item.speedup or 0:.2f}x fast over slow"
                if item.conditions is not None:
                    said += f", measured on {item.conditions.text()}"
                say(f"experience: {item.title} ({said})")


def _slot_note(slot: AttemptRecord) -> str:
    """What the table's note column says of an attempt: repairs, then its error or reuse."""
    note = slot.error or ("reused profile" if slot.reused_profile else "")
    if slot.repairs:
        note = f"{slot.repairs} repair(s); " + note
    return " ".join(note.split())[:80]


@app.command("call")
def call_command(
    call_id: Annotated[str, typer.Argument(help="LLM call id, or a prefix of 8+ characters.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """One LLM call in full: when, which role and model, tokens, cost, the prompt and the
    reply (as stored: redacted)."""
    with opened_store(store) as db:
        _print_call(db, call_id, as_json)


# --------------------------------------------------------------------------- llm calls


def _plain(text: str) -> None:
    """Print text as it is: no markup, no highlighting, no emoji codes, no re-wrapping."""
    console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)


def _when(call: LlmCallRecord) -> str:
    moment = call.started_at or call.created_at
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def call_line(call: LlmCallRecord) -> str:
    """One line: short id, start time, role, purpose, model, status, tokens in/out, cost,
    latency, error."""
    estimated = "~" if call.status in ("in_flight", "interrupted") else ""
    parts = [
        call.id[:8],
        _when(call),
        f"{call.role:<10}",
        f"{call.purpose or '-':<22}",
        call.model,
        f"{call.status:<11}",
        f"{estimated}{call.tokens_in}/{call.tokens_out} tok",
        f"${call.cost_usd:.4f}",
        f"{call.latency_s:.2f} s",
    ]
    if call.error:
        parts.append(" ".join(call.error.split())[:160])
    return "  ".join(parts)


def _print_calls(db: KernelStore, run_id: str, role: str | None, as_json: bool) -> None:
    run = db.get_run(run_id)
    if run is None:
        fail(f"no run {run_id!r} in {db.stats().location}; list runs with `accelopt runs list`")
    found = db.list_llm_calls(run_id, role=role)
    if as_json:
        print_json([c.model_dump(mode="json", exclude={"messages", "reply"}) for c in found])
        return
    what = f"{role} calls" if role else "LLM calls"
    _plain(f"run {run.id}: {len(found)} {what}, oldest first (~: estimated while in flight)")
    for item in found:
        _plain(call_line(item))
    if found:
        _plain("full prompt and reply: accelopt runs call <id>")


def _print_call(db: KernelStore, call_id: str, as_json: bool, *, run_id: str | None = None) -> None:
    found = db.get_llm_call(call_id)
    if found is None or (run_id is not None and found.run_id != run_id):
        where = f" of run {run_id!r}" if run_id else ""
        fail(f"no LLM call {call_id!r}{where}; `accelopt runs show RUN --calls` lists them")
    if as_json:
        print_json(found.model_dump(mode="json"))
        return
    finished = found.finished_at.strftime("%Y-%m-%d %H:%M:%S") if found.finished_at else "-"
    estimated = " (estimated)" if found.status in ("in_flight", "interrupted") else ""
    for line in (
        f"call {found.id} of run {found.run_id or '-'}",
        f"role {found.role}, model {found.model}, purpose {found.purpose or '-'}",
        f"status {found.status}, started {_when(found)}, finished {finished}, "
        f"latency {found.latency_s:.2f} s",
        f"tokens {found.tokens_in} in{estimated}, {found.tokens_out} out, "
        f"cost ${found.cost_usd:.4f}",
    ):
        _plain(line)
    if found.error:
        _plain(f"error: {found.error}")
    if found.messages is None:
        _plain("(no prompt stored: the call was recorded before prompts were kept)")
    for message in found.messages or []:
        _plain(f"----- {message.role} -----")
        _plain(message.content)
    _plain("----- reply -----")
    _plain(found.reply if found.reply is not None else "(no reply)")


def _best_line(solution_id: str | None, latency_ms: float, best: BestFigures | None) -> str:
    line = f"best {solution_id} {latency_ms:.4g} ms"
    if best is None:
        return line
    parts = []
    if best.over_reference is not None:
        parts.append(figure_text(best.over_reference, "the reference"))
    if best.is_initial:
        parts.append("the initial kernel itself (nothing beat it)")
    elif best.over_initial is not None:
        parts.append(figure_text(best.over_initial, "the initial kernel"))
    return f"{line}: {'; '.join(parts)}" if parts else line


def _slot_speedup(slot: AttemptRecord) -> str:
    """Over the parent, with its interval when there is one, and how it was had: 'same
    rounds' (the parent timed beside it) or 'timed apart' (two medians from different
    times)."""
    interval = slot.speedup_interval
    if interval is None:
        return "-"
    same = slot.speedup_measured == "same_rounds" or slot.parent_speedup is not None
    how = "same rounds" if same else "timed apart"
    if slot.speedup_ci_low is None:
        return f"{interval.estimate:.2f}x ({how})"
    high = "inf" if interval.high == float("inf") else f"{interval.high:.2f}"
    return f"{interval.estimate:.2f}x [{interval.low:.2f}, {high}] ({how})"

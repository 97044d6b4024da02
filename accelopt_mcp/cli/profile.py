"""`accelopt profile` and `accelopt backends`: measure one kernel; see which backends run here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accelopt_mcp.backends.base import BackendUnavailableError
from accelopt_mcp.backends.cluster import (
    ClusterError,
    cluster_address,
    describe_nodes,
    first_line,
)
from accelopt_mcp.backends.cpu_peaks import PeakSource
from accelopt_mcp.backends.cpu_peaks_records import CpuPeaks, PeakMeasurementError
from accelopt_mcp.cli.common import (
    BackendOption,
    ClusterOption,
    DecideAtOption,
    JsonOption,
    SeedsOption,
    StoreOption,
    TaskOption,
    TimeoutOption,
    WorkloadOption,
    benchmark_config,
    opened_store,
    task_and_kernel,
)
from accelopt_mcp.cli.output import Table, console, fail, plain, print_json, say
from accelopt_mcp.comparing import (
    breakdown_lines,
    comparison_text,
    interval_text,
    latency_text,
    reference_speedup_text,
    roofline_text,
    shown_counters,
    shown_evaluation,
)
from accelopt_mcp.models import Evaluation
from accelopt_mcp.profiling import ProfileOutcome, profile_kernel
from accelopt_mcp.store import open_store
from accelopt_mcp.store.base import KernelStore, StoreError


def profile(
    kernel: Annotated[Path, typer.Argument(help="Kernel .py file or solution .json.")],
    task: TaskOption,
    backend: BackendOption = "cpu",
    workload: WorkloadOption = None,
    seeds: SeedsOption = None,
    iterations: Annotated[int | None, typer.Option(min=1, help="Timed runs per round.")] = None,
    timeout: TimeoutOption = None,
    decide_at: DecideAtOption = None,
    max_timing: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            help="Cap on the time spent sampling, s (default 20), even if the intervals are "
            "still wider than --target-ci.",
        ),
    ] = None,
    target_ci: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            max=0.5,
            help="Time until every speedup's interval is within this fraction (default 0.01: "
            "+-1%), unless --decide-at is answered first.",
        ),
    ] = None,
    store: StoreOption = None,
    no_store: Annotated[bool, typer.Option("--no-store", help="Do not record the result.")] = False,
    as_json: JsonOption = False,
    cluster: ClusterOption = None,
    breakdown: Annotated[
        bool,
        typer.Option(
            "--breakdown",
            help="Also show where one call spends its time (cpu: per source line, one traced "
            "call after the timing; nki: engine busy times; flashinfer: per device kernel).",
        ),
    ] = False,
) -> None:
    """Check a kernel against its task's reference and time both; record the result."""
    loaded_task, solution = task_and_kernel(task, workload, kernel, backend)
    config = benchmark_config(
        decide_at=decide_at,
        seeds=seeds,
        iterations=iterations,
        max_timing=max_timing,
        timeout=timeout,
        target_ci=target_ci,
    )

    def run(db: KernelStore | None) -> ProfileOutcome:
        try:
            return profile_kernel(
                loaded_task,
                solution,
                backend=backend,
                config=config,
                store=db,
                origin=str(kernel),
                cluster=cluster,
                breakdown=breakdown or None,
            )
        except (BackendUnavailableError, ClusterError, ValueError) as exc:
            fail(str(exc))

    if no_store:
        outcome = run(None)
    else:
        with opened_store(store) as db:
            outcome = run(db)
    if as_json:
        # The record without the harness's internals (Evaluation.measurement): outputs are
        # read by people and agents, and those figures describe the harness, not the kernel.
        print_json(outcome.model_copy(update={"evaluation": shown_evaluation(outcome.evaluation)}))
    else:
        _print_evaluation(outcome)
    raise typer.Exit(0 if outcome.evaluation.passed else 1)


def _print_evaluation(outcome: ProfileOutcome) -> None:
    ev: Evaluation = outcome.evaluation
    colour = "green" if ev.passed else "red"
    say(
        (outcome.solution_name, "bold"),
        f" on {outcome.definition_name} ({ev.environment.hardware}): ",
        (ev.status.value, colour),
    )
    latency = latency_text(ev)
    if latency is not None:
        assert ev.performance is not None
        reference = ev.performance.reference_latency_ms
        line = f"  median {latency}"
        if reference > 0:
            line += f"   reference {interval_text(reference, None, None, ' ms')}"
        say(line)
    speedups = [reference_speedup_text(ev), *(comparison_text(c) for c in ev.comparisons)]
    for speedup in speedups:
        if speedup:
            say(f"  speedup {speedup}")
    if ev.latency_stats is not None and ev.performance is not None:
        s = ev.latency_stats
        busy = "; the host was busy, read with care" if s.contended else ""
        say(
            f"  spread (IQR / median) {s.relative_spread:.1%} over {s.runs} samples in "
            f"{s.measurement_rounds} sets of fresh processes{busy}"
        )
    # What the timing saw (cores, load, what was taken out) and, for a loose figure, what to do.
    for line in ev.log.splitlines():
        if line.startswith(("timing: ", "next step: ")):
            say(f"  {line}")
    roofline = roofline_text(ev)
    if roofline is not None:
        say(f"  roofline {roofline}")
    if ev.correctness is not None:
        say(
            f"  max abs error {ev.correctness.max_absolute_error:.3g}   "
            f"max rel error {ev.correctness.max_relative_error:.3g}"
        )
    counters = shown_counters(ev)
    if counters:
        table = Table(show_header=True, header_style="bold", box=None)
        table.add_column("counter")
        table.add_column("value", justify="right")
        for name, value in sorted(counters.items()):
            table.add_row(plain(name), f"{value:.6g}")
        console.print(table)
    shown = breakdown_lines(ev, top=12)
    if shown:
        say("  where one call spends its time (largest first):")
        for line in shown:
            # The kernel's own source text: printed as it is, never read as markup.
            console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    for flag in ev.flags:
        say(("  flag:", "yellow"), f" {flag}")
    if ev.log and not ev.passed:
        console.print(ev.log[-4000:], highlight=False, markup=False, soft_wrap=True)
    if outcome.solution_id:
        say(f"  stored: solution {outcome.solution_id}, profile {outcome.profile_id}")


def backends(
    as_json: JsonOption = False,
    store: StoreOption = None,
    cluster: ClusterOption = None,
    remeasure: Annotated[
        bool,
        typer.Option(
            "--remeasure",
            help="Measure this host's CPU peaks again (after a BLAS or NumPy upgrade, or when "
            "they were measured on a busy host) and keep the new figures.",
        ),
    ] = False,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure/--no-measure",
            help="Measure this host's CPU peaks if none are kept yet (a few seconds, once per "
            "CPU model).",
        ),
    ] = True,
) -> None:
    """Every backend and whether it can run on this host (and if not, why), and the CPU's
    measured peaks: percent of peak in every cpu profile is taken against them. With
    --cluster: every node of the Ray cluster, its devices and the backends it can run."""
    from accelopt_mcp.backends.registry import list_backends

    address = cluster_address(cluster)
    if address is not None:
        _cluster_backends(address, as_json)
        return

    found = list_backends()
    cpu = next((b for b in found if b.name == "cpu" and b.usable and b.hardware), None)
    peaks, problem = _cpu_peaks(cpu.hardware if cpu else None, store, remeasure, measure)
    if as_json:
        rows = [b.model_dump() for b in found]
        for row in rows:
            if row["name"] == "cpu":
                row["peaks"] = peaks.model_dump(mode="json") if peaks else None
                if problem:
                    row["peaks_problem"] = problem
        print_json(rows)
        return
    table = Table()
    for column in ("backend", "usable", "hardware", "isolation", "reason"):
        table.add_column(column)
    for b in found:
        table.add_row(
            plain(b.name),
            "yes" if b.usable else "no",
            plain(b.hardware or "-"),
            plain(b.isolation or "-"),
            plain(b.reason),
        )
    console.print(table)
    if peaks is not None:
        _print_peaks(peaks)
    elif problem:
        say(("cpu peaks:", "yellow"), f" {problem}")


def _cluster_backends(address: str, as_json: bool) -> None:
    try:
        nodes = describe_nodes(address)
    except ClusterError as exc:
        fail(str(exc))
    except Exception as exc:  # Ray's own errors: said in one line, not as a traceback
        fail(f"the Ray cluster at {address} could not list its nodes: {first_line(exc)}")
    if as_json:
        print_json({"cluster": address, "nodes": [n.model_dump(mode="json") for n in nodes]})
        return
    table = Table(title=f"Ray cluster at {address}")
    for column in ("node", "address", "devices", "backends", "not usable"):
        table.add_column(column)
    for node in nodes:
        devices = ", ".join(f"{k} {v:g}" for k, v in sorted(node.devices.items()))
        unusable = "; ".join(
            f"{a['name']}: {a['reason']}" for a in node.availability if not a.get("usable")
        )
        table.add_row(
            plain(f"{node.hostname or '?'} ({node.node_id[:8]})"),
            plain(node.address),
            plain(devices or "-"),
            plain(", ".join(node.backends) or "-"),
            plain(node.problem or unusable or "-"),
        )
    console.print(table)
    say(f"{len(nodes)} live node(s)")


def _cpu_peaks(
    hardware: str | None, url: str | None, remeasure: bool, measure: bool
) -> tuple[CpuPeaks | None, str | None]:
    """The cpu backend's peaks from the store (else the peaks file), measured when none are
    kept and `measure`; (None, why) when there are none."""
    if hardware is None:
        return None, "the cpu backend cannot run here"
    db: KernelStore | None = None
    try:
        db = open_store(url)
    except StoreError as exc:
        say(("warning:", "yellow"), f" peaks not kept in the store: {exc}", err=True)
    try:
        source = PeakSource(db)
        known = None if remeasure else source.known(hardware)
        if known is not None:
            return known, None
        if not (measure or remeasure):
            return None, "not measured yet: run `accelopt backends` to measure them"
        say(f"measuring this host's CPU peaks ({hardware}); this takes a few seconds", err=True)
        try:
            return source.peaks(hardware, remeasure=remeasure), None
        except PeakMeasurementError as exc:
            return None, f"could not be measured: {exc}"
    finally:
        if db is not None:
            db.close()


def _print_peaks(peaks: CpuPeaks) -> None:
    entries = peaks.by_cores
    table = Table(
        title=plain(
            f"cpu peaks: {peaks.hardware}, last measured {peaks.measured_at} in "
            f"{peaks.measure_seconds:.1f} s (NumPy {peaks.numpy}, BLAS {peaks.blas or '?'})"
        ),
        title_justify="left",
    )
    table.add_column("figure")
    for entry in entries:
        table.add_column(
            f"{entry.cores} core{'s' if entry.cores > 1 else ''} (cpus {_cpus(entry.cpus)})",
            justify="right",
        )

    def rate(value: float | None, unit: str) -> str:
        return "-" if value is None else f"{value / 1e9:.4g} {unit}"

    for label, name in (
        ("fp32 matmul (BLAS)", "matmul_fp32_flops_per_s"),
        ("fp64 matmul (BLAS)", "matmul_fp64_flops_per_s"),
        ("elementwise fp32", "vector_fp32_flops_per_s"),
        ("elementwise fp64", "vector_fp64_flops_per_s"),
    ):
        table.add_row(label, *(rate(getattr(e, name), "GFLOP/s") for e in entries))
    for method, label in (("processes", "one process per core"), ("blas", "BLAS threads")):
        if any(method in e.by_method for e in entries):
            table.add_row(
                f"  fp32 matmul, {label}",
                *(
                    rate(e.by_method.get(method, {}).get("matmul_fp32_flops_per_s"), "GFLOP/s")
                    for e in entries
                ),
            )
    levels = list(dict.fromkeys(p.level for e in entries for p in e.bandwidth))
    for level in levels:
        where = "streaming" if level == "memory" else f"data in {level}"
        cells = []
        for entry in entries:
            point = next((p for p in entry.bandwidth if p.level == level), None)
            cells.append(
                "-"
                if point is None
                else f"{rate(point.bytes_per_s, 'GB/s')} "
                f"({point.working_set_bytes / (1 << 20):.3g} MiB)"
            )
        table.add_row(f"memory, {where} (working set)", *cells)
    table.add_row("measured", *(plain(e.measured_at) for e in entries))
    table.add_row("host", *(plain(e.load.describe()) for e in entries))
    console.print(table)
    if any(e.load.busy for e in entries):
        say(
            ("  under load:", "yellow"),
            " figures taken on a busy host are lower than the cores can do; they are measured "
            "again when next needed on a quieter host (the best of each figure is kept)",
        )
    say(
        "  every cpu profile of a task with a roofline reports its percent of the peaks of as "
        "many cores as it ran on (one when pinned to one), measured with that many working at "
        "once; `accelopt backends --remeasure` measures again"
    )


def _cpus(cpus: list[int]) -> str:
    return ",".join(map(str, cpus)) or "?"

"""One cpu evaluation's measurement session: `evaluate` sizes the arenas and runs a `Session`,
which opens sets of fresh jailed processes (the reference's and every live kernel's), checks
each kernel's outputs on fixed and fresh inputs, times the contestants in interleaved,
shuffled rounds over passes, looks at whether its question is answered as the rounds grow
(stopping early when it is), drops or fails a kernel that breaks, and writes the timings, the
statistics and the host's contention into the result.

Over ~600 lines for one reason: `Session` is one class whose passes, stopping rule and report
share the same per-contestant sample state; splitting it is a change of design, not of files."""

from __future__ import annotations

import math
import os
import random
import secrets
import shutil
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from accelopt_mcp.backends.cpu_breakdown import TRACE_CAP_S, shape_breakdown
from accelopt_mcp.backends.cpu_candidate import storage_dtype
from accelopt_mcp.backends.cpu_candidate_parent import CallFailed, JailedRunner
from accelopt_mcp.backends.cpu_outcomes import MAX_STRESS_SETS, StageError, Verdict
from accelopt_mcp.backends.cpu_stages import record_stage
from accelopt_mcp.backends.cpu_values import (
    as_arena_values,
    compare_outputs,
    same_outputs,
    values_nbytes,
)
from accelopt_mcp.backends.host_load import load_average
from accelopt_mcp.backends.stress import scaled_input, scaled_name

if TYPE_CHECKING:
    from accelopt_mcp.backends.cpu_task import JailedHarness

TARGET_SAMPLE_NS = 1_000_000
MAX_BATCH = 32
PING_ROUNDS = 16
FRESH_CORRECTNESS_SETS = 2
ARENA_SLACK_BYTES = 1 << 20
REFERENCE = "reference"
PRIMARY = "candidate"
CONTENDED_SHARE = 0.05
"""The host reads as busy when, over all contestants' timed calls, more than this share of the
time went to other programs (taken out of the samples, but their caches were shared)."""
STEAL_LIMIT = 0.05
STOP_RESAMPLES = 1000
LOOK_GROWTH = 1.5
"""Sampling looks at whether its question is answered each time the rounds have grown by half
since the last look (30, 45, 68, ... rounds): a dozen looks at most in an evaluation."""
LOOK_SET_ROUNDS = 3
"""A look may come before a pass's minimum once every live process set has this many rounds:
a kernel of seconds per call is not held to `iterations` rounds per set once it is clear."""
LOOKS = 12
"""Every look is a chance for a kernel no different from its rival to seem clear of 1.0 by
luck; the looks share the 5 % error between them: an interval must clear a threshold at
confidence 1 - 0.05 / LOOKS to stop sampling (the reported interval stays at 95 %)."""
BLOCK_SECONDS = 0.25
MIN_ROUNDS = 8
CALL_LIMIT_FACTOR = 20
"""After its first call, a contestant's calls may each take this many times as long as that
one did (never less than CALL_LIMIT_FLOOR_S, never more than timeout_seconds): a kernel that
hangs in round 5 is given up on in seconds, not a minute."""
CALL_LIMIT_FLOOR_S = 5.0
SLOW_CALL_NS = 500_000_000
"""A contestant whose calls take longer than this gets no warm-up calls: the correctness
calls before them have warmed it, and each would cost as much as a timed round."""
MAX_ROUNDS_PER_PASS = 400
MAX_LIVE_JAILS = 24
"""Processes (all frozen but the one being timed) kept alive at once; more sets than fit are
opened after closing the oldest."""
STRESS_SIZE_FACTOR = 2
"""A stress set may hold at most this many times the bytes of the first seed's inputs (plus
ARENA_SLACK_BYTES): the arenas are sized from those."""


class _Clock:
    """The time cap on sampling, and /proc/stat's steal time over it."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + seconds
        self._stat = _cpu_times()
        self.capped = False

    def expired(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.capped = True
        return self.capped

    def steal_fraction(self) -> float:
        now = _cpu_times()
        if not now or not self._stat:
            return 0.0
        delta = [b - a for a, b in zip(self._stat, now, strict=False)]
        total = sum(delta)
        return delta[7] / total if total > 0 and len(delta) > 7 else 0.0


def _cpu_times() -> list[int]:
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def evaluate(job: dict[str, Any], result: dict[str, Any]) -> None:
    if job.get("jail") == "none":
        # The parent chose to run without a jail (ACCELOPT_JAIL=none, or none can run there);
        # this process's environment is the sandbox's allowlist, so the choice travels here.
        os.environ["ACCELOPT_JAIL"] = "none"
    from accelopt_mcp.backends.cpu_task import JailedHarness

    work = Path.cwd()
    # The task's own code (top level, get_inputs, transforms) runs only in this jail.
    harness = JailedHarness(job, work / "task_jail")
    try:
        _evaluate(job, result, harness, work)
    finally:
        harness.close()


def _evaluate(
    job: dict[str, Any], result: dict[str, Any], harness: JailedHarness, work: Path
) -> None:
    reference_dir = work / "reference_jail"
    reference_dir.mkdir(exist_ok=True)
    shutil.copy(job["reference_path"], reference_dir / "reference.py")

    # The first fixed seed sizes the arenas (one set per call, inputs or outputs).
    record_stage("inputs")
    probe_inputs = harness.inputs(job["seeds"][0])
    set_bytes = max(values_nbytes(as_arena_values(probe_inputs)), 1)
    output_bytes = sum(
        math.prod(o["shape"] or [1]) * storage_dtype(o["dtype"]).itemsize
        for o in job.get("output_plan") or []
        if o.get("shape") is not None
    )
    # One input (and output) set per call: room for the larger, with headroom for a kernel
    # that returns more than it should (refused by shape, not by a full arena).
    arena_bytes = min(
        job.get("max_arena_bytes", 256 << 20),
        4 * max(set_bytes, output_bytes) + ARENA_SLACK_BYTES,
    )
    Session(job, harness, result, reference_dir, arena_bytes).run()


def live_jails(kernels: int, max_sets: int) -> int:
    """How many jails an evaluation of `kernels` kernels keeps alive at most (the reference's
    included)."""
    contestants = kernels + 1
    return contestants * min(max_sets, max(1, MAX_LIVE_JAILS // contestants))


class ProcessSet:
    """One fresh process for the reference and for every live kernel, timed together."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.runners: dict[str, JailedRunner] = {}
        self.round_trip = 0.0
        self.own_share_ns = 0.0
        """Of an empty call's window, what read as others' time: this harness's own steps
        when it shares the core. Taken out of the samples like any other program's time,
        but not counted as the host being busy."""


class Session:
    """One evaluation's timing: the reference and every kernel (the candidate, and the
    baselines it is compared with) in interleaved rounds, over several sets of fresh
    processes, until the confidence intervals are narrow enough or the time cap is spent.

    In "primary" mode the first kernel is the candidate being evaluated: its failure ends the
    evaluation with that verdict. Any other kernel that fails (a baseline, or any kernel of a
    comparison) is dropped with its own outcome and the others go on."""

    def __init__(
        self,
        job: dict[str, Any],
        harness: JailedHarness,
        result: dict[str, Any],
        reference_dir: Path,
        arena_bytes: int,
    ) -> None:
        self.job = job
        self.harness = harness
        self.result = result
        self.reference_dir = reference_dir
        self.arena_bytes = arena_bytes
        self.kernels: dict[str, dict[str, Any]] = {k["label"]: k for k in job["kernels"]}
        if REFERENCE in self.kernels:
            raise StageError("setup", f"no kernel may be labelled {REFERENCE!r}")
        self.primary = bool(job.get("primary", True))
        self.live = list(self.kernels)
        self.flags: dict[str, list[str]] = {label: [] for label in self.kernels}
        if self.primary:
            # The candidate's flags are the result's: verdicts raised through main() keep them.
            self.flags[self.live[0]] = result["flags"]
        self.outcomes: dict[str, dict[str, Any]] = {}
        self.worst: dict[str, dict[str, float]] = {}
        self.seen: dict[str, list[tuple[list[Any], list[Any]]]] = {}
        self.samples: dict[str, list[float]] = {REFERENCE: [], **{k: [] for k in self.kernels}}
        self.block_of: list[int] = []
        self.per_call: dict[str, list[int]] = {}
        self.call_limit: dict[str, float] = {}
        """Per contestant, the longest one call may take once its first call is timed."""
        self.batch = 1
        self.foreign: dict[str, list[float]] = {REFERENCE: [], **{k: [] for k in self.kernels}}
        """Per contestant and timed round: the share of its window that went to other programs
        (taken out of its sample; reported)."""
        self.accounted = True
        """Whether every jail's CPU time could be read (else samples are wall clock)."""
        self.load_before = load_average()
        self.stderr: dict[str, str] = {}
        self.traced: JailedRunner | None = None
        """The process the breakdown's traced call ran in: its memory peak and what it printed
        were noted before that call (_breakdown), and are not taken again when it closes."""
        self.traced_stderr = ""
        self.timed_ns: dict[str, int] = {}
        self.timed_calls = 0
        self.round_trips: list[float] = []
        self.sets: list[ProcessSet] = []
        """The live process sets (older ones may have been closed; their samples stay)."""
        self.opened = 0
        self.per_set: dict[int, int] = {}
        self.rounds_done = 0
        self.next_look = 0
        self.answered = False
        """Whether sampling stopped because the question was answered."""
        """Rounds before the next look at whether the question is answered (LOOK_GROWTH)."""
        # Its own generator: the task's input drawing reseeds the `random` module.
        self.shuffler = random.Random(secrets.randbits(64))
        self.clock: _Clock | None = None
        self.analysis: Any = None

    # -- failures

    def _fail(self, label: str, exc: CallFailed | Verdict | StageError) -> None:
        """A kernel failed: the evaluation ends (the primary candidate) or it is dropped."""
        if isinstance(exc, CallFailed):
            kind = "timeout" if exc.timed_out else "runtime"
            exc = StageError(kind, f"the kernel failed: {exc.message}")
        if self.primary and label == PRIMARY:
            raise exc
        outcome: dict[str, Any] = {"flags": self.flags[label]}
        if isinstance(exc, Verdict):
            outcome |= {"status": exc.status, "message": exc.message}
            if exc.correctness is not None:
                outcome["correctness"] = exc.correctness
        else:
            outcome |= {
                "status": None,
                "error": {"kind": exc.kind, "message": exc.message, "traceback": exc.tb},
            }
        self.outcomes[label] = outcome
        self.live.remove(label)
        self.samples.pop(label, None)
        for pset in self.sets:
            runner = pset.runners.pop(label, None)
            if runner is not None:
                tail = runner.process.stderr_tail(4000).strip()
                if tail:
                    outcome["stderr"] = tail
                runner.close()
                self._note_peak(label, runner)

    def _reference(
        self, pset: ProcessSet, sets: list[list[Any]]
    ) -> tuple[int, list[list[Any]], list[list[str]]]:
        try:
            return pset.runners[REFERENCE].call(sets)
        except CallFailed as exc:
            raise StageError("reference", f"the reference failed: {exc.message}") from None
        except Verdict as verdict:  # the task's fault, not the candidate's
            raise StageError("reference", f"the reference failed: {verdict.message}") from None

    def _kernel(
        self, pset: ProcessSet, label: str, sets: list[list[Any]], what: str
    ) -> tuple[int, list[list[Any]], list[list[str]]]:
        harness = self.harness
        try:
            return pset.runners[label].call(
                [as_arena_values(harness.candidate_inputs(s)) for s in sets]
            )
        except CallFailed as exc:
            kind = "timeout" if exc.timed_out else "runtime"
            raise StageError(kind, f"the kernel failed {what}: {exc.message}") from None

    # -- the whole evaluation

    def run(self) -> None:
        job = self.job
        target = float(job.get("target_ci", 0.01))
        min_sets = int(job.get("min_processes", 3))
        max_sets = max(min_sets, int(job.get("max_processes", 8)))
        rounds = int(job["iterations"])
        try:
            self._open_sets(min_sets)
            first = True
            while self.live and self.sets:
                # A pass: `iterations` rounds per initial set, going to the sets with the fewest
                # samples first, so that a set opened late catches up.
                self._pass(rounds * min_sets, BLOCK_SECONDS * (min_sets if first else 1))
                first = False
                if self.clock is not None and self.clock.capped:
                    break
                if self.answered or self._should_stop():
                    break
                if self.opened >= max_sets or (self.clock is not None and self.clock.expired()):
                    break
                self._open_sets(1)
            self._breakdown()
        finally:
            for pset in self.sets:
                self._close_set(pset)
            self.sets.clear()
            if self.primary and PRIMARY in self.stderr:
                self.result["candidate_stderr"] = self.stderr[PRIMARY].strip()
        self._report(target)

    def _breakdown(self) -> None:
        """Where one call of the candidate spends its time (job "breakdown"): one more call, on
        fresh inputs, after every timed round and before its processes close, under the jailed
        side's line tracer (cpu_candidate.traced_call, which stops tracing after TRACE_CAP_S).
        Its outputs are not judged and its time is no sample; whatever goes wrong (the kernel
        raises, hangs past its call limit, forges or suppresses the report) leaves the
        breakdown empty with a note, never the verdict or a figure changed."""
        if not (self.job.get("breakdown") and self.primary and PRIMARY in self.live and self.sets):
            return
        runner = self.sets[-1].runners.get(PRIMARY)
        if runner is None:
            return
        record_stage("breakdown")
        harness = self.harness
        limit = self.call_limit.get(PRIMARY, float(self.job.get("timeout_seconds", 60.0)))
        # The figures of the timed work are taken now, so the untimed traced call changes
        # none of them: the jail's memory peak so far (its own peak is reported apart, as
        # breakdown_memory_peak_mb) and what the kernel printed so far (what the traced call
        # prints is left out of candidate_stderr).
        self._note_peak(PRIMARY, runner)
        self.traced = runner
        self.traced_stderr = runner.process.stderr_tail(4000).strip()
        started = time.perf_counter()
        try:
            inputs = as_arena_values(harness.inputs(secrets.randbits(31)))
            values = as_arena_values(harness.candidate_inputs(inputs))
            elapsed, report = runner.profile(values, limit + TRACE_CAP_S)
            self.result["breakdown"] = shape_breakdown(report, elapsed / 1e6)
        except (CallFailed, Verdict, StageError) as exc:
            self.result["breakdown_error"] = str(getattr(exc, "message", exc))[:300]
        except Exception as exc:  # anything else the jail made of it: still no verdict
            self.result["breakdown_error"] = repr(exc)[:300]
        # What it cost this evaluation (inputs, the traced call, reading the report).
        self.result["breakdown_s"] = time.perf_counter() - started
        peak = runner.process.memory_peak_mb
        if peak is not None:
            self.result["breakdown_memory_peak_mb"] = peak

    def _close_set(self, pset: ProcessSet) -> None:
        for label, runner in pset.runners.items():
            traced = runner is self.traced
            if label != REFERENCE:
                # What each kernel printed, every process's (the newest last, capped).
                tail = self.traced_stderr if traced else runner.process.stderr_tail(4000).strip()
                if tail:
                    self.stderr[label] = (self.stderr.get(label, "") + "\n" + tail)[-4000:]
            runner.close()
            if not traced:  # noted before the traced call (_breakdown)
                self._note_peak(label, runner)
        pset.runners.clear()

    def _note_peak(self, label: str, runner: JailedRunner) -> None:
        """The largest memory peak of any of `label`'s jails (its memory cgroup: every process
        and tmpfs page together), for the evaluation's measurement."""
        peak = runner.process.memory_peak_mb
        if peak is not None:
            peaks = self.result.setdefault("jail_memory_peak_mb", {})
            peaks[label] = max(peak, peaks.get(label, 0.0))
        # What held memory_limit_mb: the jail's memory cgroup, or RLIMIT_AS per process.
        self.result.setdefault("jail_memory_limit_by", {})[label] = runner.process.memory_limit_by

    def _open_sets(self, count: int) -> None:
        """Start `count` sets of fresh processes (the reference and every live kernel, all at
        once), then check and warm each. Processes stay alive, frozen, while the other sets
        are timed; beyond MAX_LIVE_JAILS the oldest set is closed (its samples stay)."""
        job, harness = self.job, self.harness
        live_cap = max(1, MAX_LIVE_JAILS // (1 + len(self.kernels)))
        new: list[ProcessSet] = []
        record_stage(f"jail start (process set {self.opened + 1})")
        for _ in range(min(count, live_cap)):
            while self.sets and len(self.sets) >= live_cap:
                self._close_set(self.sets.pop(0))
            pset = ProcessSet(self.opened)
            self.opened += 1
            new.append(pset)
            # Listed before its processes start, so that a failure half-way closes them too.
            self.sets.append(pset)
            pset.runners[REFERENCE] = JailedRunner(
                REFERENCE,
                self.reference_dir,
                self.reference_dir / "reference.py",
                "forward" if harness.style == "nkibench" else "run",
                job,
                arena_bytes=self.arena_bytes,
            )
            for label in self.live:
                spec = self.kernels[label]
                folder = Path(spec["kernel_dir"]).resolve()
                pset.runners[label] = JailedRunner(
                    PRIMARY if label == PRIMARY and self.primary else f"kernel {label}",
                    folder,
                    folder / spec["entry_file"],
                    spec["entry_symbol"],
                    job,
                    arena_bytes=self.arena_bytes,
                    destination_passing_style=bool(spec.get("destination_passing_style")),
                )
            if pset.index == 0:
                processes = [runner.process for runner in pset.runners.values()]
                self.result["isolation"] = {
                    "isolated": all(p.isolated for p in processes),
                    "freeze_method": processes[-1].freeze_method,
                }
        for pset in new:
            self._ready(pset)
        for pset in new:
            if not self.live:
                return
            record_stage(f"calibration (process set {pset.index + 1})")
            # Calibrated on the reference jail: the same runner, thaw and freeze as the
            # kernels', but code we trust; a candidate could answer pings slowly to shrink its
            # own figures.
            trips, own = [], []
            for _ in range(PING_ROUNDS):
                trips.append(pset.runners[REFERENCE].ping())
                own.append(pset.runners[REFERENCE].last_ping_foreign_ns)
            pset.round_trip = statistics.median(trips)
            pset.own_share_ns = statistics.median(own)
            self.round_trips.append(pset.round_trip)
            self._correctness(pset)
            if not self.live:
                return
            if pset.index == 0:
                fastest = max(1, min(min(times) for times in self.per_call.values()))
                self.batch = max(1, min(MAX_BATCH, TARGET_SAMPLE_NS // fastest))
            record_stage(f"warm-up (process set {pset.index + 1})")
            for _ in range(job["warmup_runs"]):
                sets = [as_arena_values(harness.inputs(secrets.randbits(31)))]
                if self._needs_warmup(REFERENCE):
                    self._reference(pset, sets)
                for label in list(self.live):
                    if not self._needs_warmup(label):
                        continue
                    try:
                        self._kernel(pset, label, sets, "during warm-up")
                    except (Verdict, StageError) as exc:
                        self._fail(label, exc)
        if self.clock is None:
            self.clock = _Clock(float(job.get("max_timing_seconds", 20.0)))

    def _needs_warmup(self, label: str) -> bool:
        times = self.per_call.get(label) or [0]
        return min(times) <= SLOW_CALL_NS

    def _ready(self, pset: ProcessSet) -> None:
        record_stage("reference import")
        try:
            pset.runners[REFERENCE].wait_ready()
        except CallFailed as exc:
            raise StageError(
                "reference", f"the reference cannot be imported: {exc.message}"
            ) from None
        record_stage("kernel import")
        for label in list(self.live):
            try:
                pset.runners[label].wait_ready()
            except CallFailed as exc:
                if pset.index == 0:
                    self._fail(label, StageError("compile", exc.message))
                else:
                    self._fail(
                        label,
                        StageError(
                            "runtime",
                            f"the kernel imported once but not in process set {pset.index + 1}: "
                            f"{exc.message}",
                        ),
                    )

    def _correctness(self, pset: ProcessSet) -> None:
        """The fixed seeds, then fresh sets no one could know in advance (one fresh set in
        later process sets). Every output is checked against the reference output for its own
        input."""
        harness, job = self.harness, self.job
        first = pset.index == 0
        fixed: list[int] = job["seeds"] if first else []
        fresh = [secrets.randbits(31) for _ in range(FRESH_CORRECTNESS_SETS if first else 1)]
        for index, seed in enumerate([*fixed, *fresh]):
            if index < len(fixed):
                label_text = f"seed {seed}"
            else:
                label_text = f"fresh input set {index - len(fixed) + 1}"
                if not first:
                    label_text += f" of process set {pset.index + 1}"
            record_stage(f"correctness {label_text}")
            inputs = [as_arena_values(harness.inputs(seed))]
            ref_ns, refs, ref_names = self._reference(pset, inputs)
            self.per_call.setdefault(REFERENCE, []).append(ref_ns)
            self._scale_call_limit(pset, REFERENCE)
            self._check_live(
                pset,
                inputs,
                refs[0],
                ref_names[0],
                label_text,
                timed=True,
                # Only where the fixed seeds were just passed: in a later process set a
                # failure on fresh inputs says nothing about following them.
                fresh_input=first and index >= len(fixed),
            )
        if first:
            self._stress(pset)
        for label in self.live:
            self._worst(label)

    def _stress_sets(self) -> list[tuple[str, list[Any]]]:
        """The task's stress sets: those its stress_inputs() declares (NKIBench tasks, drawn in
        the task's jail), then the first seed's inputs with every floating-point input scaled
        by each of its STRESS_SCALES (job "stress_scales", read from the reference's source).
        StageError (the task's fault, before any kernel is judged on them) when there are too
        many, or one does not match get_inputs()' arity or is too large."""
        harness, job = self.harness, self.job
        scales = [float(s) for s in job.get("stress_scales") or []]
        names = harness.stress_names()
        if len(names) + len(scales) > MAX_STRESS_SETS:
            raise StageError(
                "reference",
                f"the task declares {len(names) + len(scales)} stress sets (stress_inputs() and "
                f"STRESS_SCALES together); at most {MAX_STRESS_SETS}",
            )
        if not names and not scales:
            return []
        base = as_arena_values(harness.inputs(job["seeds"][0]))
        sets = [(name, as_arena_values(harness.stress_inputs(i))) for i, name in enumerate(names)]
        sets += [(scaled_name(scale), [scaled_input(v, scale) for v in base]) for scale in scales]
        budget = STRESS_SIZE_FACTOR * values_nbytes(base) + ARENA_SLACK_BYTES
        for name, values in sets:
            if len(values) != len(base):
                raise StageError(
                    "reference",
                    f"stress set {name!r} holds {len(values)} inputs; get_inputs() gives "
                    f"{len(base)}: a stress set takes the same inputs, in the same order",
                )
            size = values_nbytes(values)
            if size > budget:
                raise StageError(
                    "reference",
                    f"stress set {name!r} holds {size / 2**20:.1f} MiB of inputs; at most "
                    f"{STRESS_SIZE_FACTOR}x the first seed's ({budget / 2**20:.1f} MiB)",
                )
        return sets

    def _stress(self, pset: ProcessSet) -> None:
        """Every live kernel against the reference on each stress set (correctness only, never
        timed): failing one is the verdict the comparison gives (a NaN or inf output where the
        reference is finite is INCORRECT_NUMERICAL), with the set's name in its message."""
        started = time.perf_counter()
        sets = self._stress_sets()
        self.result["stress_sets"] = [name for name, _ in sets]
        for name, inputs in sets:
            label_text = f"stress set {name!r}"
            record_stage(f"correctness {label_text}")
            _, refs, ref_names = self._reference(pset, [inputs])
            self._check_live(
                pset,
                [inputs],
                refs[0],
                ref_names[0],
                label_text,
                timed=False,
                fresh_input=False,
                verdict_note=(
                    f" (the task declares this input set to check robustness beyond its "
                    f"usual inputs; the kernel passed the {len(self.job['seeds'])} seeds)"
                ),
            )
        # What checking them cost this evaluation (drawing, the reference's and every kernel's
        # calls, the comparisons).
        self.result["stress_s"] = time.perf_counter() - started

    def _check_live(
        self,
        pset: ProcessSet,
        inputs: list[list[Any]],
        refs: list[Any],
        ref_names: list[str],
        label_text: str,
        *,
        timed: bool,
        fresh_input: bool,
        verdict_note: str = "",
    ) -> None:
        """Every kernel still live, called on `inputs` (one input set) and checked against the
        reference's outputs for it; one that fails is dropped (or ends the evaluation) with its
        verdict, `verdict_note` added to a failed check's message. `timed`: its call counts
        towards its per-call times and bounds its later calls (_scale_call_limit)."""
        for label in list(self.live):
            try:
                cand_ns, outs, out_names = self._kernel(pset, label, inputs, f"on {label_text}")
                if timed:
                    self.per_call.setdefault(label, []).append(cand_ns)
                    self._scale_call_limit(pset, label)
                self._check(
                    label,
                    outs[0],
                    refs,
                    out_names[0],
                    ref_names,
                    label_text,
                    fresh_input=fresh_input,
                    fixed_count=len(self.job["seeds"]),
                )
            except Verdict as verdict:
                verdict.message += verdict_note
                self._fail(label, verdict)
            except StageError as exc:
                self._fail(label, exc)

    def _scale_call_limit(self, pset: ProcessSet, label: str) -> None:
        """From its first timed call on, a contestant's calls are bounded by what that call
        took (CALL_LIMIT_FACTOR, floor and cap), in this and every later process set."""
        if label not in self.call_limit:
            full = float(self.job.get("timeout_seconds", 60.0))
            first_s = self.per_call[label][0] / 1e9
            self.call_limit[label] = min(full, max(CALL_LIMIT_FLOOR_S, CALL_LIMIT_FACTOR * first_s))
        runner = pset.runners.get(label)
        if runner is not None and runner.call_timeout_s != self.call_limit[label]:
            runner.call_timeout_s = self.call_limit[label]
            runner.limit_reason = (
                "timeout_seconds"
                if runner.call_timeout_s >= float(self.job.get("timeout_seconds", 60.0))
                else f"{CALL_LIMIT_FACTOR}x its first call, at least {CALL_LIMIT_FLOOR_S:g} s"
            )

    def _worst(self, label: str) -> dict[str, float]:
        """The kernel's worst errors so far (all zero before its first check)."""
        return self.worst.setdefault(
            label, {"l2_rel_error": 0.0, "max_absolute_error": 0.0, "max_relative_error": 0.0}
        )

    def _check(
        self,
        label: str,
        outs: list[Any],
        refs: list[Any],
        out_names: list[str],
        ref_names: list[str],
        what: str,
        *,
        fresh_input: bool,
        fixed_count: int,
    ) -> None:
        harness, job = self.harness, self.job
        outs_ref_layout = harness.candidate_outputs(outs, refs)
        seen = self.seen.setdefault(label, [])
        try:
            errors = compare_outputs(
                outs_ref_layout,
                refs,
                job["rtol"],
                job["atol"],
                out_names,
                ref_names,
                nonfinite=job.get("nonfinite", "match"),
            )
        except Verdict as verdict:
            for prev_outs, prev_refs in seen:
                if same_outputs(outs_ref_layout, prev_outs) and not same_outputs(refs, prev_refs):
                    self.flags[label].append("constant_output")
                    verdict.message += (
                        "; the kernel returned the same output for different inputs while the "
                        "reference changed (a cached or constant answer)"
                    )
                    break
            if fresh_input:
                self.flags[label].append("input_independent_output")
                verdict.message += (
                    f"; it was correct on the {fixed_count} fixed seeds but not on inputs drawn "
                    "for this evaluation alone (an answer that does not follow its input)"
                )
            verdict.message = f"{what}: {verdict.message}"
            raise
        worst = self._worst(label)
        for key in worst:
            worst[key] = max(worst[key], errors[key])
        seen.append((outs_ref_layout, refs))

    def _pass(self, rounds: int, min_seconds: float) -> None:
        """At least `rounds` rounds (and `min_seconds` of them), each on the live process set
        with the fewest samples: every contestant once per round, on the same fresh inputs,
        in a random order. Every round is kept, and no contestant's figures decide anything
        about the others': what went to other programs is taken out of each call alike
        (JailedRunner._timed), so a busy host costs precision, not fairness, and a kernel has
        no re-take to buy."""
        harness, job = self.harness, self.job
        assert self.clock is not None
        taken = 0
        started = time.monotonic()
        # Starting a set of processes costs a few hundred ms, and within-process noise shrinks
        # with rounds while between-process noise shrinks only with sets, so a cheap round is
        # repeated until the pass has paid for what it cost to start its sets.
        while (
            self.live
            and self.sets
            and taken < MAX_ROUNDS_PER_PASS
            and (taken < rounds or time.monotonic() - started < min_seconds)
        ):
            # The cap never leaves fewer rounds than an interval needs.
            if self.clock.expired() and self.rounds_done >= MIN_ROUNDS:
                return
            pset = min(self.sets, key=lambda s: (self.per_set.get(s.index, 0), s.index))
            sets = [
                as_arena_values(harness.inputs(secrets.randbits(31))) for _ in range(self.batch)
            ]
            # A fresh random order every round: a rotation would have each contestant follow
            # the same predecessor every time, and whatever one leaves behind (caches, clock
            # frequency) would land on the same rival every round.
            order = [REFERENCE, *self.live]
            self.shuffler.shuffle(order)
            timed: dict[str, tuple[int, list[list[Any]], list[list[str]]]] = {}
            failed = False
            for role in order:
                runner = pset.runners[role]
                if role == REFERENCE:
                    # The reference failing is the task's fault: it ends the evaluation.
                    timed[role] = self._reference(pset, sets)
                else:
                    try:
                        timed[role] = self._kernel(
                            pset, role, sets, f"in timed round {self.rounds_done + 1}"
                        )
                    except (Verdict, StageError) as exc:
                        self._fail(role, exc)
                        failed = True
                        break
                others = max(0.0, runner.last_foreign_ns - pset.own_share_ns * len(sets))
                self.foreign[role].append(others / max(runner.last_wall_ns, 1))
                self.accounted = self.accounted and runner.accounted
            if failed:
                continue
            _, refs, ref_names = timed[REFERENCE]
            for label in list(self.live):
                _, outs, out_names = timed[label]
                for j in range(len(sets)):
                    try:
                        compare_outputs(
                            harness.candidate_outputs(outs[j], refs[j]),
                            refs[j],
                            job["rtol"],
                            job["atol"],
                            out_names[j],
                            ref_names[j],
                            nonfinite=job.get("nonfinite", "match"),
                        )
                    except Verdict as verdict:
                        self.flags[label].append("timed_output_mismatch")
                        verdict.message = (
                            f"timed call {j} of round {self.rounds_done + 1} (fresh inputs): "
                            f"{verdict.message}; the kernel was correct in the correctness pass "
                            "but not while being timed"
                        )
                        self._fail(label, verdict)
                        failed = True
                        break
            if failed:
                continue
            for role in [REFERENCE, *self.live]:
                elapsed = timed[role][0]
                net = max(elapsed - int(pset.round_trip) * len(sets), len(sets))
                self.samples[role].append(net / len(sets))
                self.timed_ns[role] = self.timed_ns.get(role, 0) + elapsed
            self.block_of.append(pset.index)
            self.per_set[pset.index] = self.per_set.get(pset.index, 0) + 1
            self.timed_calls += len(sets)
            self.rounds_done += 1
            taken += 1
            # Past the pass's minimum, the rest of it only buys precision: none is needed once
            # the question is answered.
            if (taken >= rounds or self._every_set_has(LOOK_SET_ROUNDS)) and self._should_stop():
                return

    # -- statistics

    def _decisive(self, analysis: Any) -> list[Any]:
        """The speedup intervals the caller reads: the candidate's over the reference and each
        baseline (in a comparison, every pair)."""
        return [analysis.speedups[pair] for pair in self._pairs() if pair in analysis.speedups]

    def _every_set_has(self, rounds: int) -> bool:
        return all(self.per_set.get(pset.index, 0) >= rounds for pset in self.sets)

    def _should_stop(self) -> bool:
        """A look, when one is due (LOOK_GROWTH): is the question answered?"""
        if self.rounds_done < max(MIN_ROUNDS, self.next_look):
            return False
        self.next_look = math.ceil(self.rounds_done * LOOK_GROWTH)
        level = float(self.job.get("confidence", 0.95))
        usual = self._analyse(STOP_RESAMPLES)
        strict = self._analyse(STOP_RESAMPLES, confidence=1 - (1 - level) / LOOKS)
        self.answered = usual is not None and strict is not None and self._answered(usual, strict)
        return self.answered

    def _answered(self, analysis: Any, strict: Any = None) -> bool:
        """Whether sampling has answered what it was asked, for every speedup the caller reads:
        its interval is within ±target_ci, or it lies wholly on one side of every ratio in
        decide_at (say 1.0: "faster or slower?"; a run's thresholds: "does it clear 1.04x?").
        An interval that still straddles one of them needs more samples; the median
        latencies' own intervals (which differ between processes far more than a paired
        ratio does) are reported, not sampled down. Never before MIN_ROUNDS. `strict`: the same
        samples' intervals at the stricter level a threshold must be cleared at while sampling
        (LOOKS); the width target is judged at the usual level."""
        if self.rounds_done < MIN_ROUNDS:
            return False
        target = float(self.job.get("target_ci", 0.01))
        intervals = self._decisive(analysis)
        if not intervals:
            return bool(analysis.widest() <= target)
        clearing = self._decisive(strict) if strict is not None else intervals
        thresholds = [float(t) for t in self.job.get("decide_at") or []]
        for interval, cleared in zip(intervals, clearing, strict=True):
            if interval.relative_half_width <= target:
                continue
            if not thresholds or any(cleared.low <= t <= cleared.high for t in thresholds):
                return False
        return True

    def _pairs(self) -> list[tuple[str, str]]:
        if self.primary:
            if PRIMARY not in self.live:
                return []
            return [(PRIMARY, other) for other in [REFERENCE, *self.live] if other != PRIMARY]
        pairs = [(label, REFERENCE) for label in self.live]
        pairs += [(a, b) for a in self.live for b in self.live if a != b]
        return pairs

    def _analyse(self, resamples: int, confidence: float | None = None) -> Any:
        from accelopt_mcp.stats import analyse

        if not self.block_of:
            return None
        names = [REFERENCE, *self.live]
        self.analysis = analyse(
            {name: self.samples[name] for name in names},
            self.block_of,
            confidence=confidence or float(self.job.get("confidence", 0.95)),
            resamples=resamples,
            pairs=self._pairs(),
        )
        return self.analysis

    def _set_medians(self, name: str, sets: list[int]) -> list[float]:
        """The median of one contestant's samples in each process set, in `sets` order."""
        values = np.asarray(self.samples[name])
        blocks = np.asarray(self.block_of)
        return [float(np.median(values[blocks == k])) for k in sets]

    def _report(self, target: float) -> None:
        from accelopt_mcp.stats import drift

        result = self.result
        result["harness_overhead_ns"] = (
            int(statistics.median(self.round_trips)) if self.round_trips else 0
        )
        kernels: dict[str, Any] = {}
        for label in self.kernels:
            if label in self.outcomes:
                kernels[label] = self.outcomes[label]
            else:
                kernels[label] = {
                    "status": "PASSED",
                    "flags": self.flags[label],
                    "correctness": self.worst.get(label),
                }
        result["kernels"] = kernels
        if self.primary and PRIMARY in self.worst:
            result["correctness"] = self.worst[PRIMARY]
        analysis = self._analyse(RESAMPLES_FINAL) if self.live else None
        if analysis is None:
            return
        clock = self.clock
        steal = clock.steal_fraction() if clock is not None else 0.0
        # Each sample relative to its own process set's median: differences between processes
        # are not drift in time.
        sets = sorted(set(self.block_of))
        set_medians = {name: self._set_medians(name, sets) for name in [REFERENCE, *self.live]}
        reference = dict(zip(sets, set_medians[REFERENCE], strict=True))
        shift = drift(
            [v / reference[b] for v, b in zip(self.samples[REFERENCE], self.block_of, strict=True)]
        )
        rounds = len(self.block_of)
        decisive = self._decisive(analysis)
        widest = max(i.relative_half_width for i in decisive) if decisive else analysis.widest()
        medians = [s.median.relative_half_width for s in analysis.summaries.values()]
        shares = {name: self.foreign[name] for name in [REFERENCE, *self.live]}
        every = [v for values in shares.values() for v in values]
        foreign_share = float(np.mean(every)) if every else 0.0
        contended = foreign_share > CONTENDED_SHARE or steal > STEAL_LIMIT
        result["analysis"] = {
            "blocks": analysis.blocks,
            "rounds": rounds,
            "calls_per_sample": self.batch,
            "target_ci": target,
            "widest": widest,
            "widest_median": max(medians, default=math.inf),
            "target_met": widest <= target,
            "decide_at": [float(t) for t in self.job.get("decide_at") or []],
            "answered": self.answered,
            "time_capped": bool(clock and clock.capped),
            "summaries": {
                name: {
                    "median": s.median.estimate,
                    "low": s.median.low,
                    "high": s.median.high,
                    "q1": s.q1,
                    "q3": s.q3,
                    "min": s.minimum,
                    "max": s.maximum,
                    "mean": s.mean,
                    "stdev": s.stdev,
                    "samples": s.samples,
                }
                for name, s in analysis.summaries.items()
            },
            "block_medians": set_medians,
            "speedups": [
                {"kernel": a, "baseline": b, "estimate": i.estimate, "low": i.low, "high": i.high}
                for (a, b), i in analysis.speedups.items()
            ],
            "contention": {
                "steal_fraction": steal,
                "drift": shift,
                "contended": contended,
                "foreign_share": foreign_share,
                "foreign_share_by_contestant": {
                    name: float(np.median(values)) if values else 0.0
                    for name, values in shares.items()
                },
                "busy_rounds_by_contestant": {
                    name: sum(v > CONTENDED_SHARE for v in values)
                    for name, values in shares.items()
                },
                "accounted": self.accounted,
                "load_before": self.load_before,
                "load_after": load_average(),
            },
        }
        result["timed_calls"] = self.timed_calls
        result["timed_ns"] = self.timed_ns


RESAMPLES_FINAL = 2000

"""Results flagged untrusted through the whole loop: a scripted LLM over real HTTP, a real store,
and a stand-in backend whose verdicts are written in the kernel's source, so that a kernel
that is faster but flagged (above_peak, an unknown future flag) exists deterministically.

Checked: a flagged attempt is stored and kept in the checkpoint with its flags, but never
becomes the run's best, never enters the beam and never forms an experience pair; a flagged
initial kernel fails the run's start; evaluation logs are stored and returned redacted."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from accelopt_mcp.backends.base import Availability, Backend, BackendInfo, Baseline
from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.engine import beam as beam_module
from accelopt_mcp.engine.beam import BeamSearch, InitialKernelFailed
from accelopt_mcp.engine.runs import load_run, prepare_run
from accelopt_mcp.models import (
    BenchmarkConfig,
    Correctness,
    Environment,
    Evaluation,
    EvaluationStatus,
    Performance,
    Solution,
    SourceFile,
    Task,
)
from accelopt_mcp.store.base import KernelStore
from tests.engine import kernels
from tests.engine.conftest import ScriptedSettings, build_script, run_engine, text

SECRET_ENV = "ACCELOPT_FLAGGED_TEST_TOKEN"
SECRET = "tok-9f3b1c7d5e2a4b60"
DB_URL = "postgresql://kernel_user:hunter2-db-pw@db.internal/kernels"


def kernel(latency_ms: float | None, *flags: str, tag: str = "") -> str:
    """A kernel source carrying its verdict for the stand-in backend."""
    lines = [f"# {tag}"] if tag else []
    if latency_ms is None:
        lines.append("# status=RUNTIME_ERROR")
    else:
        lines.append(f"# latency_ms={latency_ms}")
    if flags:
        lines.append(f"# flags={','.join(flags)}")
    lines += ["def kernel(x):", "    return x", ""]
    return "\n".join(lines)


CHEAT = kernel(1.0, "above_peak", tag="cheat")
FUTURE = kernel(2.0, "some_future_flag", tag="future")
HONEST = kernel(5.0, "noisy_timing", tag="honest")
BROKEN = kernel(None, tag="broken")


class VerdictBackend(Backend):
    """Reads `# latency_ms=`, `# flags=` and `# status=` lines of the entry source (default: a
    10 ms pass). A failure's log leaks a secret, as a kernel printing its environment would."""

    info: ClassVar[BackendInfo] = backend_info("cpu")

    def __init__(self, **_: Any) -> None:
        pass

    def availability(self) -> Availability:
        return Availability(name="cpu", usable=True, hardware="verdict/test", reason="stand-in")

    def _evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig, baselines: Sequence[Baseline]
    ) -> Evaluation:
        source = solution.entry_source.content
        environment = Environment(hardware="verdict/test")
        leak = f"connecting to {DB_URL} with token {SECRET}"
        if re.search(r"^# status=RUNTIME_ERROR$", source, re.M):
            return Evaluation(
                status=EvaluationStatus.RUNTIME_ERROR,
                environment=environment,
                timestamp="2026-01-01T00:00:00Z",
                log=f"Traceback: boom\n{leak}",
            )
        found = re.search(r"^# latency_ms=([0-9.]+)$", source, re.M)
        latency = float(found.group(1)) if found else 10.0
        flags = re.search(r"^# flags=(.+)$", source, re.M)
        return Evaluation(
            status=EvaluationStatus.PASSED,
            environment=environment,
            timestamp="2026-01-01T00:00:00Z",
            log=f"correct; median {latency} ms\n{leak}",
            correctness=Correctness(),
            performance=Performance(
                latency_ms=latency, reference_latency_ms=20.0, speedup_factor=20.0 / latency
            ),
            flags=flags.group(1).split(",") if flags else [],
        )


@pytest.fixture
def verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(beam_module, "backend_class", lambda name: VerdictBackend)
    monkeypatch.setenv(SECRET_ENV, SECRET)


def _with_source(solution: Solution, source: str) -> Solution:
    sources = [
        SourceFile(path=s.path, content=source) if s.path == solution.entry_file else s
        for s in solution.sources
    ]
    return solution.model_copy(update={"sources": sources})


def test_a_flagged_faster_attempt_is_never_best_beam_or_pair(
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
    verdicts: None,
    tmp_path: Path,
) -> None:
    replies = [text(kernels.reply(s)) for s in (CHEAT, HONEST, FUTURE, BROKEN)]
    _, config = scripted_settings(
        build_script(faults=False, executor=replies),
        iterations=1,
        beam=4,
        plans=2,
        attempts=2,
        topk=4,
    )
    run_id, run = run_engine(store, silu_task, silu_baseline, config, tmp_path / "out")
    assert run.status == "completed", run.error
    _, _, checkpoint = load_run(store, run_id)

    slots = list(checkpoint.slots.values())
    assert len(slots) == 4
    by_tag = {}
    for slot in slots:
        assert slot.solution_id is not None
        stored = store.get_solution(slot.solution_id)
        assert stored is not None
        tag = stored.solution.entry_source.content.split("\n", 1)[0].lstrip("# ")
        by_tag[tag] = slot
    assert set(by_tag) == {"cheat", "future", "honest", "broken"}
    cheat, future, honest = by_tag["cheat"], by_tag["future"], by_tag["honest"]

    # Stored and kept with their flags, counted as passed, but untrusted.
    assert (cheat.status, cheat.flags, cheat.trusted) == ("PASSED", ["above_peak"], False)
    assert (future.flags, future.trusted) == (["some_future_flag"], False)
    assert (honest.flags, honest.trusted) == (["noisy_timing"], True)
    assert checkpoint.history[0].flagged == 2
    assert checkpoint.history[0].passed == 3
    for slot in (cheat, future):
        [profile] = store.list_profiles(solution_id=slot.solution_id)
        assert profile.evaluation.flags == slot.flags and not profile.trusted

    # The best is the fastest trusted kernel, not the faster flagged ones.
    assert run.best_solution_id == honest.solution_id
    assert run.best_latency_ms == pytest.approx(5.0)
    assert checkpoint.winning_kernel_path is not None
    assert "honest" in Path(checkpoint.winning_kernel_path).read_text()

    # The beam (width 4: room for all) holds the trusted ones only.
    beam = {entry.solution_id for entry in checkpoint.beam}
    assert honest.solution_id in beam
    assert not beam & {cheat.solution_id, future.solution_id}

    # No experience pair names a flagged kernel.
    items = store.recent_experiences(run_id=run_id, limit=100)
    named = {i.slow_solution_id for i in items} | {i.fast_solution_id for i in items}
    assert not named & {cheat.solution_id, future.solution_id}

    # The store's rankings agree: flagged ones only when asked for, with their flags.
    definition = silu_task.definition.name
    ranked = [r.solution.id for r in store.best_solutions(definition)]
    assert ranked[0] == honest.solution_id
    assert cheat.solution_id not in ranked and future.solution_id not in ranked
    everything = store.best_solutions(definition, include_flagged=True)
    assert [r.solution.id for r in everything[:2]] == [cheat.solution_id, future.solution_id]
    assert everything[0].profile.flags == ["above_peak"]

    # Logs were redacted before they were stored and copied into the attempt's error.
    broken = by_tag["broken"]
    assert broken.status == "RUNTIME_ERROR" and broken.error
    texts = [broken.error] + [p.evaluation.log for p in store.list_profiles(run_id=run_id)]
    assert len(texts) >= 5
    for logged in texts:
        assert SECRET not in logged and "hunter2-db-pw" not in logged
    assert "postgresql://***@db.internal/kernels" in broken.error


def test_a_flagged_initial_kernel_fails_the_start(
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
    verdicts: None,
) -> None:
    _, config = scripted_settings(build_script(faults=False), iterations=1)
    initial = _with_source(silu_baseline, kernel(3.0, "constant_output", "noisy_timing"))
    run_id = prepare_run(store, silu_task, initial, config)
    with pytest.raises(InitialKernelFailed, match=r"untrusted \(constant_output\)"):
        asyncio.run(BeamSearch(store, run_id).run())
    run, _, checkpoint = load_run(store, run_id)
    assert run.status == "failed"
    assert run.error and "constant_output" in run.error
    assert SECRET not in run.error and "hunter2-db-pw" not in run.error
    assert checkpoint.initial is None
    assert run.best_solution_id is None
    # Its profile is stored all the same, flagged.
    [profile] = store.list_profiles()
    assert profile.evaluation.flags == ["constant_output", "noisy_timing"]
    assert not profile.trusted

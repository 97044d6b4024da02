"""What the `accelopt` command prints, apart from running a search (tests/engine/test_cli_run.py
does that): user text shown verbatim, refusals before a run is stored, the outcome line and
exit code of each way a run ends, the live view and the plain event lines, --version, the plot,
the model configs shipped as package data."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from accelopt_mcp import __version__
from accelopt_mcp.cli import _register, app
from accelopt_mcp.cli.optimize import EventLines, LiveDisplay, event_line, outcome
from accelopt_mcp.cli.output import fail, say
from accelopt_mcp.engine.checkpoint import Checkpoint, IterationSummary
from accelopt_mcp.engine.events import Activity, EngineEvent, describe_activity
from accelopt_mcp.engine.report import REFERENCE_LABEL, best_latency_figure, reference_latency
from accelopt_mcp.engine.selection import AttemptRecord, BeamEntry
from accelopt_mcp.llm.config import (
    MODEL_ENV,
    find_model_config,
    load_role_configs,
    model_config_names,
    role_configs_from_dict,
    shipped_model_config,
)
from accelopt_mcp.store.base import RunRecord
from tests.cli_inprocess import run_accelopt

ROOT = Path(__file__).resolve().parents[1]
NKIBENCH = ROOT / "examples" / "cpu" / "nkibench"
TASK = NKIBENCH / "reference" / "silu_M512_N1024_numpy_0.py"
KERNEL = NKIBENCH / "kernels" / "silu_M512_N1024_0.py"
BIN = Path(sys.executable).parent

_register()
runner = CliRunner()


def one_line(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- user text verbatim


def test_fail_and_say_never_read_user_text_as_markup(capsys: pytest.CaptureFixture[str]) -> None:
    hint = "pip install 'accelopt-mcp[flashinfer]' on a host with a GPU"
    say("path /tmp/[/bold]/x and [red]not red[/red] ", ("styled", "bold"))
    with pytest.raises(typer.Exit) as stopped:
        fail(hint)
    assert stopped.value.exit_code == 2
    out, err = capsys.readouterr()
    assert out == "path /tmp/[/bold]/x and [red]not red[/red] styled\n"
    assert err == f"error: {hint}\n"


def test_a_path_with_markup_in_it_is_shown_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "[/bold]" / "[flashinfer]"
    folder.mkdir(parents=True)
    kernel = folder / "k.py"
    result = run_accelopt(
        "profile", str(kernel), "--task", str(TASK), "--no-store", env={"COLUMNS": "40"}
    )
    assert result.returncode == 2, result.stderr
    assert str(kernel) in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1  # not wrapped, under 40 columns too

    # A table title (the store's location) holding the same text.
    store = folder / "kernels.db"
    stats = runner.invoke(app, ["db", "stats", "--store", str(store)], terminal_width=400)
    assert stats.exit_code == 0, stats.output
    assert str(store) in stats.output


# --------------------------------------------------------------------------- db export


def test_db_export_never_overwrites_a_file_or_mixes_into_a_folder(tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "k.db")]
    a_file = tmp_path / "[bold]export[flashinfer].json"
    a_file.write_text("keep me")
    onto_file = runner.invoke(app, ["db", "export", str(a_file), *store])
    assert onto_file.exit_code == 2
    assert f"{a_file} exists and is not a folder; remove it" in one_line(onto_file.output)
    assert a_file.read_text() == "keep me"
    assert onto_file.exception is None or isinstance(onto_file.exception, SystemExit)

    fresh = tmp_path / "fresh"
    assert runner.invoke(app, ["db", "export", str(fresh), *store]).exit_code == 0
    fresh.mkdir(exist_ok=True)  # an empty folder is fine to export into
    assert runner.invoke(app, ["db", "export", str(fresh), *store]).exit_code == 0
    (fresh / "mine.txt").write_text("mine")
    again = runner.invoke(app, ["db", "export", str(fresh), *store])
    assert again.exit_code == 2
    assert "already holds files" in again.output and "--force" in again.output
    forced = runner.invoke(app, ["db", "export", str(fresh), "--force", *store])
    assert forced.exit_code == 0, forced.output
    assert (fresh / "mine.txt").read_text() == "mine"


# --------------------------------------------------------------------------- --version


@pytest.mark.parametrize("command", ["accelopt", "accelopt-mcp"])
def test_version(command: str) -> None:
    result = subprocess.run(
        [str(BIN / command), "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{command} {__version__}"


def test_the_package_version_is_the_one_in_pyproject() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__


# --------------------------------------------------------------------------- refusals


def _optimize(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "optimize", str(KERNEL), "--task", str(TASK), "--store", str(tmp_path / "k.db"), *extra,
    ]  # fmt: skip


def test_optimize_on_a_backend_this_host_lacks_is_one_line_and_no_run(tmp_path: Path) -> None:
    from accelopt_mcp.backends.registry import get_backend

    if get_backend("nki").availability().usable:
        pytest.skip("this host runs nki")
    result = runner.invoke(app, _optimize(tmp_path, "--backend", "nki", "--skip-llm-check"))
    assert result.exit_code == 2, result.output
    message = one_line(result.output)
    assert message.startswith("error: backend 'nki' cannot run here: neuronxcc")
    assert "`accelopt backends`" in message
    assert not (tmp_path / "k.db").exists()  # no run row, not even a database


def test_optimize_refuses_an_llm_endpoint_that_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "dead.json"
    models.write_text(
        json.dumps({"default": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "timeout_s": 5}})
    )
    result = runner.invoke(app, _optimize(tmp_path, "--config", str(models)))
    assert result.exit_code == 2, result.output
    message = one_line(result.output)
    assert "LLM check failed" in message and "'m'" in message and "127.0.0.1:9" in message
    assert "--skip-llm-check" in message
    assert "Traceback" not in result.output
    assert not (tmp_path / "k.db").exists()


def test_resume_checks_the_endpoint_before_touching_the_run(tmp_path: Path) -> None:
    from accelopt_mcp.engine.config import OptimizeConfig
    from accelopt_mcp.engine.runs import prepare_run
    from accelopt_mcp.store.sqlite import SqliteStore
    from accelopt_mcp.tasks.kernels import load_solution
    from accelopt_mcp.tasks.loader import load_task

    models = tmp_path / "dead.json"
    models.write_text(json.dumps({"default": {"base_url": "http://127.0.0.1:9/v1"}}))
    task = load_task(TASK)
    with SqliteStore(tmp_path / "k.db") as store:
        run_id = prepare_run(
            store, task, load_solution(KERNEL, task), OptimizeConfig(models_config=str(models))
        )
    result = runner.invoke(app, ["resume", run_id, "--store", str(tmp_path / "k.db")])
    assert result.exit_code == 2, result.output
    assert "LLM check failed" in one_line(result.output)
    with SqliteStore(tmp_path / "k.db") as store:
        run = store.get_run(run_id)
    assert run is not None and run.status == "pending" and not run.error

    unknown = runner.invoke(app, ["resume", "no-such-run", "--store", str(tmp_path / "k.db")])
    assert unknown.exit_code == 2
    assert "no run with id 'no-such-run'" in one_line(unknown.output)


def test_skip_llm_check_still_refuses_an_unset_key_before_a_run_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--skip-llm-check skips the call to the endpoint, not what needs no network: without
    the key the run could never call, so it stops with exit 2 and leaves no run row."""
    from accelopt_mcp.store.sqlite import SqliteStore

    models = tmp_path / "remote.json"
    models.write_text(
        json.dumps({"default": {"base_url": "https://llm.example.test/v1", "api_key_env": "K"}})
    )
    monkeypatch.delenv("K", raising=False)
    db = tmp_path / "k.db"
    args = ["optimize", str(KERNEL), "--task", str(TASK), "--store", str(db)]
    result = runner.invoke(app, [*args, "--config", str(models), "--skip-llm-check"])
    assert result.exit_code == 2, result.output
    assert "the environment variable K is not set" in one_line(result.output)
    with SqliteStore(db) as store:
        assert store.list_runs() == []


# --------------------------------------------------------------------------- the outcome line


def _attempt(n: int, status: str, latency_ms: float | None = None) -> AttemptRecord:
    return AttemptRecord(
        iteration=1,
        beam_index=0,
        plan_index=n,
        attempt_index=0,
        parent_id="initial-id",
        parent_latency_ms=0.62,
        status=status,
        latency_ms=latency_ms,
    )


def _ended(
    status: str, attempts: list[AttemptRecord], **run: object
) -> tuple[RunRecord, Checkpoint]:
    initial = BeamEntry(
        solution_id="initial-id", latency_ms=0.62, source_hash="h", branch="initial"
    )
    checkpoint = Checkpoint(initial=initial, slots={a.key: a for a in attempts})
    fields: dict[str, object] = {"best_solution_id": "initial-id", "best_latency_ms": 0.62, **run}
    return RunRecord.model_validate(
        {"id": "r1", "definition_name": "d", "status": status, **fields}
    ), checkpoint


def test_outcome_of_a_run_that_found_a_faster_kernel() -> None:
    run, checkpoint = _ended(
        "completed", [_attempt(0, "PASSED", 0.41)], best_solution_id="s2", best_latency_ms=0.41
    )
    assert outcome(run, checkpoint) == (
        "run r1: completed, best 0.41 ms (1.51x over the initial kernel)",
        0,
    )


def test_outcome_of_a_run_in_which_nothing_passed() -> None:
    attempts = [_attempt(n, "RUNTIME_ERROR") for n in range(3)] + [_attempt(3, "LLM_FAILED")]
    line, code = outcome(*_ended("completed", attempts))
    assert code == 0
    assert line == (
        "run r1: completed, but no attempt passed: the initial kernel (0.62 ms) is still the "
        "best (3 kernels failed: 3 RUNTIME_ERROR; 1 attempt got no kernel from the LLM: "
        "1 LLM_FAILED)"
    )


def test_outcome_of_a_run_whose_planner_call_failed_counts_no_kernels() -> None:
    # One failed planner call leaves all six attempts of its plans without a kernel: they are
    # not six failed LLM calls (the ledger holds that one call's requests).
    attempts = [_attempt(n, "LLM_FAILED") for n in range(6)]
    line, _ = outcome(*_ended("completed", attempts))
    assert "(6 attempts got no kernel from the LLM: 6 LLM_FAILED)" in line
    assert "failed: 6" not in line


def test_outcome_of_a_run_in_which_nothing_was_faster() -> None:
    attempts = [_attempt(0, "PASSED", 0.7), _attempt(1, "NO_CODE")]
    line, code = outcome(*_ended("completed", attempts))
    assert (line, code) == (
        "run r1: completed, but no attempt beat the initial kernel (0.62 ms): 1 passed; "
        "1 attempt got no kernel from the LLM: 1 NO_CODE",
        0,
    )


def test_outcome_exit_codes_of_runs_that_stopped() -> None:
    unavailable = _ended("llm_unavailable", [], error="5 LLM calls in a row failed")
    line, code = outcome(*unavailable)
    assert code == 3
    assert line.startswith("run r1: llm_unavailable: 5 LLM calls in a row failed;")
    assert "`accelopt resume r1`" in line

    line, code = outcome(*_ended("failed", [], error="RuntimeError: boom"))
    assert (line, code) == ("run r1: failed: RuntimeError: boom", 1)
    # A run the engine could not even record as failed still says so.
    line, code = outcome(*_ended("running", []), crash="OSError: disk full")
    assert (line, code) == ("run r1: failed: OSError: disk full", 1)

    line, code = outcome(*_ended("budget_exhausted", [], error="USD budget of $0.01 reached"))
    assert code == 0 and line.startswith("run r1: budget_exhausted: USD budget of $0.01 reached;")
    line, code = outcome(*_ended("cancelled", [], error="cancelled on request"))
    assert code == 0 and line.startswith("run r1: cancelled;")


# --------------------------------------------------------------------------- progress


def _event(**fields: object) -> EngineEvent:
    base: dict[str, object] = {
        "run_id": "r1",
        "kind": "attempt_profiled",
        "iteration": 1,
        "iterations_total": 3,
        "message": "attempt 1/0/0/0: PASSED 0.41 ms at /a/[/bold]/path",
        "best_latency_ms": 0.41,
        "initial_latency_ms": 0.62,
        "attempts_done": 4,
        "attempts_passed": 3,
        "attempts_failed": 1,
        "cost_usd": 0.0123,
        "tokens_in": 1000,
        "tokens_out": 234,
        "at": 1_700_000_000.0,
    }
    return EngineEvent.model_validate({**base, **fields})


def test_activity_reads_as_what_the_run_waits_on() -> None:
    assert (
        describe_activity({"planner": 3, "executor": 1, "summarizer": 0}, 2)
        == "waiting on planner (3 calls), executor (1 call); profiling 2 attempts"
    )
    assert describe_activity({}, 1) == "profiling 1 attempt"
    assert describe_activity({}, 0) == "idle"
    # With the pool's size: how many of its devices are in use.
    assert describe_activity({}, 3, devices=8) == "profiling 3 attempts on 3/8 devices"
    assert describe_activity({}, 9, devices=8) == "profiling 9 attempts on 8/8 devices"
    assert Activity(profiling=1, devices=2).describe() == "profiling 1 attempt on 1/2 devices"


def test_live_view_refreshes_what_it_waits_on_between_events() -> None:
    from rich.console import Console

    display = LiveDisplay("r1")
    now = {"activity": Activity(llm_waiting={"planner": 3}, profiling=0)}
    display.watch_activity(lambda: now["activity"])

    def shown() -> str:
        console = Console(file=io.StringIO(), width=200)
        console.print(display.render())
        assert isinstance(console.file, io.StringIO)
        return console.file.getvalue()

    assert "starting" in shown() and "waiting on planner (3 calls)" in shown()
    display(_event(llm_waiting={"planner": 3}))
    assert "waiting on planner (3 calls)" in shown() and "/a/[/bold]/path" in shown()
    now["activity"] = Activity(llm_waiting={"executor": 5}, profiling=2)  # no event since
    text = shown()
    assert "waiting on executor (5 calls); profiling 2 attempts" in text
    assert "0.41 ms (1.51x vs initial)" in text and "4 done, 3 passed, 1 failed" in text


def test_event_lines_are_one_timestamped_line_each() -> None:
    stream = io.StringIO()
    lines = EventLines(stream)
    lines(_event(llm_waiting={"executor": 2}, profiling=1))
    lines(_event(kind="run_finished", message="run completed"))
    first, second = stream.getvalue().splitlines()
    stamp, rest = first.split(" ", 1)
    assert stamp.startswith("2023-11-1") and len(stamp) == len("2023-11-14T22:13:20")
    assert rest == (
        "attempt_profiled: attempt 1/0/0/0: PASSED 0.41 ms at /a/[/bold]/path | iteration 1/3, "
        "4 attempts (3 passed, 1 failed), best 0.41 ms (1.51x vs initial), "
        "LLM $0.0123 (1234 tokens) | "
        "waiting on executor (2 calls); profiling 1 attempt"
    )
    assert second.split(" ", 1)[1] == (
        "run_finished: run completed | " + event_line(_event()).split(" | ")[1] + " | idle"
    )


# --------------------------------------------------------------------------- the plot


def test_plot_is_on_a_log_axis_with_every_point_labelled() -> None:
    import matplotlib.pyplot as plt

    history = [
        IterationSummary(
            iteration=i, best_latency_ms=ms, attempts=4, passed=2, failed=2, experiences_added=1
        )
        for i, ms in [(1, 1.2), (2, None), (3, 0.4)]
    ]
    figure = best_latency_figure(history, 10.8, "softmax")
    try:
        (axes,) = figure.axes
        assert axes.get_yscale() == "log"
        labels = [text.get_text() for text in axes.texts]
        assert labels == ["10.8 ms", "1.2 ms\n9.00x", "0.4 ms\n27.00x"]
        low, high = axes.get_ylim()
        assert low < 0.4 and high > 10.8
    finally:
        plt.close(figure)


def test_the_plot_draws_the_reference_line() -> None:
    import matplotlib.pyplot as plt

    history = [
        IterationSummary(
            iteration=1, best_latency_ms=0.4, attempts=1, passed=1, failed=0, experiences_added=0
        )
    ]
    # The initial kernel is 3x slower than the reference: the line sits below its point.
    reference = reference_latency(1.2, 1 / 3)
    assert reference == pytest.approx(0.4)
    figure = best_latency_figure(history, 1.2, "softmax", reference_latency(1.2, 1 / 3))
    try:
        (axes,) = figure.axes
        [line] = [a for a in axes.get_lines() if a.get_label().startswith(REFERENCE_LABEL)]
        assert line.get_label() == "reference (0.4 ms)"
        assert list(line.get_ydata()) == pytest.approx([0.4, 0.4])
        legend = axes.get_legend()
        assert legend is not None and [t.get_text() for t in legend.get_texts()] == [
            "reference (0.4 ms)"
        ]
        low, high = axes.get_ylim()
        assert low < 0.4 < high
    finally:
        plt.close(figure)
    # Without a reference figure, no line and no legend.
    figure = best_latency_figure(history, 1.2, "softmax", reference_latency(1.2, None))
    try:
        (axes,) = figure.axes
        assert not [a for a in axes.get_lines() if a.get_label().startswith(REFERENCE_LABEL)]
        assert axes.get_legend() is None
    finally:
        plt.close(figure)


@pytest.mark.parametrize(
    ("initial", "latencies"),
    [(1.3, [1.2, 0.9, 0.7]), (1.0, [0.6, 0.3, 0.15]), (10.8, [1.2, 0.4]), (80.0, [2.0, 0.5])],
)
def test_the_plots_tick_labels_never_overlap(initial: float, latencies: list[float]) -> None:
    """Drawn as the PNG is: every y tick label that shows text has room of its own (over a
    narrow-to-middle range the in-between ticks were all labelled and ran into each other)."""
    import matplotlib.pyplot as plt

    history = [
        IterationSummary(
            iteration=i + 1, best_latency_ms=ms, attempts=1, passed=1, failed=0, experiences_added=0
        )
        for i, ms in enumerate(latencies)
    ]
    figure = best_latency_figure(history, initial, "softmax")
    try:
        figure.canvas.draw()
        (axes,) = figure.axes
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        low, high = axes.get_ylim()
        ticks = [
            tick
            for tick in axes.yaxis.get_major_ticks() + axes.yaxis.get_minor_ticks()
            if tick.label1.get_text() and low <= tick.get_loc() <= high
        ]
        boxes = sorted((t.label1.get_window_extent(renderer) for t in ticks), key=lambda b: b.y0)
        assert len(boxes) >= 2
        for below, above in itertools.pairwise(boxes):
            assert below.y1 <= above.y0 + 0.5, [t.label1.get_text() for t in ticks]
    finally:
        plt.close(figure)


# --------------------------------------------------------------------------- model configs


def test_model_configs_ship_as_package_data(tmp_path: Path) -> None:
    assert model_config_names() == ["llamacpp", "openai", "vllm-gpt-oss-120b"]
    for name in model_config_names():
        path = shipped_model_config(name)
        assert path is not None and path.parent.name == "model_configs"
        assert find_model_config(name) == path
        load_role_configs(path)
    assert shipped_model_config("../openai") is None

    # What a wheel holds: setuptools' build_py copies exactly the files package data names.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    os.symlink(ROOT / "accelopt_mcp", source / "accelopt_mcp")
    built = tmp_path / "built"
    done = subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
         "--build-lib", str(built)],
        cwd=source, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shipped = built / "accelopt_mcp" / "llm" / "model_configs"
    assert sorted(p.stem for p in shipped.glob("*.json")) == model_config_names()
    for name in model_config_names():
        path = shipped_model_config(name)
        assert path is not None and (shipped / path.name).read_bytes() == path.read_bytes()


def test_accelopt_model_names_the_model_of_roles_whose_config_names_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(MODEL_ENV, raising=False)
    assert load_role_configs().planner.model == "gpt-4.1-mini"
    monkeypatch.setenv(MODEL_ENV, "qwen3-coder")
    configs = role_configs_from_dict({"summarizer": {"model": "small"}})
    assert [configs.for_role(r).model for r in ("planner", "executor", "summarizer")] == [
        "qwen3-coder",
        "qwen3-coder",
        "small",
    ]
    llamacpp = shipped_model_config("llamacpp")
    assert llamacpp is not None and load_role_configs(llamacpp).executor.model == "local"

"""`accelopt runs` and `accelopt memory` on a real run."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from accelopt_mcp.cli import _register, app
from accelopt_mcp.engine.config import resolve_optimize_config
from accelopt_mcp.engine.presets import PRESETS
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.sqlite import SqliteStore
from tests.engine.conftest import REPO, ScriptedSettings, build_script, run_engine

_register()
runner = CliRunner()


def test_runs_and_memory_commands(
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
    tmp_path: Path,
) -> None:
    _, config = scripted_settings(build_script(faults=False))
    db_path = tmp_path / "kernels.db"
    with SqliteStore(db_path) as store:
        run_id, run = run_engine(store, silu_task, silu_baseline, config)
    db = ["--store", str(db_path)]

    listed = runner.invoke(app, ["runs", "list", *db, "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert row["id"] == run_id and row["state"] == "completed"
    assert row["best_latency_ms"] == run.best_latency_ms

    shown = runner.invoke(app, ["runs", "show", run_id, *db, "--json"])
    trace = json.loads(shown.output)
    assert len(trace["checkpoint"]["slots"]) == sum(
        h["attempts"] for h in trace["checkpoint"]["history"]
    )
    text = runner.invoke(app, ["runs", "show", run_id, *db], terminal_width=200).output
    assert "iteration 1" in text and "iteration 2" in text and "PASSED" in text
    missing = runner.invoke(app, ["runs", "show", "nope", *db])
    assert missing.exit_code != 0 and "no run with id 'nope'" in missing.output

    added = runner.invoke(
        app,
        [
            "memory", "add", *db, "--definition", silu_task.definition.name,
            "--title", "hand-written trick", "--strategy", "use out= buffers",
            "--namespace", "cpu",
        ],
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    item_id = added.output.split()[-1]
    items = json.loads(runner.invoke(app, ["memory", "list", *db, "--json"]).output)
    assert items[-1]["id"] == item_id and items[-1]["title"] == "hand-written trick"
    # The words of `memory search`, quoted as one argument or not, find the same item.
    for words in (["buffers trick"], ["buffers", "trick"]):
        found = runner.invoke(app, ["memory", "search", *words, *db, "--json"])
        assert found.exit_code == 0, found.output
        assert [i["id"] for i in json.loads(found.output)] == [item_id], words
    assert runner.invoke(app, ["memory", "remove", item_id, *db]).exit_code == 0
    items = json.loads(runner.invoke(app, ["memory", "list", *db, "--json"]).output)
    assert item_id not in [i["id"] for i in items]
    assert runner.invoke(app, ["memory", "remove", item_id + "x", *db]).exit_code != 0


def test_preset_templates_match_the_builtin_presets() -> None:
    for name, values in PRESETS.items():
        shipped = json.loads((REPO / "templates" / "presets" / f"{name}.json").read_text())
        assert shipped == values


def _optimize_silu(tmp_path: Path, *options: str) -> Result:
    """`accelopt optimize` of the example silu kernel, with `options`, storing in tmp_path."""
    return runner.invoke(
        app,
        [
            "optimize", str(REPO / "examples/cpu/nkibench/kernels/silu_M512_N1024_0.py"),
            "--task", str(REPO / "examples/cpu/nkibench/reference/silu_M512_N1024_numpy_0.py"),
            *options, "--store", str(tmp_path / "k.db"),
        ],
    )  # fmt: skip


def test_optimize_refuses_bad_settings(tmp_path: Path) -> None:
    result = _optimize_silu(tmp_path, "--negative-threshold", "1.5")
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    assert "negative_threshold <= 1 <= positive_threshold" in message
    assert "errors.pydantic.dev" not in message


def test_optimize_takes_a_model_config_by_name_as_mcp_does(tmp_path: Path) -> None:
    # One resolver for CLI and MCP: a shipped config's name works in both.
    assert resolve_optimize_config(None, {"models_config": "llamacpp"}).models_config == str(
        REPO / "accelopt_mcp" / "llm" / "model_configs" / "llamacpp.json"
    )
    result = _optimize_silu(tmp_path, "--config", "no-such-config")
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "model config 'no-such-config' is neither a file nor a shipped config name" in message
    assert "llamacpp" in message and "openai" in message
    assert not (tmp_path / "k.db").exists()  # refused before any run was stored

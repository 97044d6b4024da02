"""A preset's memory seeding is turned off (and on) from the CLI, and left as the preset says
when not given: `accelopt optimize` run through click, its stored run's settings read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt_mcp.cli import _register, app
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.store.sqlite import SqliteStore
from tests.engine.conftest import TASK_PATH

_register()


@pytest.mark.parametrize(
    ("preset_seeds", "flags", "expected"),
    [(True, ["--no-seed-memory"], False), (False, ["--seed-memory"], True), (True, [], True)],
)
def test_seeding_from_the_cli(
    preset_seeds: bool,
    flags: list[str],
    expected: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --skip-llm-check skips the endpoint call, not the key: one is set, never used.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-sent")
    preset = tmp_path / "preset.json"
    preset.write_text(json.dumps({"iterations": 1, "seed_from_namespace": preset_seeds}))
    kernel = tmp_path / "broken.py"
    kernel.write_text("def kernel(:\n")  # the run is stored, then stops on its first kernel
    db = tmp_path / "kernels.db"
    CliRunner().invoke(
        app,
        ["optimize", str(kernel), "--task", str(TASK_PATH), "--preset", str(preset),
         "--store", str(db), "--skip-llm-check", "--quiet", *flags],
    )  # fmt: skip
    with SqliteStore(db) as store:
        (run,) = store.list_runs()
        _, spec, _ = load_run(store, run.id)
    assert spec.optimize.seed_from_namespace is expected

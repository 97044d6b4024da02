"""A task module's description is learned once per process: the same source is not run in
its jail again (tasks/probe.py `DESCRIPTIONS`), while a changed or failing one is."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.nkibench import definition_from_task
from accelopt_mcp.tasks.probe import DESCRIPTIONS, probe_nkibench_task

TASK = (
    "import numpy as np\n\nM = 8\nN = 4\n\n"
    "def get_inputs():\n    return [np.random.rand(M, N).astype(np.float32)]\n\n"
    "def forward(x):\n    return x * 2\n"
)


def test_the_same_source_is_probed_once_whatever_its_file(tmp_path: Path) -> None:
    first, second = tmp_path / "double_M8_N4_numpy_0.py", tmp_path / "twice_M8_N4_numpy_0.py"
    first.write_text(TASK)
    second.write_text(TASK)
    before = DESCRIPTIONS.probes_run
    one = definition_from_task(first)
    assert DESCRIPTIONS.probes_run == before + 1
    two = definition_from_task(second)
    assert DESCRIPTIONS.probes_run == before + 1  # answered from the cache
    assert two.name == "twice_M8_N4" and one.name == "double_M8_N4"
    assert two.inputs == one.inputs and two.outputs == one.outputs

    # One character more is another module: it runs in its jail like any new one.
    first.write_text(TASK.replace("x * 2", "x * 3"))
    definition_from_task(first)
    assert DESCRIPTIONS.probes_run == before + 2


def test_a_failing_probe_is_not_kept(tmp_path: Path) -> None:
    crashing = tmp_path / "crash_M8_numpy_0.py"
    crashing.write_text(
        "def get_inputs():\n    raise RuntimeError('no data yet')\n\n"
        "def forward(x):\n    return x\n"
    )
    before = DESCRIPTIONS.probes_run
    for _ in range(2):
        with pytest.raises(TaskFileError, match="no data yet"):
            definition_from_task(crashing)
    assert DESCRIPTIONS.probes_run == before + 2


def test_what_a_caller_changes_does_not_reach_the_next_caller() -> None:
    source = TASK.replace("M = 8", "M = 6")
    found = probe_nkibench_task(source)
    assert found["inputs"][0]["shape"] == [6, 4]
    found["inputs"][0]["shape"][0] = 1_000
    found["outputs"].clear()
    again = probe_nkibench_task(source)
    assert again["inputs"][0]["shape"] == [6, 4] and len(again["outputs"]) == 1

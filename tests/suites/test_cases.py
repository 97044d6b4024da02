"""What a suite runs: the cases of an NKIBench directory or a FlashInfer-Trace set, and the
paths a hostile summary.json tries to reach outside its folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accelopt_mcp.suites.cases import discover_cases
from accelopt_mcp.tasks.flashinfer_format import TaskFileError

REPO = Path(__file__).resolve().parents[2]
NKIBENCH = REPO / "examples/cpu/nkibench"
TRACESET = REPO / "examples/cpu/flashinfer"


def test_an_nkibench_directory_gives_one_case_per_impl_with_a_kernel() -> None:
    cases = discover_cases(NKIBENCH)
    summary = json.loads((NKIBENCH / "summary.json").read_text())
    assert [c.key for c in cases] == [f"{name}/0" for name in summary]
    for case in cases:
        assert Path(case.task_path).is_file() and Path(case.kernel_path).is_file()
        assert Path(case.task_path).is_relative_to(NKIBENCH.resolve())


def test_a_trace_set_gives_one_case_per_definition_with_a_solution() -> None:
    cases = discover_cases(TRACESET)
    assert cases
    for case in cases:
        definition = json.loads(Path(case.task_path).read_text())
        solution = json.loads(Path(case.kernel_path).read_text())
        assert definition["name"] == case.key == solution["definition"]


@pytest.mark.parametrize(
    "task",
    ["../outside/task.py", "/etc/hostname", "./reference/link.py"],
    ids=["dotdot", "absolute", "symlink-out"],
)
def test_a_summary_cannot_point_outside_its_folder(tmp_path: Path, task: str) -> None:
    root = tmp_path / "suite"
    shutil.copytree(NKIBENCH, root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "task.py").write_text(
        (NKIBENCH / "reference/silu_M512_N1024_numpy_0.py").read_text()
    )
    (root / "reference/link.py").symlink_to(outside / "task.py")
    summary = {
        "silu": {
            "cases": {
                "0": {
                    "values": {},
                    "impls": [{"task": task, "kernel": "./kernels/silu_M512_N1024_0.py"}],
                }
            }
        }
    }
    (root / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(TaskFileError, match="outside the suite folder"):
        discover_cases(root)


def test_a_folder_without_cases_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({}))
    with pytest.raises(TaskFileError, match="holds no case"):
        discover_cases(tmp_path)
    with pytest.raises(TaskFileError, match="is not a directory"):
        discover_cases(tmp_path / "summary.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskFileError, match="neither"):
        discover_cases(empty)

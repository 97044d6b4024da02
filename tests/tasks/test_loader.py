from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accelopt_mcp.models import Language
from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

ROOT = Path(__file__).resolve().parents[2] / "examples" / "cpu"
FI = ROOT / "flashinfer"
NK = ROOT / "nkibench"


def test_definition_json_gets_its_trace_set_workloads() -> None:
    task = load_task(FI / "definitions" / "rmsnorm_n1024.json")
    assert task.definition.name == "rmsnorm_n1024"
    assert task.workload.axes == {"M": 256}
    second = load_task(FI / "definitions" / "rmsnorm_n1024.json", workload="1")
    assert second.workload.axes == {"M": 64}
    by_uuid = load_task(FI / "definitions" / "rmsnorm_n1024.json", workload=second.workload.uuid)
    assert by_uuid.workload == second.workload
    with pytest.raises(TaskFileError, match="no workload 'nope'"):
        load_task(FI / "definitions" / "rmsnorm_n1024.json", workload="nope")


def test_var_axes_without_workloads_is_explained(tmp_path: Path) -> None:
    shutil.copy(FI / "definitions" / "softmax_n1024.json", tmp_path / "softmax.json")
    with pytest.raises(TaskFileError, match="variable axes"):
        load_task(tmp_path / "softmax.json")


def test_nkibench_task_file_and_directory(tmp_path: Path) -> None:
    task = load_task(NK / "reference" / "softmax_M256_N1024_numpy_0.py")
    assert task.definition.name == "softmax_M256_N1024"
    assert task.workload.axes == {}
    shutil.copy(NK / "reference" / "softmax_M256_N1024_numpy_0.py", tmp_path)
    assert load_task(tmp_path).definition.name == "softmax_M256_N1024"


def test_directory_must_be_unambiguous(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="holds 5 definitions"):
        load_task(FI)
    with pytest.raises(TaskFileError, match="exactly one"):
        load_task(tmp_path)
    with pytest.raises(TaskFileError, match="this is an NKIBench directory"):
        load_task(NK)
    with pytest.raises(TaskFileError, match="does not exist"):
        load_task(tmp_path / "nothing.json")


def test_kernel_files_become_solutions(tmp_path: Path) -> None:
    task = load_task(NK / "reference" / "silu_M512_N1024_numpy_0.py")
    solution = load_solution(NK / "kernels" / "silu_M512_N1024_fast.py", task)
    assert solution.spec.language == Language.PYTHON
    assert solution.spec.entry_point == "silu_M512_N1024_fast.py::kernel"
    assert solution.spec.destination_passing_style is False
    assert solution.definition == task.definition.name
    assert solution.name == "silu_M512_N1024_fast"

    optimized = tmp_path / "opt.py"
    optimized.write_text("def run(x):\n    return x\n\ndef optimized_kernel(x):\n    return x\n")
    assert load_solution(optimized, task).entry_symbol == "optimized_kernel"
    nki = tmp_path / "nki_kernel.py"
    nki.write_text("import neuronxcc.nki as nki\n\n@nki.jit\ndef kernel(x):\n    return x\n")
    assert load_solution(nki, task, author="me").spec.language == Language.NKI
    nothing = tmp_path / "nothing.py"
    nothing.write_text("def helper(x):\n    return x\n")
    with pytest.raises(TaskFileError, match="defines none of the entry functions"):
        load_solution(nothing, task)
    with pytest.raises(TaskFileError, match="does not exist"):
        load_solution(tmp_path / "missing.py", task)


def test_solution_json_must_match_the_task(tmp_path: Path) -> None:
    task = load_task(FI / "definitions" / "silu_n1024.json")
    path = FI / "solutions" / "silu_n1024" / "silu_n1024_fast.json"
    assert load_solution(path, task, name="renamed").name == "renamed"
    data = json.loads(path.read_text())
    data["definition"] = "other"
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(data))
    with pytest.raises(TaskFileError, match="is for definition 'other'"):
        load_solution(wrong, task)

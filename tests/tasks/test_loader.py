from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accelopt_mcp.models import Language
from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.kernels import (
    SOURCE_ORIGIN,
    default_kernel_name,
    is_placeholder_name,
    kernel_solution,
    load_solution,
    syntax_problem,
)
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


def test_a_kernel_that_is_not_python_still_becomes_a_solution(tmp_path: Path) -> None:
    """Profiling reports it (COMPILE_ERROR, at its line); loading does not refuse it."""
    task = load_task(FI / "definitions" / "silu_n1024.json")
    broken = "import neuronxcc.nki as nki\n\ndef helper(x):\n    pass\n\ndef run(x):\n  return (x\n"
    solution = kernel_solution(task, kernel_source=broken)
    assert solution.spec.entry_point == "kernel.py::run"
    assert solution.spec.language == Language.NKI
    assert syntax_problem(solution, SOURCE_ORIGIN) == (
        "kernel_source line 7: '(' was never closed\n    return (x\n           ^"
    )
    path = tmp_path / "mine.py"
    path.write_text("def kernel(x):\n    return x +\n")
    from_file = load_solution(path, task)
    assert from_file.spec.entry_point == "mine.py::kernel"
    problem = syntax_problem(from_file, str(path))
    assert problem is not None and problem.startswith(f"{path} line 2: invalid syntax")
    assert (syntax_problem(from_file) or "").startswith("mine.py line 2")
    assert syntax_problem(load_solution(NK / "kernels" / "silu_M512_N1024_fast.py", task)) is None


def test_pasted_kernels_are_named_by_their_source() -> None:
    task = load_task(FI / "definitions" / "silu_n1024.json")
    one = kernel_solution(task, kernel_source="def run(x):\n    return x\n")
    two = kernel_solution(task, kernel_source="def run(x):\n    return x * 1\n")
    assert one.name.startswith("silu_n1024-") and len(one.name) == len("silu_n1024-") + 8
    assert one.name != two.name
    assert one.name == default_kernel_name("silu_n1024", "def run(x):\n    return x\n")
    assert is_placeholder_name(one)
    assert is_placeholder_name(one.model_copy(update={"name": "silu_n1024_user"}))
    assert not is_placeholder_name(one.model_copy(update={"name": "vectorized"}))
    assert not is_placeholder_name(one.model_copy(update={"name": two.name}))
    named = kernel_solution(task, kernel_source="def run(x):\n    return x\n", name="mine")
    assert named.name == "mine" and not is_placeholder_name(named)

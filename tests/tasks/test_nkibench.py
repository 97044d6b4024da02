from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accelopt_mcp.models import Language, Roofline, Task
from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.nkibench import (
    FORMAT_TAG,
    default_workload,
    definition_from_task,
    import_nkibench_dir,
    problem_of,
    read_summary,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cpu" / "nkibench"


def test_task_module_becomes_a_definition() -> None:
    definition = definition_from_task(EXAMPLES / "reference" / "rmsnorm_M256_N1024_numpy_0.py")
    assert definition.name == "rmsnorm_M256_N1024"
    assert definition.op_type == "rmsnorm"
    assert definition.const_axes == {"M": 256, "N": 1024}
    assert list(definition.inputs) == ["x", "g"]  # forward's parameter names
    assert definition.inputs["x"].shape == ["M", "N"]
    assert definition.inputs["g"].shape == ["N"]
    assert definition.outputs["out"].shape == ["M", "N"]
    assert definition.outputs["out"].dtype == "float32"
    assert FORMAT_TAG in definition.tags
    assert "def run(*inputs)" in definition.reference


def test_scalar_inputs_and_unmatched_sizes(tmp_path: Path) -> None:
    task = tmp_path / "scaled_M8_numpy_0.py"
    task.write_text(
        "import numpy as np\n\nM = 8\n\n"
        "def get_inputs():\n    return [np.random.rand(M, 3).astype(np.float32), 0.5]\n\n"
        "def forward(x, eps):\n    return x * eps\n"
    )
    definition = definition_from_task(task)
    assert definition.name == "scaled_M8"
    assert definition.inputs["eps"].shape is None
    assert definition.inputs["x"].shape == ["M", "x_dim1"]
    assert definition.const_axes["x_dim1"] == 3


def test_workload_uuid_is_deterministic() -> None:
    path = EXAMPLES / "reference" / "silu_M512_N1024_numpy_0.py"
    first, second = definition_from_task(path), definition_from_task(path)
    assert default_workload(first).uuid == default_workload(second).uuid
    assert set(default_workload(first).inputs) == {"x"}


def test_directory_import_gives_definitions_workloads_and_baselines() -> None:
    entries = import_nkibench_dir(EXAMPLES)
    names = sorted(e.definition.name for e in entries)
    assert names == [
        "layernorm_M256_N1024",
        "matmul_bias_M128_K256_N256",
        "rmsnorm_M256_N1024",
        "silu_M512_N1024",
        "softmax_M256_N1024",
    ]
    for entry in entries:
        assert entry.solution is not None
        assert entry.solution.definition == entry.definition.name
        assert entry.solution.spec.language == Language.PYTHON
        assert entry.solution.entry_symbol == "kernel"


def test_problem_name_is_the_prefix_before_the_axes() -> None:
    assert problem_of("matmul_add_rmsnorm_M4096_N2048_K2048") == "matmul_add_rmsnorm"
    assert problem_of("silu") == "silu"


def test_bad_directories_and_modules_are_explained(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match=r"summary\.json.*does not exist"):
        read_summary(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"p": {"cases": {"0": {"values": {}}}}}))
    with pytest.raises(TaskFileError, match="no `impls` list"):
        read_summary(tmp_path)
    summary = {"p": {"cases": {"0": {"values": {}, "impls": [{"task": "./gone.py"}]}}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(TaskFileError, match=r"gone\.py.*does not exist"):
        import_nkibench_dir(tmp_path)
    not_a_task = tmp_path / "plain.py"
    not_a_task.write_text("def forward(x):\n    return x\n")
    with pytest.raises(TaskFileError, match="get_inputs"):
        definition_from_task(not_a_task)
    crashing = tmp_path / "crash.py"
    crashing.write_text(
        "def get_inputs():\n    raise RuntimeError('no data')\n\ndef forward(x):\n    return x\n"
    )
    with pytest.raises(TaskFileError, match="no data"):
        definition_from_task(crashing)


def test_copied_directory_imports_from_anywhere(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "bench")
    summary = json.loads((tmp_path / "bench" / "summary.json").read_text())
    only = {"silu": summary["silu"]}
    (tmp_path / "bench" / "summary.json").write_text(json.dumps(only))
    (entry,) = import_nkibench_dir(tmp_path / "bench")
    assert entry.definition.name == "silu_M512_N1024"


def test_roofline_in_accelopt_form_travels_from_the_module_to_the_task(tmp_path: Path) -> None:
    """roofline() -> {matmul_flops, vector_flops, bytes_moved}: read in the jail, kept as the
    definition's tag, back as the task's Roofline; a roofline mixing both forms is refused."""
    body = (
        "import numpy as np\n\nM = 8\nK = 4\n\n"
        "def get_inputs():\n"
        "    return [np.ones((M, K), np.float32), np.ones((K, M), np.float32)]\n\n"
        "def forward(a, b):\n    return np.exp(a @ b)\n\n"
        "def roofline():\n    return {ROOF}\n"
    )
    task = tmp_path / "mm_exp_M8_K4_numpy_0.py"
    task.write_text(
        body.replace(
            "{ROOF}",
            "{'matmul_flops': 2 * M * M * K, 'vector_flops': M * M,"
            " 'bytes_moved': 4 * (2 * M * K + M * M)}",
        )
    )
    definition = definition_from_task(task)
    tag = "roofline:matmul_flops=512,vector_flops=64,bytes_moved=512"
    assert tag in definition.tags
    roofline = Task(definition=definition, workload=default_workload(definition)).roofline
    assert roofline == Roofline(matmul_flops=512, vector_flops=64, bytes_moved=512)
    task.write_text(body.replace("{ROOF}", "{'flops': 1, 'vector_flops': 1, 'bytes_moved': 1}"))
    with pytest.raises(TaskFileError, match=r"roofline\(\) returned .*not both"):
        definition_from_task(task)

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelopt_mcp.tasks.flashinfer_format import (
    TaskFileError,
    load_definition,
    load_solution_json,
    load_trace_set,
    load_workloads,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cpu" / "flashinfer"


def test_example_trace_set_loads_whole() -> None:
    trace_set = load_trace_set(EXAMPLES)
    assert set(trace_set.definitions) == {
        "rmsnorm_n1024",
        "softmax_n1024",
        "silu_n1024",
        "matmul_bias_k256_n256",
        "layernorm_n1024",
    }
    for name in trace_set.definitions:
        assert trace_set.workloads[name], f"{name} has no workloads"
        assert trace_set.solutions[name], f"{name} has no solutions"
    assert [w.axes["M"] for w in trace_set.workloads["rmsnorm_n1024"]] == [256, 64]


def test_workload_files_hold_bare_workloads_or_traces(tmp_path: Path) -> None:
    bare = {"axes": {"M": 2}, "inputs": {}, "uuid": "a"}
    trace = {"definition": "d1", "workload": {"axes": {"M": 3}, "inputs": {}, "uuid": "b"}}
    other = {"definition": "d2", "workload": {"axes": {"M": 4}, "inputs": {}, "uuid": "c"}}
    jsonl = tmp_path / "w.jsonl"
    jsonl.write_text("\n".join(json.dumps(v) for v in (bare, trace, other)) + "\n")
    assert [w.uuid for w in load_workloads(jsonl, "d1")] == ["a", "b"]
    single = tmp_path / "w.json"
    single.write_text(json.dumps(bare))
    assert load_workloads(single)[0].axes == {"M": 2}


def test_bad_files_name_the_file_and_the_problem(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="does not exist"):
        load_definition(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(TaskFileError, match="not valid JSON"):
        load_definition(broken)
    definition = json.loads((EXAMPLES / "definitions" / "silu_n1024.json").read_text())
    definition["reference"] = "def forward(x):\n    return x\n"
    no_run = tmp_path / "no_run.json"
    no_run.write_text(json.dumps(definition))
    with pytest.raises(TaskFileError, match="must define a top-level function `run`"):
        load_definition(no_run)
    lines = tmp_path / "w.jsonl"
    lines.write_text('{"axes": {}, "inputs": {}, "uuid": "x"}\n{oops\n')
    with pytest.raises(TaskFileError, match="line 2"):
        load_workloads(lines)
    with pytest.raises(TaskFileError, match="not a FlashInfer trace-set"):
        load_trace_set(tmp_path)


def test_solution_json_round_trips() -> None:
    path = EXAMPLES / "solutions" / "silu_n1024" / "silu_n1024_fast.json"
    solution = load_solution_json(path)
    assert solution.spec.entry_point == "main.py::run"
    assert solution.entry_symbol == "run"
    assert solution.spec.destination_passing_style is False

"""The records load FlashInfer-Trace files written by flashinfer-bench 0.1.2 and write them
back unchanged (tests/data/fib_traceset is in its layout and was checked to load there)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from accelopt_mcp.hashing import benchmark_config_hash, solution_hash
from accelopt_mcp.models import (
    AxisConst,
    Definition,
    Evaluation,
    EvaluationStatus,
    Language,
    SafetensorsInput,
    ScalarInput,
    Solution,
    Trace,
)

TRACESET = Path(__file__).parent / "data" / "fib_traceset"


def _normalise(value: object) -> object:
    """NaN != NaN; compare it as a marker."""
    if (isinstance(value, float) and math.isnan(value)) or value == "NaN":
        return "NaN"
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


@pytest.mark.parametrize(
    ("model", "path"),
    [
        (Definition, "definitions/rmsnorm/rmsnorm_h128.json"),
        (Solution, "solutions/rmsnorm/rmsnorm_h128/rmsnorm_h128_triton_v1.json"),
        (Solution, "solutions/rmsnorm/rmsnorm_h128/rmsnorm_h128_python_ref.json"),
    ],
)
def test_flashinfer_json_round_trips_unchanged(model: type, path: str) -> None:
    original = json.loads((TRACESET / path).read_text())
    record = model.model_validate_json((TRACESET / path).read_text())
    assert json.loads(record.to_json()) == original


@pytest.mark.parametrize("folder", ["workloads", "traces"])
def test_flashinfer_trace_lines_round_trip(folder: str) -> None:
    lines = (TRACESET / folder / "rmsnorm" / "rmsnorm_h128.jsonl").read_text().splitlines()
    assert lines
    for line in lines:
        trace = Trace.model_validate_json(line)
        dumped = json.loads(trace.model_dump_json(exclude_unset=True))
        assert _normalise(dumped) == _normalise(json.loads(line))


def test_loaded_records_expose_their_parts() -> None:
    definition = Definition.model_validate_json(
        (TRACESET / "definitions/rmsnorm/rmsnorm_h128.json").read_text()
    )
    assert definition.const_axes == {"hidden_size": 128}
    assert definition.var_axes == ["batch_size"]
    assert isinstance(definition.axes["hidden_size"], AxisConst)
    assert definition.shape_of(definition.inputs["hidden_states"], {"batch_size": 4}) == (4, 128)
    assert definition.shape_of(definition.inputs["eps"], {}) is None
    with pytest.raises(ValueError, match="batch_size"):
        definition.shape_of(definition.inputs["hidden_states"], {})

    traces = [
        Trace.model_validate_json(line)
        for line in (TRACESET / "workloads/rmsnorm/rmsnorm_h128.jsonl").read_text().splitlines()
    ]
    assert all(t.is_workload_trace for t in traces)
    assert isinstance(traces[0].workload.inputs["eps"], ScalarInput)
    assert isinstance(traces[2].workload.inputs["hidden_states"], SafetensorsInput)

    evaluated = [
        Trace.model_validate_json(line)
        for line in (TRACESET / "traces/rmsnorm/rmsnorm_h128.jsonl").read_text().splitlines()
    ]
    statuses = [t.evaluation.status for t in evaluated if t.evaluation]
    assert statuses == [
        EvaluationStatus.PASSED,
        EvaluationStatus.INCORRECT_NUMERICAL,
        EvaluationStatus.RUNTIME_ERROR,
    ]
    assert evaluated[0].evaluation and evaluated[0].evaluation.performance
    assert evaluated[0].evaluation.performance.speedup_factor == pytest.approx(3.707)


def _solution(**changes: object) -> dict:
    data = json.loads(
        (TRACESET / "solutions/rmsnorm/rmsnorm_h128/rmsnorm_h128_triton_v1.json").read_text()
    )
    data.update(changes)
    return data


def test_nki_language_is_ours_and_accepted() -> None:
    spec = {**_solution()["spec"], "language": "nki", "target_hardware": ["trn1"]}
    assert Solution.model_validate(_solution(spec=spec)).spec.language is Language.NKI


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sources": [{"path": "/etc/passwd", "content": "x"}]}, "must be relative"),
        ({"sources": [{"path": "../up.py", "content": "x"}]}, "must be relative"),
        ({"sources": [{"path": "other.py", "content": "x"}]}, "not among the sources"),
        ({"sources": []}, "at least 1"),
        (
            {
                "sources": [
                    {"path": "main.py", "content": "a"},
                    {"path": "main.py", "content": "b"},
                ]
            },
            "duplicate source paths",
        ),
    ],
)
def test_bad_solutions_are_rejected_with_a_reason(changes: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Solution.model_validate(_solution(**changes))


def test_bad_entry_point_is_explained() -> None:
    spec = {**_solution()["spec"], "entry_point": "main.py"}
    with pytest.raises(ValidationError, match="<file path>::<function name>"):
        Solution.model_validate(_solution(spec=spec))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"reference": "def forward(x):\n    return x\n"}, "function `run`"),
        ({"reference": "def run(:\n"}, "not valid Python"),
        ({"outputs": {"weight": {"shape": None, "dtype": "float32"}}}, "overlap"),
        (
            {"outputs": {"output": {"shape": ["nope"], "dtype": "float32"}}},
            "axis 'nope'",
        ),
        ({"constraints": ["hidden_size %"]}, "not a Python expression"),
        ({"axes": {"batch_size": {"type": "other"}}}, "type"),
    ],
)
def test_bad_definitions_are_rejected_with_a_reason(changes: dict, message: str) -> None:
    data = json.loads((TRACESET / "definitions/rmsnorm/rmsnorm_h128.json").read_text())
    data.update(changes)
    with pytest.raises(ValidationError, match=message):
        Definition.model_validate(data)


def test_evaluation_status_rules_match_flashinfer() -> None:
    env = {"hardware": "cpu"}
    perf = {"latency_ms": 1.0, "reference_latency_ms": 2.0, "speedup_factor": 2.0}
    ok = Evaluation(
        status="PASSED",
        environment=env,
        timestamp="t",
        correctness={},
        performance=perf,
        hardware_counters={"l2_rel_error": 1e-7},
    )
    assert ok.passed
    # Our extra fields survive our own round trip.
    assert Evaluation.model_validate_json(ok.to_json()).hardware_counters == {"l2_rel_error": 1e-7}
    with pytest.raises(ValidationError, match="needs both correctness and performance"):
        Evaluation(status="PASSED", environment=env, timestamp="t", correctness={})
    with pytest.raises(ValidationError, match="no correctness or performance"):
        Evaluation(status="TIMEOUT", environment=env, timestamp="t", performance=perf)
    with pytest.raises(ValidationError, match="non-negative"):
        Evaluation(
            status="INCORRECT_NUMERICAL",
            environment=env,
            timestamp="t",
            correctness={"max_absolute_error": -1.0},
        )


def test_solution_hash_is_accelopt_v1_for_single_file_solutions() -> None:
    import hashlib

    single = Solution.model_validate(_solution())
    expected = hashlib.sha256(single.sources[0].content.encode()).hexdigest()
    assert solution_hash(single) == expected
    renamed = Solution.model_validate(_solution(name="other-name", author="someone-else"))
    assert solution_hash(renamed) == expected  # the hash is about the code only

    multi = Solution.model_validate_json(
        (TRACESET / "solutions/rmsnorm/rmsnorm_h128/rmsnorm_h128_python_ref.json").read_text()
    )
    changed = multi.model_copy(
        update={"sources": [multi.sources[0], multi.sources[1].model_copy(update={"content": "#"})]}
    )
    assert solution_hash(multi) != solution_hash(changed)
    with pytest.raises(ValueError, match="hash_version"):
        solution_hash(single, hash_version=2)


def test_benchmark_config_hash_ignores_key_order_only() -> None:
    a = benchmark_config_hash({"iterations": 10, "seeds": [0, 21]})
    assert a == benchmark_config_hash({"seeds": [0, 21], "iterations": 10})
    assert a != benchmark_config_hash({"seeds": [0, 21], "iterations": 11})


def test_roofline_travels_as_a_definition_tag() -> None:
    from accelopt_mcp.models import Roofline, Task, Workload

    data = json.loads((TRACESET / "definitions/rmsnorm/rmsnorm_h128.json").read_text())
    declared = Roofline(flops=2**20, bytes_moved=3 * 2**20 + 7, compute_unit="vector")
    data["tags"] = [*data["tags"], declared.to_tag()]
    definition = Definition.model_validate(data)
    task = Task(
        definition=definition, workload=Workload(axes={"batch_size": 1}, inputs={}, uuid="u")
    )
    assert task.roofline == declared
    plain = Definition.model_validate(
        json.loads((TRACESET / "definitions/rmsnorm/rmsnorm_h128.json").read_text())
    )
    assert Task(definition=plain, workload=task.workload).roofline is None


def test_union_members_without_type_are_inferred_and_always_written_with_it() -> None:
    from accelopt_mcp.models import AxisVar, RandomInput, Workload

    raw = json.loads((TRACESET / "definitions/rmsnorm/rmsnorm_h128.json").read_text())
    for axis in raw["axes"].values():
        axis.pop("type")
    definition = Definition.model_validate(raw)
    assert isinstance(definition.axes["hidden_size"], AxisConst)
    assert isinstance(definition.axes["batch_size"], AxisVar)
    # Written back, each axis says what it is, as flashinfer-bench needs to tell them apart.
    assert json.loads(definition.to_json())["axes"]["hidden_size"] == {
        "type": "const",
        "value": 128,
    }

    workload = Workload.model_validate(
        {
            "axes": {},
            "inputs": {"a": {}, "b": {"value": 0.5}, "c": {"path": "x.st", "tensor_key": "k"}},
            "uuid": "u",
        }
    )
    kinds = [type(v) for v in workload.inputs.values()]
    assert kinds == [RandomInput, ScalarInput, SafetensorsInput]
    assert json.loads(workload.to_json())["inputs"]["a"] == {"type": "random"}
    assert AxisConst(value=3).to_json().replace(" ", "").replace("\n", "") == (
        '{"type":"const","value":3}'
    )

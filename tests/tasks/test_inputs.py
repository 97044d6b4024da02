from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accelopt_mcp.models import (
    AxisConst,
    AxisVar,
    Definition,
    RandomInput,
    SafetensorsInput,
    ScalarInput,
    TensorSpec,
    Workload,
)
from accelopt_mcp.tasks.inputs import InputError, generate_inputs, input_plan, needs_torch


def definition() -> Definition:
    return Definition(
        name="mixed",
        op_type="test",
        axes={"M": AxisVar(), "N": AxisConst(value=8)},
        inputs={
            "x": TensorSpec(shape=["M", "N"], dtype="float32"),
            "h": TensorSpec(shape=["N"], dtype="float16"),
            "idx": TensorSpec(shape=["M"], dtype="int32"),
            "mask": TensorSpec(shape=["N"], dtype="bool"),
            "alpha": TensorSpec(shape=None, dtype="float32"),
        },
        outputs={"y": TensorSpec(shape=["M", "N"], dtype="float32")},
        reference="def run(x, h, idx, mask, alpha):\n    return x\n",
    )


def workload(**inputs) -> Workload:
    return Workload(axes={"M": 4}, inputs={"alpha": ScalarInput(value=0.5), **inputs}, uuid="w")


def test_inputs_are_deterministic_per_seed_and_typed() -> None:
    plan = input_plan(definition(), workload(x=RandomInput()))
    first, again, other = (generate_inputs(plan, s) for s in (7, 7, 8))
    for a, b in zip(first[:4], again[:4], strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(first[0], other[0])
    x, h, idx, mask, alpha = first
    assert x.shape == (4, 8) and x.dtype == np.float32
    assert h.shape == (8,) and h.dtype == np.float16
    assert idx.dtype == np.int32 and idx.min() >= 0 and idx.max() < 8
    assert mask.dtype == np.bool_
    assert alpha == 0.5
    assert abs(float(np.mean(generate_inputs(plan, 1)[0]))) < 1.5
    assert not needs_torch(plan)


def test_missing_safetensors_file_is_a_clear_error(tmp_path: Path) -> None:
    source = SafetensorsInput(path="blobs/x.safetensors", tensor_key="x")
    with pytest.raises(InputError, match=r"does not exist.*relative to the trace-set"):
        input_plan(definition(), workload(x=source), base_dir=tmp_path)


@pytest.mark.parametrize("path", ["/etc/shadow", "../outside/x.safetensors", "a/../../x"])
def test_a_safetensors_path_out_of_the_trace_set_is_refused_unlooked(
    tmp_path: Path, path: str
) -> None:
    """A task file is untrusted: a path out of its trace set would have the harness read any
    file, and 'does not exist' tell which exist. Refused before it is looked up."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.safetensors").write_bytes(b"")
    source = SafetensorsInput(path=path, tensor_key="x")
    with pytest.raises(InputError, match="stay inside it") as caught:
        input_plan(definition(), workload(x=source), base_dir=tmp_path / "set")
    assert "does not exist" not in str(caught.value)


def test_a_safetensors_link_out_of_the_trace_set_is_refused(tmp_path: Path) -> None:
    trace_set, outside = tmp_path / "set", tmp_path / "outside"
    trace_set.mkdir()
    outside.mkdir()
    (outside / "x.safetensors").write_bytes(b"")
    (trace_set / "blobs").symlink_to(outside, target_is_directory=True)
    source = SafetensorsInput(path="blobs/x.safetensors", tensor_key="x")
    with pytest.raises(InputError, match="leads out of the trace-set directory"):
        input_plan(definition(), workload(x=source), base_dir=trace_set)
    # A file inside the trace set is taken (the plan names it; reading it is the harness's).
    (trace_set / "own").mkdir()
    (trace_set / "own" / "x.safetensors").write_bytes(b"")
    inside = SafetensorsInput(path="own/x.safetensors", tensor_key="x")
    plan = input_plan(definition(), workload(x=inside), base_dir=trace_set)
    assert [e["kind"] for e in plan if e["name"] == "x"] == ["safetensors"]


def test_unknown_workload_input_is_rejected() -> None:
    with pytest.raises(InputError, match="does not have"):
        input_plan(definition(), workload(zzz=RandomInput()))


def test_unbound_variable_axis_is_rejected() -> None:
    bad = Workload(axes={}, inputs={}, uuid="w")
    with pytest.raises(ValueError, match="variable axes"):
        input_plan(definition(), bad)

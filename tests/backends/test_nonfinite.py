"""Outputs where the reference is NaN or +/-inf (issue 19, item 4): a masked log-softmax task,
evaluated for real (jailed children through CpuBackend), and the comparison itself.

Before the fix both sides were set to 0 wherever the reference was not finite, so a kernel
writing 12345.0 at the masked positions passed with "L2-relative error 0".
"""

from __future__ import annotations

import textwrap
from types import ModuleType

import numpy as np
import pytest

from accelopt_mcp.backends import nki_runner
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.cpu_outcomes import Verdict
from accelopt_mcp.backends.cpu_values import compare_output, compare_outputs
from accelopt_mcp.backends.nki_runner import NkiJob
from accelopt_mcp.backends.nonfinite import nonfinite_problem
from accelopt_mcp.models import (
    AxisConst,
    BenchmarkConfig,
    Definition,
    EvaluationStatus,
    RandomInput,
    ScalarInput,
    Solution,
    Task,
    TensorSpec,
    Workload,
)
from tests.bench import quick_bench
from tests.store.samples import one_file_solution

FAST = quick_bench(seeds=[0, 21], timeout_seconds=20, max_timing_seconds=1)
IGNORE = FAST.model_copy(update={"nonfinite": "ignore"})

# Columns 48.. are masked (-inf after log-softmax); column 0 is NaN and column 1 is +inf by the
# task's own definition, so every kind of non-finite value is present.
BODY = """
import numpy as np

def run(x, scale):
    z = x * np.float32(scale)
    z[:, 48:] = -np.inf
    m = z.max(axis=1, keepdims=True)
    out = z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))
    out[:, 0] = np.nan
    out[:, 1] = np.inf
    {tamper}
    return out.astype(np.float32)
"""


def code(tamper: str = "") -> str:
    return textwrap.dedent(BODY).replace("{tamper}", tamper)


def masked_task() -> Task:
    definition = Definition(
        name="masked_log_softmax",
        op_type="softmax",
        axes={"M": AxisConst(value=32), "N": AxisConst(value=64)},
        inputs={
            "x": TensorSpec(shape=["M", "N"], dtype="float32"),
            "scale": TensorSpec(shape=None, dtype="float32"),
        },
        outputs={"y": TensorSpec(shape=["M", "N"], dtype="float32")},
        reference=code(),
    )
    workload = Workload(
        axes={}, inputs={"x": RandomInput(), "scale": ScalarInput(value=0.5)}, uuid="w1"
    )
    return Task(definition=definition, workload=workload)


def solution(source: str) -> Solution:
    return one_file_solution(source, "masked_log_softmax")


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    return CpuBackend()


def test_an_exact_kernel_passes(backend: CpuBackend) -> None:
    evaluation = backend.evaluate(masked_task(), solution(code()), FAST)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log


@pytest.mark.parametrize(
    ("tamper", "kind"),
    [
        # Finite garbage at the masked positions: passed with error 0 before the fix.
        ("out[:, 48:] = 12345.0", "-inf"),
        # The wrong infinity.
        ("out[:, 48:] = np.inf", "-inf"),
        ("out[:, 1] = -np.inf", "+inf"),
        # A finite value where the reference is NaN, and NaN where it is finite.
        ("out[:, 0] = 0.0", "NaN"),
        ("out[:, 5] = np.nan", "where the reference is finite"),
    ],
)
def test_a_kernel_that_does_not_match_the_non_finite_values_fails(
    backend: CpuBackend, tamper: str, kind: str
) -> None:
    evaluation = backend.evaluate(masked_task(), solution(code(tamper)), FAST)
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL, evaluation.log
    assert kind in evaluation.log, evaluation.log
    assert "first at [0, " in evaluation.log, evaluation.log
    assert "12345" not in evaluation.log  # a count and an index, never the values


def test_the_ignore_rule_is_opt_in_and_passes_finite_garbage(backend: CpuBackend) -> None:
    evaluation = backend.evaluate(masked_task(), solution(code("out[:, 48:] = 12345.0")), IGNORE)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log


def test_the_ignore_rule_still_fails_nan_where_the_reference_is_finite(
    backend: CpuBackend,
) -> None:
    evaluation = backend.evaluate(masked_task(), solution(code("out[:, 5] = np.nan")), IGNORE)
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL, evaluation.log


# --------------------------------------------------------------------------- the comparison


REF = np.array([[0.5, -np.inf, np.nan], [np.inf, -1.0, -np.inf]], dtype=np.float32)


def _fails(out: np.ndarray, rule: str = "match") -> str:
    with pytest.raises(Verdict) as caught:
        compare_output(out, REF, 0, 1e-5, 1e-6, nonfinite=rule)
    assert caught.value.status == "INCORRECT_NUMERICAL"
    return caught.value.message


def test_compare_passes_an_output_equal_to_the_reference() -> None:
    errors = compare_output(REF.copy(), REF, 0, 1e-5, 1e-6)
    assert errors["l2_rel_error"] == 0.0


def test_compare_fails_finite_garbage_at_minus_inf_and_counts_it() -> None:
    out = np.where(np.isneginf(REF), np.float32(12345.0), REF)
    message = _fails(out)
    assert "2 positions where the reference is -inf" in message
    assert "first at [0, 1]" in message
    assert "12345" not in message


def test_compare_fails_each_kind_of_mismatch() -> None:
    out = REF.copy()
    out[0, 2] = 1.0  # finite where NaN
    out[1, 0] = -np.inf  # the wrong infinity
    out[1, 1] = np.nan  # NaN where finite
    message = _fails(out)
    assert "where the reference is NaN" in message
    assert "where the reference is +inf" in message
    assert "1 NaN/inf values where the reference is finite (first at [1, 1])" in message


def test_compare_ignore_skips_only_the_reference_non_finite_positions() -> None:
    garbage = np.where(np.isfinite(REF), REF, np.float32(7.0))
    assert compare_output(garbage, REF, 0, 1e-5, 1e-6, nonfinite="ignore")["l2_rel_error"] == 0.0
    wild = REF.copy()
    wild[0, 0] = np.inf
    _fails(wild, "ignore")
    off = np.where(np.isfinite(REF), REF + 1, REF)
    _fails(off, "ignore")  # the finite positions are still compared


def test_compare_all_passes_the_rule_on() -> None:
    out = np.where(np.isneginf(REF), np.float32(0.0), REF)
    with pytest.raises(Verdict):
        compare_outputs([out], [REF], 1e-5, 1e-6)
    compare_outputs([out], [REF], 1e-5, 1e-6, nonfinite="ignore")


def test_an_unknown_rule_is_refused_not_treated_as_lenient() -> None:
    with pytest.raises(ValueError, match="unknown nonfinite rule"):
        nonfinite_problem(REF, REF, "lenient")


def test_the_rule_joins_the_profile_key_only_when_it_is_not_the_default() -> None:
    assert "nonfinite" not in FAST.perf_fields()
    assert IGNORE.perf_fields()["nonfinite"] == "ignore"
    with pytest.raises(ValueError):
        BenchmarkConfig(nonfinite="sometimes")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the nki runner


def _nki_job(rule: str) -> NkiJob:
    return NkiJob(
        task_file="task.py",
        kernel_dir="k",
        kernel_file="k/main.py",
        entry_symbol="run",
        mode="simulate",
        seeds=[0],
        rtol=1e-5,
        atol=1e-6,
        nonfinite=rule,  # type: ignore[arg-type]
        warmup_runs=0,
        iterations=1,
        max_relative_spread=0.1,
        max_measurement_rounds=1,
        artifact_dir="a",
    )


def _nki_compare(out: np.ndarray, rule: str = "match") -> None:
    nki_runner._compare(
        ModuleType("task"), out, REF, _nki_job(rule), nki_runner._Errors(), "seed 0"
    )


def test_the_nki_runner_applies_the_same_rule() -> None:
    _nki_compare(REF.copy())  # NaN/inf where the reference has them: passes (it failed before)
    garbage = np.where(np.isfinite(REF), REF, np.float32(12345.0))
    with pytest.raises(nki_runner._Failure) as caught:
        _nki_compare(garbage)
    assert caught.value.status == EvaluationStatus.INCORRECT_NUMERICAL
    assert "where the reference is -inf" in str(caught.value)
    _nki_compare(garbage, "ignore")

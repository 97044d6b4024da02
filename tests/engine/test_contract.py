"""The contract every prompt states (engine/contract.py) says what the harness does: its
tolerance rule with this run's numbers, and what a kernel may do. Each claim a kernel can test
is tested here against the real cpu harness, so a change there that makes a sentence false
fails this file."""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.cpu_values import Verdict, compare_output
from accelopt_mcp.engine.contract import contract_lines, contract_text
from accelopt_mcp.engine.prompts import (
    FAMILIES,
    executor_messages,
    planner_messages,
    repair_messages,
    summarizer_messages,
)
from accelopt_mcp.models import BenchmarkConfig, Environment, Evaluation, Solution, Task
from accelopt_mcp.tasks.kernels import solution_from_source
from tests.bench import quick_bench


def _all_roles(family: str, task: Task, kernel: Solution, contract: str | None) -> list[str]:
    """The system prompt of every role (planner, executor, repair, summarizer)."""
    chats = [
        planner_messages(family, task, kernel, None, [], random.Random(0), contract=contract),
        executor_messages(family, task, kernel, "a plan", contract=contract),
        repair_messages(
            family, task, kernel, "a plan", "x", "RUNTIME_ERROR", "log", contract=contract
        ),
        summarizer_messages(family, task, kernel, kernel, 2.0, contract=contract),
    ]
    return [chat[0].content for chat in chats]


def test_every_role_states_the_tolerance_of_this_run(silu_task: Task, silu_baseline: Solution):
    strict = "\n".join(contract_lines("cpu", BenchmarkConfig(rtol=3e-4, atol=0.0), cores=1))
    assert "rtol 0.0003, atol 0" in strict and "atol * sqrt(n)" in strict
    for system in _all_roles("cpu", silu_task, silu_baseline, strict):
        assert strict in system
    # Without a run's contract, each family's rule with the default settings.
    for family in FAMILIES:
        for system in _all_roles(family, silu_task, silu_baseline, None):
            assert "The contract" in system and "rtol" in system
            assert "float32 tolerance" not in system and "{{" not in system
    default = contract_text("cpu")
    assert f"rtol {BenchmarkConfig().rtol:g}" in default
    assert "One core" in default  # a one-off evaluation is pinned to one core


def test_the_rule_is_the_cpu_harness_rule_an_l2_norm_not_per_element() -> None:
    """What the contract says of the rule (one L2 norm over the output, atol scaled by
    sqrt(n)) is what cpu_values.compare_output applies."""
    rtol, atol, n = 2e-5, 1e-6, 10_000
    assert "||out - ref||_2 <= rtol * ||ref||_2 + atol * sqrt(n)" in contract_text("cpu")
    ref = np.ones(n, dtype=np.float32)
    bound = rtol * math.sqrt(n) + atol * math.sqrt(n)  # ||ref|| = sqrt(n)
    # One element off by 90% of the whole bound: far outside any per-element rtol, yet passes.
    spike = ref.copy()
    spike[0] += np.float32(0.9 * bound)
    compare_output(spike, ref, 0, rtol, atol)
    # A bias on every element that is small per element but 1.5x the bound in L2: fails.
    bias = ref + np.float32(1.5 * bound / math.sqrt(n))
    with pytest.raises(Verdict, match="L2-relative error"):
        compare_output(bias, ref, 0, rtol, atol)


def test_the_cores_sentence_follows_the_pool() -> None:
    one = "\n".join(contract_lines("cpu", None, cores=1))
    assert "One core" in one and "only add overhead" in one and "GIL" not in one
    four = "\n".join(contract_lines("cpu", None, cores=4))
    assert "4 cores" in four and "release the GIL" in four and "One core" not in four
    torch = "\n".join(contract_lines("cpu", None, cores=1, uses_torch=True))
    assert "numpy, torch (CPU) and the standard library" in torch


def test_the_device_families_state_their_own_rules() -> None:
    nki = contract_text("nki", BenchmarkConfig(rtol=1e-3))
    assert "||out - ref||_2 <= rtol * ||ref||_2 + atol (rtol 0.001" in nki
    assert "sqrt(n)" not in nki and "neuronxcc.nki" in nki
    # flashinfer-bench keeps its own 1e-2 unless the settings set a tolerance.
    assert "(rtol 0.01, atol 0.01)" in contract_text("flashinfer")
    assert "(rtol 0.0005, atol 0.01)" in contract_text("flashinfer", BenchmarkConfig(rtol=5e-4))


def test_the_gpu_contract_states_what_flashinfer_bench_is_handed() -> None:
    from accelopt_mcp.backends.flashinfer import benchmark_settings

    # Seeds left at their default are not sent: flashinfer-bench runs its own 3 trials.
    assert "num_trials" not in benchmark_settings(BenchmarkConfig())
    assert "- Inputs: 3 trials of" in contract_text("flashinfer")
    assert "- Inputs: 2 trials of" in contract_text("flashinfer", BenchmarkConfig(seeds=[1, 2]))
    assert "- Inputs: 1 trial of" in contract_text("flashinfer", BenchmarkConfig(seeds=[7]))
    # flashinfer-bench refuses an atol of 0: the smallest it takes is sent, and stated.
    sent = benchmark_settings(BenchmarkConfig(atol=0.0))["atol"]
    assert sent > 0
    assert f"(rtol 0.01, atol {sent:g})" in contract_text("flashinfer", BenchmarkConfig(atol=0.0))


def test_a_prompt_built_outside_a_run_takes_the_cores_its_profile_records(
    silu_task: Task, silu_baseline: Solution
) -> None:
    profile = Evaluation(
        status="RUNTIME_ERROR",
        environment=Environment(hardware="cpu/test", libs={"cores_per_evaluation": "2"}),
        timestamp="2026-01-01T00:00:00Z",
    )
    system, _ = executor_messages("cpu", silu_task, silu_baseline, "p", profile=profile)
    assert "2 cores, BLAS and OpenMP threads set to 2" in system.content
    assert "One core" not in system.content


# A kernel that holds the contract's cpu claims to account: it fails (raises) if it is ever
# given an input it saw before (fresh inputs every call), and overwrites its input after
# using it (allowed: the inputs are its own copy, rewritten before every call).
FRESH_AND_OVERWRITE = """
import numpy as np

_seen = set()


def kernel(x):
    key = x.tobytes()
    if key in _seen:
        raise RuntimeError("the same input twice")
    _seen.add(key)
    out = (x / (1.0 + np.exp(-x))).astype(np.float32)
    x[...] = 0.0
    return out
"""


def _evaluate(task: Task, source: str) -> Evaluation:
    core = min(os.sched_getaffinity(0))
    solution = solution_from_source(source, task.definition.name, name="contract")
    return CpuBackend(cpus={core}).evaluate(
        task, solution, quick_bench(seeds=[0, 1], processes=(1, 2), iterations=3)
    )


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux affinity")
def test_inputs_are_fresh_every_call_may_be_overwritten_and_module_state_persists(
    silu_task: Task,
) -> None:
    contract = contract_text("cpu")
    assert "new inputs for every timed call" in contract
    assert "it may overwrite them" in contract
    assert "module-level constants and buffers persist between calls" in contract
    evaluation = _evaluate(silu_task, FRESH_AND_OVERWRITE)
    assert evaluation.passed, evaluation.log[-2000:]
    assert evaluation.trusted, evaluation.flags
    # The same kernel, told to fail once its module has seen three calls: it does, so the
    # module (and `_seen`) lived across calls, as the contract says.
    counting = FRESH_AND_OVERWRITE.replace("if key in _seen:", "if len(_seen) >= 3:")
    failed = _evaluate(silu_task, counting)
    assert failed.status.value == "RUNTIME_ERROR"
    assert "the same input twice" in failed.log

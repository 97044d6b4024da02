"""The contract a kernel is held to, as one text for every role's prompt and for the MCP tool
that profiles a kernel: the correctness rule the backend's harness applies (its formula, with
this run's rtol and atol), which inputs it is checked and timed on, and what a kernel may and
may not do (its inputs, threads, module state, imports, cores).

Every sentence here states what the harness does; each cpu claim names the code it rests on,
and tests/engine/test_contract.py checks the ones a kernel can test (fresh inputs every call,
inputs it may overwrite, module state that persists, the tolerance rule with its numbers).
"""

from __future__ import annotations

from accelopt_mcp.backends.cpu_job import JAIL_MAX_PROCESSES
from accelopt_mcp.backends.cpu_session import FRESH_CORRECTNESS_SETS
from accelopt_mcp.backends.flashinfer import benchmark_settings
from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.models import BenchmarkConfig

FLASHINFER_DEFAULT_TOL = 1e-2
"""flashinfer-bench's own rtol and atol, used unless the benchmark settings set them
(backends/flashinfer.benchmark_settings passes only what the caller set)."""
FLASHINFER_DEFAULT_TRIALS = 3
"""flashinfer-bench's own num_trials, used unless the benchmark settings give seeds (then one
trial per seed: benchmark_settings)."""


def _nonfinite_rule(config: BenchmarkConfig) -> str:
    # backends/nonfinite.py: the same two rules on every backend that checks values itself.
    if config.nonfinite == "ignore":
        return "Positions where the reference is NaN/inf are not compared; elsewhere NaN/inf fails."
    return "NaN/inf only where the reference has the same (NaN, +inf or -inf)."


def _seeds(config: BenchmarkConfig) -> str:
    count = len(config.seeds)
    return f"{count} fixed seed{'s' if count != 1 else ''}"


def _cpu_contract(config: BenchmarkConfig, cores: int | None, uses_torch: bool) -> list[str]:
    # The rule of backends/cpu_values.compare_output, with the run's numbers.
    lines = [
        "- Correct: each output has the reference's shape and dtype, and ||out - ref||_2 <= "
        f"rtol * ||ref||_2 + atol * sqrt(n) (rtol {config.rtol:g}, atol {config.atol:g}, n = "
        "its element count): one L2 norm over the whole output, not a test per element. "
        + _nonfinite_rule(config),
        # cpu_session: the fixed seeds and FRESH_CORRECTNESS_SETS sets drawn per evaluation in
        # the correctness pass; a fresh draw (secrets.randbits) for every timed call.
        f"- Inputs: {_seeds(config)}, at least {FRESH_CORRECTNESS_SETS} sets drawn fresh per "
        "evaluation, and new inputs for every timed call (its outputs are checked too): an "
        "answer that does not follow its inputs fails. Stress sets the task declares (inputs "
        "scaled up, edge cases) are checked by the same rule: keep numerically safe forms.",
        # cpu_candidate: inputs are views of the kernel's own arena, rewritten by the harness
        # before every call; the reference runs in another process on its own copy.
        "- The inputs are the kernel's own copy, rewritten before each call: it may overwrite "
        f"them. Return {'NumPy arrays or torch tensors' if uses_torch else 'NumPy arrays'} (a "
        "tuple for several outputs).",
        # cpu_candidate: one import per process, then many calls (warm-up, checks, rounds).
        "- Imported once per process, then called many times: module-level constants and "
        "buffers persist between calls (import is not timed); the input values change.",
    ]
    if cores == 1:
        lines.append(
            "- One core, BLAS and OpenMP threads set to 1: extra threads or processes share it "
            "and only add overhead."
        )
    elif cores is not None:
        lines.append(
            f"- {cores} cores, BLAS and OpenMP threads set to {cores}: a BLAS call uses them "
            "by itself; NumPy's heavy calls release the GIL, so Python threads (at most "
            f"{JAIL_MAX_PROCESSES} threads and processes in all) can split work across the "
            f"{cores} cores, and no more."
        )
    else:
        lines.append("- Pinned to its own core group, BLAS and OpenMP threads set to its size.")
    allowed = (
        "numpy, torch (CPU) and the standard library"
        if uses_torch
        else ("numpy and the standard library")
    )
    lines.append(f"- Imports: {allowed} only; no network, no files outside its work directory.")
    return lines


def _nki_contract(config: BenchmarkConfig) -> list[str]:
    # The rule of backends/nki_runner (no sqrt(n) term there).
    return [
        "- Correct: each output has the reference's shape and dtype, and ||out - ref||_2 <= "
        f"rtol * ||ref||_2 + atol (rtol {config.rtol:g}, atol {config.atol:g}): one L2 norm "
        "over the whole output, not a test per element. " + _nonfinite_rule(config),
        f"- Inputs: {_seeds(config)} and any stress sets the task declares (checked by the "
        "same rule); the latency comes from neuron-profile on the device.",
        "- One NeuronCore per evaluation. Imports: neuronxcc.nki (nki, nki.language, "
        "nki.isa), numpy and the standard library only; no network.",
    ]


def _gpu_contract(config: BenchmarkConfig) -> list[str]:
    # What flashinfer-bench is actually handed (only the settings given explicitly, an atol
    # of 0 as the smallest it accepts), else its own defaults: the numbers it checks with.
    sent = benchmark_settings(config)
    rtol = sent.get("rtol", FLASHINFER_DEFAULT_TOL)
    atol = sent.get("atol", FLASHINFER_DEFAULT_TOL)
    trials = int(sent.get("num_trials", FLASHINFER_DEFAULT_TRIALS))
    return [
        # flashinfer_bench.bench.utils.compute_error_stats: an element is off when both its
        # absolute error exceeds atol and its relative error exceeds rtol.
        "- Correct: flashinfer-bench's check per element: each element's absolute error within "
        f"atol or its relative error within rtol (rtol {rtol:g}, atol {atol:g}), with the "
        "reference's shapes and dtypes.",
        f"- Inputs: {trials} trial{'s' if trials != 1 else ''} of flashinfer-bench's "
        "workload inputs.",
        "- One GPU per evaluation (the only one visible). Imports: torch, triton and the "
        "standard library only; no network.",
    ]


def contract_lines(
    family: str,
    config: BenchmarkConfig | None = None,
    *,
    cores: int | None = None,
    uses_torch: bool = False,
) -> list[str]:
    """The contract's lines for a prompt family ('cpu', 'nki', 'gpu'). config: the run's
    benchmark settings (None: the defaults); cores: cores per evaluation (cpu; None: not
    known); uses_torch: the task's reference imports torch (cpu: then the kernel may too)."""
    config = config if config is not None else BenchmarkConfig()
    if family == "cpu":
        return _cpu_contract(config, cores, uses_torch)
    if family == "nki":
        return _nki_contract(config)
    if family == "gpu":
        return _gpu_contract(config)
    raise ValueError(f"unknown prompt family {family!r}")


def contract_text(
    backend: str,
    config: BenchmarkConfig | None = None,
    *,
    cores: int | None = None,
    uses_torch: bool = False,
) -> str:
    """The contract of `backend` (a registered backend name) as a bulleted text, for a tool's
    description or a prompt. A one-off cpu evaluation runs on one core (the quietest:
    host_facts.quietest_core), so `cores` defaults to 1 for cpu; a run passes its pool's."""
    family = backend_info(backend).prompt_family
    if family == "cpu" and cores is None:
        cores = 1
    return "\n".join(contract_lines(family, config, cores=cores, uses_torch=uses_torch))

"""What each role is shown."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from accelopt_mcp.engine.hardware_block import describe_hardware, vector_summary
from accelopt_mcp.engine.prompts import (
    FAMILIES,
    REPAIRABLE_STATUSES,
    SUMMARIZER_MEMORY_ITEMS,
    executor_messages,
    family_for,
    more_plans_message,
    planner_messages,
    repair_messages,
    summarizer_memory,
    summarizer_messages,
)
from accelopt_mcp.models import (
    BreakdownEntry,
    Comparison,
    Environment,
    Evaluation,
    EvaluationStatus,
    Performance,
    Solution,
    Task,
)
from accelopt_mcp.store.base import ExperienceRecord
from tests.store.samples import passed_evaluation

COUNTERS = {f"counter_{n}": float(n) for n in range(12)}


def _profile() -> Evaluation:
    return Evaluation(
        status=EvaluationStatus.RUNTIME_ERROR,
        environment=Environment(hardware="cpu/test"),
        timestamp="2026-01-01T00:00:00Z",
        hardware_counters=COUNTERS,
    )


def _order(text: str) -> list[str]:
    return [line.split(":")[0] for line in text.splitlines() if line.startswith("counter_")]


def test_planner_sees_task_kernel_memory_and_shuffled_counters(
    silu_task: Task, silu_baseline: Solution
) -> None:
    memory = [
        ExperienceRecord(
            id="e1",
            definition_name="silu",
            title="fuse the exp",
            strategy="one pass over memory",
            pseudocode="a -> b",
        )
    ]
    orders = []
    for seed in range(4):
        system, user = planner_messages(
            "cpu", silu_task, silu_baseline, _profile(), memory, random.Random(seed)
        )
        assert "[accelopt role: planner]" in system.content
        assert silu_baseline.entry_source.content.strip() in user.content
        assert "fuse the exp" in user.content and "one pass over memory" in user.content
        assert silu_task.definition.name in user.content
        orders.append(_order(user.content))
    assert all(sorted(order) == sorted(COUNTERS) for order in orders)
    assert len({tuple(order) for order in orders}) > 1  # shuffled...
    again = planner_messages("cpu", silu_task, silu_baseline, _profile(), memory, random.Random(2))
    assert _order(again[1].content) == orders[2]  # ...reproducibly


def test_executor_and_summarizer_prompts(silu_task: Task, silu_baseline: Solution) -> None:
    tricky = silu_baseline.model_copy(deep=True)
    tricky.sources[0].content += "\n# {{plan}} must stay as written\n"
    for family in FAMILIES:
        _, user = executor_messages(family, silu_task, tricky, "use float32 throughout")
        assert "use float32 throughout" in user.content
        assert "{{plan}} must stay as written" in user.content
        _, user = summarizer_messages(family, silu_task, tricky, silu_baseline, 3.5)
        assert "## Fast kernel: 3.50x over the slow kernel\n" in user.content
    assert family_for("cpu") == "cpu"
    assert family_for("nki") == "nki"
    assert family_for("flashinfer") == "gpu"
    with pytest.raises(ValueError, match="unknown backend"):
        family_for("tpu")


HARNESS = {
    "timed_calls": 120.0,
    "timed_total_ms": 49.4,
    "reference_timed_total_ms": 64.8,
    "harness_overhead_us": 3.1,
    "runqueue_wait_ms": 0.2,
    "calls_per_sample": 1.0,
}


def _measured() -> Evaluation:
    """A cpu profile: intervals on the median and on both speedups; harness internals in
    `measurement`, and (as in profiles stored before it existed) among the counters too."""
    return passed_evaluation(
        0.412,
        ci=(0.405, 0.419),
        samples=(0.401, 0.47),
        reference_ms=0.54,
        speedup=1.31,
        speedup_ci=(1.27, 1.35),
        runs=60,
        relative_spread=0.02,
        stats={"mean_ms": 0.413, "measurement_rounds": 3},
        hardware="cpu/test",
        hardware_counters={"dma_stall_pct": 2.5, "latency_ms": 0.412, **HARNESS},
        measurement=HARNESS,
        comparisons=[
            Comparison(
                baseline="parent",
                baseline_latency_ms=0.45,
                speedup=1.09,
                ci_low=1.05,
                ci_high=1.13,
                verdict="faster",
            )
        ],
    )


def test_the_planner_sees_intervals_and_against_what_never_harness_internals(
    silu_task: Task, silu_baseline: Solution
) -> None:
    _, user = planner_messages("cpu", silu_task, silu_baseline, _measured(), [], random.Random(0))
    text = user.content
    assert "latency: 0.412 ms [0.405, 0.419] (95% CI)" in text
    assert "reference latency: 0.54 ms; this kernel: 1.31x [1.27, 1.35] over the reference" in text
    assert "speedup: 1.09x [1.05, 1.13] over the parent (faster)" in text
    assert "dma_stall_pct: 2.5" in text
    for name in HARNESS:
        assert name not in text
    assert "latency_ms" not in text  # shown once, with its interval


def test_an_old_profile_without_intervals_reads_as_it_was(
    silu_task: Task, silu_baseline: Solution
) -> None:
    old = _measured().model_copy(
        update={
            "performance": Performance(
                latency_ms=0.412, reference_latency_ms=0.54, speedup_factor=1.31
            ),
            "latency_stats": None,
            "comparisons": [],
            "measurement": {},
        }
    )
    _, user = planner_messages("cpu", silu_task, silu_baseline, old, [], random.Random(0))
    assert "latency: 0.412 ms\n" in user.content
    assert "reference latency: 0.54 ms; this kernel: 1.31x over the reference\n" in user.content
    assert "timed_total_ms" not in user.content and "calls_per_sample" not in user.content


def test_the_summarizer_sees_the_pair_speedup_with_its_interval(
    silu_task: Task, silu_baseline: Solution
) -> None:
    for family in FAMILIES:
        _, user = summarizer_messages(
            family, silu_task, silu_baseline, silu_baseline, 3.5, interval=(3.3, 3.7)
        )
        assert "## Fast kernel: 3.50x [3.30, 3.70] over the slow kernel (95% CI)" in user.content
        assert "timed_total_ms" not in user.content


# --------------------------------------------------------------------------- hardware block

CPU_ENV = Environment(
    hardware="cpu/x86_64/Example CPU 9000 @ 3.0GHz",
    libs={
        "python": "3.11.7",
        "numpy": "2.4.6",
        "blas": "scipy-openblas 0.3.31",
        "isa": "sse4_2 avx avx2 fma avx512f",
        "cache_l1d": "48 KiB",
        "cache_l2": "1.25 MiB",
        "cache_l3": "48 MiB shared by 8 logical CPUs",
        "cores_per_evaluation": "1",
    },
)


def test_the_cpu_hardware_block_says_what_an_engineer_needs(silu_task: Task) -> None:
    text = describe_hardware("cpu", CPU_ENV)
    assert "- CPU: Example CPU 9000 @ 3.0GHz (x86_64)" in text
    assert "- Cores: 1 per evaluation (pinned); BLAS threads: 1" in text
    # What decides NumPy's speed of the ISA list, not the list itself.
    assert "- Vector units: AVX-512 (512-bit vectors, 16 float32 per instruction, FMA)" in text
    assert "sse4_2" not in text and "avx2" not in text
    assert "Caches: L1d 48 KiB, L2 1.25 MiB, L3 48 MiB shared by 8 logical CPUs" in text
    assert "Python 3.11.7, NumPy 2.4.6 (BLAS: scipy-openblas 0.3.31)" in text
    # What a kernel may do is the contract's, said once, not here.
    assert "import" not in text and "GIL" not in text
    four = CPU_ENV.model_copy(update={"libs": {**CPU_ENV.libs, "cores_per_evaluation": "4"}})
    assert "- Cores: 4 per evaluation (pinned); BLAS threads: 4" in describe_hardware("cpu", four)
    # A run's pool decides the cores every evaluation gets, whatever one evaluation recorded.
    pooled = describe_hardware("cpu", four, cores=2)
    assert "- Cores: 2 per evaluation (pinned); BLAS threads: 2" in pooled
    assert four.libs["cores_per_evaluation"] == "4"  # the recorded environment is not changed


def test_the_cpu_block_degrades_without_recorded_facts() -> None:
    # Another CPU model than this host's: nothing is borrowed from this host.
    bare = Environment(hardware="cpu/aarch64/Some Other Core")
    text = describe_hardware("cpu", bare)
    assert "- CPU: Some Other Core (aarch64)" in text
    assert "size not recorded" in text
    assert "Vector units" not in text and "Caches" not in text and "NumPy" not in text
    # Nothing recorded at all: this host's own facts (the cpu backend runs here).
    local = describe_hardware("cpu", None)
    assert "- CPU: " in local and f"NumPy {np.__version__}" in local


def test_device_blocks_for_trainium_and_gpus() -> None:
    trn = describe_hardware("nki", Environment(hardware="trn1", libs={"neuronxcc": "2.21"}))
    assert "- Device: trn1, one NeuronCore per evaluation" in trn
    assert "Peak per NeuronCore (trn1): memory 410 GiB/s" in trn
    assert "SBUF 24 MiB" in trn and "neuronxcc 2.21" in trn
    simulated = describe_hardware("nki", Environment(hardware="nki-simulator"))
    assert "simulator" in simulated and "Peak" not in simulated
    gpu = describe_hardware("gpu", Environment(hardware="NVIDIA H200"))
    assert "- GPU: NVIDIA H200" in gpu and "Peak per GPU (h200)" in gpu
    # Devices are not shared out by core: a pool's core count changes nothing there.
    assert describe_hardware("gpu", Environment(hardware="NVIDIA H200"), cores=3) == gpu
    assert describe_hardware("nki", Environment(hardware="trn1"), cores=3) == describe_hardware(
        "nki", Environment(hardware="trn1")
    )
    assert "model not recorded" in describe_hardware("gpu", None)
    with pytest.raises(ValueError, match="unknown prompt family"):
        describe_hardware("tpu", None)


def test_planner_and_executor_show_hardware_history_and_profile(
    silu_task: Task, silu_baseline: Solution
) -> None:
    profile = _measured().model_copy(update={"environment": CPU_ENV})
    history = "1. Iteration 1, applied to this kernel (abcd1234): tile\n   Outcome: 1.01x"
    for family in FAMILIES:
        system, user = planner_messages(
            family, silu_task, silu_baseline, profile, [], random.Random(0), history=history
        )
        assert history in user.content
        assert "Give one optimization plan" in user.content
        assert "plain prose of at most 200 words" in system.content
        assert "{{" not in system.content
    _, user = planner_messages("cpu", silu_task, silu_baseline, profile, [], random.Random(0))
    # The block comes from the profile's environment when none is given.
    assert "Example CPU 9000" in user.content and "Cores: 1 per evaluation" in user.content
    assert "(not available for this call)" in user.content

    _, user = executor_messages(
        "cpu", silu_task, silu_baseline, "use float32", profile=profile, hardware="- CPU: X"
    )
    assert "## Hardware\n- CPU: X\n" in user.content
    assert "latency: 0.412 ms [0.405, 0.419] (95% CI)" in user.content
    assert "speedup: 1.09x [1.05, 1.13] over the parent (faster)" in user.content
    system, bare = executor_messages("nki", silu_task, silu_baseline, "tile")
    assert "(not profiled)" in bare.content and "neuronxcc.nki" in system.content


def test_the_distinct_mode_asks_for_n_plans_and_the_follow_up_lists_them(
    silu_task: Task, silu_baseline: Solution
) -> None:
    system, user = planner_messages(
        "nki", silu_task, silu_baseline, None, [], random.Random(0), n_plans=5
    )
    assert "JSON list of 5 strings" in system.content
    assert "Give 5 distinct optimization plans" in user.content
    follow_up = more_plans_message(["tile rows\nby 128", "fuse the sigmoid"], 3)
    assert follow_up.role == "user"
    assert "1. tile rows by 128\n2. fuse the sigmoid" in follow_up.content
    assert "2 distinct plan(s) for this kernel so far; 3 more are needed" in follow_up.content
    with pytest.raises(ValueError):
        planner_messages("cpu", silu_task, silu_baseline, None, [], random.Random(0), n_plans=0)


def test_repair_prompt_shows_the_failed_kernel_its_failure_and_the_log_tail(
    silu_task: Task, silu_baseline: Solution
) -> None:
    failed = "import numpy as np\n\ndef kernel(x):\n    return np2.exp(x)\n"
    log = (
        "x" * 5000
        + "\nthe kernel failed on seed 0: Traceback (most recent call last):\n"
        + '  File "/tmp/accelopt-cpu-1-2-abc/kernel_0123abcd/silu.py", line 4, in kernel\n'
        + "NameError: name 'np2' is not defined"
    )
    for family in FAMILIES:
        system, user = repair_messages(
            family, silu_task, silu_baseline, "fuse the exp", failed, "RUNTIME_ERROR", log
        )
        assert "[accelopt role: executor]" in system.content
        text = user.content
        assert silu_baseline.entry_source.content.strip() in text
        assert "return np2.exp(x)" in text and "fuse the exp" in text
        assert "## It failed: RUNTIME_ERROR" in text and "raised an exception" in text
        assert "NameError: name 'np2' is not defined" in text
        assert 'File "silu.py", line 4' in text and "/tmp/accelopt" not in text
        assert "x" * 3001 not in text  # only the end of a long log
    _, user = repair_messages(
        "cpu", silu_task, silu_baseline, "p", failed, "INCORRECT_NUMERICAL", "seed 0: off"
    )
    assert "differ from the reference" in user.content
    assert "INCORRECT_NUMERICAL" in REPAIRABLE_STATUSES and "PASSED" not in REPAIRABLE_STATUSES


def test_the_summarizer_sees_the_plan_both_profiles_and_the_noise(
    silu_task: Task, silu_baseline: Solution
) -> None:
    slow = _measured()
    fast_stats = slow.latency_stats.model_copy(  # type: ignore[union-attr]
        update={"median_ms": 0.2, "ci_low_ms": 0.19, "ci_high_ms": 0.21, "contended": True}
    )
    fast = slow.model_copy(
        update={
            "performance": Performance(latency_ms=0.2, reference_latency_ms=0.54,
                                       speedup_factor=2.7),
            "latency_stats": fast_stats,
            "hardware_counters": {"dma_stall_pct": 5.0},
        }
    )  # fmt: skip
    _, user = summarizer_messages(
        "cpu", silu_task, silu_baseline, silu_baseline, 2.06, interval=(1.9, 2.2),
        plan="Fuse exp and divide in place.", slow_profile=slow, fast_profile=fast,
    )  # fmt: skip
    text = user.content
    assert "Applied to the slow kernel, it produced the fast one:\nFuse exp" in text
    assert "Profile of the slow kernel:\nstatus: PASSED\nlatency: 0.412 ms" in text
    assert "Profile of the fast kernel:\nstatus: PASSED\nlatency: 0.200 ms" in text
    assert "dma_stall_pct: 5" in text and "timed_total_ms" not in text
    assert "Speedup of the fast kernel over the slow one: 2.06x [1.90, 2.20] (95% CI)" in text
    assert "Slow kernel's median latency: 0.412 ms [0.405, 0.419] (95% CI), +/-1.7%" in text
    assert "over 60 timed runs" in text and "the host was busy" in text
    _, negative = summarizer_messages(
        "gpu", silu_task, silu_baseline, silu_baseline, 1.3, plan="Unroll.", positive=False
    )
    assert "it produced the slow one (the plan made things worse" in negative.content
    assert "(no interval known)" in negative.content and "(not profiled)" in negative.content


def test_the_planner_sees_how_far_the_kernel_is_from_its_roofline(
    silu_task: Task, silu_baseline: Solution
) -> None:
    measured = _measured()
    measured.hardware_counters.update(
        {"roofline_pct_of_peak": 9.8, "memory_bound": 1.0, "gbytes_per_s": 2.1}
    )
    _, user = planner_messages("cpu", silu_task, silu_baseline, measured, [], random.Random(0))
    assert "roofline: 9.8% of the roofline (memory-bound)" in user.content
    # Where the backend says whose peak it is (cpu), the planner is told which peak.
    measured.hardware_counters.update(
        {"peak_cores": 1.0, "peak_matmul": 0.0, "peak_gflops": 19.8, "peak_gbytes_per_s": 21.4}
    )
    _, user = planner_messages("cpu", silu_task, silu_baseline, measured, [], random.Random(0))
    assert (
        "roofline: 9.8% of the roofline (memory-bound, against the 1-core memory peak of 21.4 GB/s)"
    ) in user.content


# --------------------------------------------------------------------------- profile block


def _with_roofline_and_breakdown() -> Evaluation:
    measured = _measured()
    measured.hardware_counters.update(
        {
            "roofline_pct_of_peak": 12.5,
            "flops_pct_of_peak": 3.25,
            "bandwidth_pct_of_peak": 12.5,
            "memory_bound": 1.0,
            "gbytes_per_s": 2.1,
            "peak_cores": 1.0,
            "peak_matmul": 0.0,
            "peak_gflops": 19.8,
            "peak_gbytes_per_s": 21.4,
            "l2_rel_error": 1.234567e-7,
            "sbuf_reads": 123456.789,
            "psum_spills": 0.987654321,
        }
    )
    parts = [("np.exp", 0.2), ("np.divide", 0.1), ("L7: out += 1", 0.05)]
    parts += [(f"np.op{i}", 0.001 * (10 - i)) for i in range(9)]
    measured.breakdown = [
        BreakdownEntry(what=what, ms=ms, share=ms / 0.412, calls=4) for what, ms in parts
    ]
    return measured


def test_the_profile_block_puts_the_decision_figures_first_in_a_fixed_order(
    silu_task: Task, silu_baseline: Solution
) -> None:
    texts = [
        planner_messages(
            "cpu",
            silu_task,
            silu_baseline,
            _with_roofline_and_breakdown(),
            [],
            random.Random(seed),
        )[1].content
        for seed in range(6)
    ]
    block = _section_of(texts[0], "Profile of the current kernel")
    lines = block.splitlines()
    assert lines[0] == "status: PASSED"
    assert lines[1] == "latency: 0.412 ms [0.405, 0.419] (95% CI)"
    assert lines[2] == (
        "reference latency: 0.54 ms; this kernel: 1.31x [1.27, 1.35] over the reference"
    )
    assert lines[3] == "speedup: 1.09x [1.05, 1.13] over the parent (faster)"
    # The percent of peak once, with the ideal time in ms (0.412 ms * 12.5%).
    assert lines[4].startswith("roofline: 12.5% of the roofline (memory-bound, against the 1-core")
    assert "; ideal (roofline) time 0.0515 ms per call" in lines[4]
    assert "(compute at 3.25% of its peak)" in lines[4]
    assert block.count("12.5") == 1 and "pct_of_peak" not in block and "peak_g" not in block
    assert lines[5].startswith("where one call's time goes")
    # The largest eight parts, fenced (their names quote the kernel's lines), then the rest.
    assert "- np.exp: 0.2 ms (49%, 4 calls)" in block
    assert "- L7: out += 1: 0.05 ms (12%, 4 calls)" in block
    assert "- 4 smaller part(s): 0.014 ms in all" in block
    assert block.index("UNTRUSTED") < block.index("np.exp") < block.index("np.divide")
    assert "accuracy: l2_rel_error 1.23e-07" in block
    # Only the leftover counters are shuffled, each to three significant digits.
    assert "sbuf_reads: 1.23e+05" in block and "psum_spills: 0.988" in block
    decisions = [re.sub("UNTRUSTED-[0-9a-f]+", "U", t.split("accuracy:")[0]) for t in texts]
    assert len(set(decisions)) == 1
    tails = [
        [line for line in t.splitlines() if line.startswith(("sbuf_reads", "psum_spills"))]
        for t in texts
    ]
    assert len({tuple(tail) for tail in tails}) == 2


def _section_of(content: str, title: str) -> str:
    return content.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0].strip()


def test_the_planner_sees_the_round_and_is_told_the_executor_sees_only_the_plan(
    silu_task: Task, silu_baseline: Solution
) -> None:
    for family in FAMILIES:
        system, user = planner_messages(
            family,
            silu_task,
            silu_baseline,
            None,
            [],
            random.Random(0),
            round_plans=["tile\nby 128 rows", "x" * 700],
        )
        round_text = _section_of(
            user.content, "Plans given to the other beam kernels this iteration"
        )
        assert round_text.startswith("1. tile by 128 rows\n2. xxx")
        assert len(round_text.splitlines()[1]) < 620  # cut
        assert "sees the task" in system.content and "nothing else" in system.content
        assert "not the lessons" in system.content
    _, user = planner_messages("cpu", silu_task, silu_baseline, None, [], random.Random(0))
    assert "(not available for this call)" in _section_of(
        user.content, "Plans given to the other beam kernels this iteration"
    )


def test_the_summarizer_sees_the_memory_numbered_and_the_caps(
    silu_task: Task, silu_baseline: Solution
) -> None:
    memory = [
        ExperienceRecord(id="e1", definition_name="silu", title="fuse the exp", strategy="s1"),
        ExperienceRecord(id="e2", definition_name="silu", title="stay in float32", strategy="s2"),
    ]
    for family in FAMILIES:
        system, user = summarizer_messages(
            family, silu_task, silu_baseline, silu_baseline, 2.0, memory=memory
        )
        shown = _section_of(user.content, "Lessons already in memory")
        assert shown.startswith("1. fuse the exp") and "2. stay in float32" in shown
        assert '"refines"' in system.content and '"already_known"' in system.content
        assert "at most 100 characters" in system.content
        assert "at most 600 characters" in system.content
    assert len(summarizer_memory([memory[0]] * 40)) == SUMMARIZER_MEMORY_ITEMS


def test_the_hardware_block_keeps_what_decides_speed_of_the_isa_list() -> None:
    flags = [
        "sse2",
        "ssse3",
        "fma",
        "sse4_1",
        "sse4_2",
        "avx",
        "f16c",
        "avx2",
        "bmi2",
        "avx512f",
        "avx512dq",
        "avx512ifma",
        "avx512cd",
        "avx512bw",
        "avx512vl",
        "avx512_bf16",
        "avx512vbmi",
        "avx512_vbmi2",
        "avx512_vnni",
        "avx512_bitalg",
        "avx512_vpopcntdq",
    ]
    assert vector_summary(flags) == (
        "AVX-512 (512-bit vectors, 16 float32 per instruction, FMA, BF16, VNNI)"
    )
    assert vector_summary(["sse2", "avx", "avx2", "fma"]) == (
        "AVX2 (256-bit vectors, 8 float32 per instruction, FMA)"
    )
    assert (
        vector_summary(["fp", "asimd"]) == "NEON (128-bit vectors, 4 float32 per instruction, FMA)"
    )
    assert vector_summary(["bmi2"]) is None


def test_a_device_profile_shows_its_percent_of_peak_once(
    silu_task: Task, silu_baseline: Solution
) -> None:
    from accelopt_mcp.backends.roofline import peak_counters, percent_of_peak
    from accelopt_mcp.models import Roofline

    report = percent_of_peak(
        0.5, Roofline(flops=4e9, bytes_moved=1e8, compute_unit="matmul_fp32"), "trn1"
    )
    measured = _measured()
    measured.hardware_counters = {**peak_counters(report), "dma_active_pct": 41.0}
    _, user = planner_messages("nki", silu_task, silu_baseline, measured, [], random.Random(0))
    block = _section_of(user.content, "Profile of the current kernel")
    percent = f"{100 * float(report['roofline_fraction']):.3g}%"
    assert block.count(percent) == 1, block
    assert "fraction" not in block and "achieved" not in block
    assert "dma_active_pct: 41" in block

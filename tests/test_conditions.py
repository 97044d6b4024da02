"""measuring_conditions_of: what a measurement was taken under, read from the evaluation the
cpu backend writes (its `timing:` line, written by the backend's own function here, and its
`measurement` figures), never from what the kernel printed."""

from __future__ import annotations

from accelopt_mcp.backends.cpu_result import timing_lines
from accelopt_mcp.models import (
    BenchmarkConfig,
    Correctness,
    Environment,
    Evaluation,
    EvaluationStatus,
    MeasuringConditions,
    Performance,
    measuring_conditions_of,
)

ANALYSIS = {"widest": 0.01, "answered": True, "blocks": 3}
CONTENTION = {"foreign_share": 0.012, "load_before": 0.2, "load_after": 0.34}


def evaluation(
    log: str, measurement: dict[str, float] | None = None, cores: str | None = None
) -> Evaluation:
    libs = {"numpy": "2.0", **({"cores_per_evaluation": cores} if cores else {})}
    return Evaluation(
        status=EvaluationStatus.PASSED,
        environment=Environment(hardware="cpu/x86_64", libs=libs),
        timestamp="2026-01-01T00:00:00Z",
        log=log,
        correctness=Correctness(),
        performance=Performance(latency_ms=1.0, reference_latency_ms=2.0, speedup_factor=2.0),
        measurement=measurement or {},
    )


def timing_log(cpus: set[int] | None) -> str:
    lines = timing_lines(BenchmarkConfig(), ANALYSIS, CONTENTION, [], cpus)
    return "\n".join(["correct on 5 seeds; median 1.0000 ms", *lines, "roofline: none"])


def test_a_pinned_evaluation_names_its_cores_threads_and_load() -> None:
    found = measuring_conditions_of(
        evaluation(timing_log({3}), {"host_load": 0.34, "foreign_share": 0.012}),
        evaluations_at_once=2,
    )
    assert found == MeasuringConditions(
        cores=1, cpus=[3], blas_threads=1, pinned=True, host_load=0.34, foreign_share=0.012,
        evaluations_at_once=2,
    )  # fmt: skip
    assert found.text() == (
        "1 core (core 3), 1 BLAS thread, host load 0.3, 1.2% of the timed windows to other "
        "programs, 2 evaluations at once"
    )
    two = measuring_conditions_of(evaluation(timing_log({0, 5})))
    assert two is not None
    assert (two.cores, two.cpus, two.blas_threads) == (2, [0, 5], 2)
    # Without the measurement figures (older rows), the line's own numbers, as rounded there.
    assert (two.host_load, two.foreign_share) == (0.3, 0.012)
    assert two.text().startswith("2 cores (cores 0,5), 2 BLAS threads, host load 0.3")


def test_an_unpinned_evaluation_says_the_library_picks_the_threads() -> None:
    found = measuring_conditions_of(evaluation(timing_log(None)))
    assert found is not None and found.pinned is False
    assert found.cpus is None and found.blas_threads is None and found.cores is not None
    assert f"{found.cores} core" in found.text()
    assert "BLAS threads at the library's default" in found.text()


def test_what_the_kernel_printed_is_not_read_and_nothing_is_guessed() -> None:
    forged = (
        "correct on 5 seeds\nstdout (tail):\n"
        "timing: pinned to cores 0,1,2,3 with 4 BLAS/OpenMP threads; host load 0.0 -> 0.0"
    )
    found = measuring_conditions_of(evaluation(forged, cores="1"))
    assert found == MeasuringConditions(cores=1)
    harness_first = timing_log({2}) + "\n" + forged
    assert measuring_conditions_of(evaluation(harness_first)).cpus == [2]  # type: ignore[union-attr]
    assert measuring_conditions_of(evaluation("nothing recorded")) is None
    assert measuring_conditions_of(None) is None
    assert MeasuringConditions().text() == "(not recorded)"
    # A failed evaluation records no timing; the caller's count still stands.
    failed = Evaluation(
        status=EvaluationStatus.RUNTIME_ERROR,
        environment=Environment(hardware="cpu/x86_64"),
        timestamp="2026-01-01T00:00:00Z",
        log="boom",
    )
    assert measuring_conditions_of(failed, evaluations_at_once=4) == MeasuringConditions(
        evaluations_at_once=4
    )

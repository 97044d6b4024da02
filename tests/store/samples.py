"""Small, valid records for tests: every store's tests share them, and the backends' and
engine's tests build their kernels and evaluations with them."""

from __future__ import annotations

import re
import uuid
from typing import Any

from accelopt_mcp.models import (
    BuildSpec,
    Correctness,
    Definition,
    Environment,
    Evaluation,
    EvaluationStatus,
    LatencyStats,
    LlmCallIn,
    LlmMessage,
    Performance,
    Solution,
    SourceFile,
    Workload,
)

REFERENCE = "import numpy as np\n\ndef run(x):\n    return np.exp(x)\n"


def make_definition(name: str = "exp_f32", *, description: str | None = None) -> Definition:
    return Definition.model_validate(
        {
            "name": name,
            "op_type": "elementwise",
            "axes": {"n": {"type": "var"}, "d": {"type": "const", "value": 128}},
            "inputs": {"x": {"shape": ["n", "d"], "dtype": "float32"}},
            "outputs": {"y": {"shape": ["n", "d"], "dtype": "float32"}},
            "reference": REFERENCE,
            "tags": ["test"],
            "description": description,
        }
    )


def make_workload(def_name: str = "exp_f32", *, n: int = 64, uuid_: str | None = None) -> Workload:
    del def_name  # a workload names its definition only when stored
    return Workload(
        axes={"n": n}, inputs={"x": {"type": "random"}}, uuid=uuid_ or str(uuid.uuid4())
    )


def make_solution(
    def_name: str = "exp_f32",
    source: str = "def run(x):\n    return x\n",
    *,
    name: str | None = None,
    author: str = "tester",
    language: str = "python",
) -> Solution:
    return Solution(
        name=name or f"{def_name}_{uuid.uuid4().hex[:8]}",
        definition=def_name,
        author=author,
        spec=BuildSpec(language=language, target_hardware=["cpu"], entry_point="main.py::run"),
        sources=[SourceFile(path="main.py", content=source)],
        description="a test kernel",
    )


def one_file_solution(
    source: str,
    definition: str,
    *,
    name: str = "candidate",
    language: str = "python",
    hardware: tuple[str, ...] = ("cpu",),
    entry_point: str = "main.py::run",
    dps: bool = False,
) -> Solution:
    """A candidate kernel of one source file, the file and its function named by
    `entry_point`, for a backend of `hardware` to evaluate."""
    return Solution(
        name=name,
        definition=definition,
        author="test",
        spec=BuildSpec(
            language=language,
            target_hardware=list(hardware),
            entry_point=entry_point,
            destination_passing_style=dps,
        ),
        sources=[SourceFile(path=entry_point.partition("::")[0], content=source)],
    )


def passed_evaluation(
    latency: float,
    *,
    ci: tuple[float, float] | None = None,
    samples: tuple[float, float] | None = None,
    reference_ms: float = 2.0,
    speedup: float | None = None,
    speedup_ci: tuple[float, float] | None = None,
    runs: int = 20,
    relative_spread: float = 0.01,
    hardware: str = "cpu/x86_64",
    timestamp: str = "2026-01-01T00:00:00Z",
    correctness: Correctness | None = None,
    stats: dict[str, Any] | None = None,
    **fields: Any,
) -> Evaluation:
    """A PASSED evaluation with a median of `latency` ms: `ci` the median's interval and
    `samples` the (min, max) of the timed runs (`latency` both, unless given); a speedup of
    `reference_ms / latency` unless `speedup` says, `speedup_ci` its interval. `stats` adds or
    replaces latency-statistics fields; `fields` are any other Evaluation field (flags,
    comparisons, log, counters) or one that replaces the default here (an environment).
    A field without a value is left unset, as a record read back from its JSON would have it."""
    low, high = samples or (latency, latency)
    performance: dict[str, Any] = {
        "latency_ms": latency,
        "reference_latency_ms": reference_ms,
        "speedup_factor": reference_ms / latency if speedup is None else speedup,
    }
    if speedup_ci is not None:
        performance.update(speedup_ci_low=speedup_ci[0], speedup_ci_high=speedup_ci[1])
    latency_stats: dict[str, Any] = {
        "mean_ms": latency,
        "median_ms": latency,
        "min_ms": low,
        "max_ms": high,
        "relative_spread": relative_spread,
        "runs": runs,
    }
    if ci is not None:
        latency_stats.update(ci_low_ms=ci[0], ci_high_ms=ci[1])
    record: dict[str, Any] = {
        "status": EvaluationStatus.PASSED,
        "environment": Environment(hardware=hardware),
        "timestamp": timestamp,
        "correctness": correctness or Correctness(),
        "performance": Performance(**performance),
        "latency_stats": LatencyStats(**latency_stats | (stats or {})),
    }
    return Evaluation(**record | fields)


def make_evaluation(
    status: str | EvaluationStatus = EvaluationStatus.PASSED,
    latency_ms: float = 1.0,
    hardware: str = "cpu/x86_64",
    *,
    reference_latency_ms: float = 2.0,
) -> Evaluation:
    status = EvaluationStatus(status)
    environment = Environment(hardware=hardware, libs={"numpy": "2.0"})
    correctness = Correctness(max_relative_error=1e-7, max_absolute_error=1e-8)
    if status == EvaluationStatus.PASSED:
        return passed_evaluation(
            latency_ms,
            reference_ms=reference_latency_ms,
            runs=10,
            relative_spread=0.0,
            correctness=correctness,
            environment=environment,
            log="",
            hardware_counters={"cycles": 1000.0},
        )
    return Evaluation(
        status=status,
        environment=environment,
        timestamp="2026-01-01T00:00:00Z",
        log="boom",
        correctness=correctness if status == EvaluationStatus.INCORRECT_NUMERICAL else None,
        performance=None,
        latency_stats=None,
        hardware_counters={},
    )


def make_llm_call(
    call_id: str | None = None,
    *,
    system: str | None = None,
    prompt: str | None = None,
    **fields: Any,
) -> LlmCallIn:
    """A ledger row: run-1's planner on model "m" unless `fields` say otherwise; its messages
    the `system` message and the user's `prompt`, those given."""
    said = (("system", system), ("user", prompt))
    messages = [LlmMessage(role=role, content=text) for role, text in said if text is not None]
    record: dict[str, Any] = {"run_id": "run-1", "role": "planner", "model": "m", **fields}
    if call_id is not None:
        record["id"] = call_id
    if messages:
        record["messages"] = messages
    return LlmCallIn.model_validate(record)


def without_row_level_security(schema: str) -> str:
    """A schema_v2.txt text without its row level security section (which names every table
    and function), for tests that rebuild a schema from before it."""
    old = re.sub(r"\n-- -+ row level security\n.*?(?=\nCOMMIT;\n)", "\n", schema, flags=re.S)
    assert "ROW LEVEL SECURITY" not in old and "COMMIT;" in old
    return old

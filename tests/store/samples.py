"""Small, valid records for store tests (shared by every store's tests)."""

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


def make_evaluation(
    status: str | EvaluationStatus = EvaluationStatus.PASSED,
    latency_ms: float = 1.0,
    hardware: str = "cpu/x86_64",
    *,
    reference_latency_ms: float = 2.0,
) -> Evaluation:
    status = EvaluationStatus(status)
    correctness = performance = stats = None
    if status in (EvaluationStatus.PASSED, EvaluationStatus.INCORRECT_NUMERICAL):
        correctness = Correctness(max_relative_error=1e-7, max_absolute_error=1e-8)
    if status == EvaluationStatus.PASSED:
        performance = Performance(
            latency_ms=latency_ms,
            reference_latency_ms=reference_latency_ms,
            speedup_factor=reference_latency_ms / latency_ms,
        )
        stats = LatencyStats(
            mean_ms=latency_ms,
            median_ms=latency_ms,
            min_ms=latency_ms,
            max_ms=latency_ms,
            relative_spread=0.0,
            runs=10,
        )
    return Evaluation(
        status=status,
        environment=Environment(hardware=hardware, libs={"numpy": "2.0"}),
        timestamp="2026-01-01T00:00:00Z",
        log="" if status == EvaluationStatus.PASSED else "boom",
        correctness=correctness,
        performance=performance,
        latency_stats=stats,
        hardware_counters={"cycles": 1000.0} if status == EvaluationStatus.PASSED else {},
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

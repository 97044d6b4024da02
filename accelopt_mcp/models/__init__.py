"""The records layer: every kind of record the project passes around, one kind per module.

Most follow the FlashInfer-Trace layout of flashinfer-bench 0.1.2 (Definition, Workload,
Solution, Evaluation, Trace), re-declared here so the core does not import torch or CUDA: files
written from these models load in flashinfer-bench and theirs load here. Two additions that
flashinfer-bench ignores on load (pydantic drops unknown fields there): the `nki` language, and
on Evaluation the latency statistics and hardware counters that the planner reads. Ours alone:
Task and Roofline (what a backend is asked to run), BenchmarkConfig (how it checks and times),
MeasuringConditions (what a measurement was taken under), LlmCallIn (a row of the LLM ledger,
with its prompt and reply).

Records import nothing of the project but the foundations (`accelopt_mcp.pysource`,
`accelopt_mcp.stats`); import them from here (`from accelopt_mcp.models import Solution`), not
from the submodules.
"""

from __future__ import annotations

from accelopt_mcp.models.base import NonEmptyString, NonNegativeInt, Record, Tagged, from_record
from accelopt_mcp.models.benchmark import BenchmarkConfig
from accelopt_mcp.models.comparison import ComparedKernel, KernelComparison, PairVerdict
from accelopt_mcp.models.conditions import MeasuringConditions, measuring_conditions_of
from accelopt_mcp.models.definition import Axis, AxisConst, AxisVar, Definition, DType, TensorSpec
from accelopt_mcp.models.evaluation import (
    BreakdownEntry,
    Comparison,
    Correctness,
    Environment,
    Evaluation,
    EvaluationStatus,
    LatencyStats,
    Performance,
)
from accelopt_mcp.models.llm_call import LLM_CALL_STATUSES, LlmCallIn, LlmCallStatus, LlmMessage
from accelopt_mcp.models.pooling import pool_evaluations
from accelopt_mcp.models.solution import Binding, BuildSpec, Language, Solution, SourceFile
from accelopt_mcp.models.task import ROOFLINE_TAG, Roofline, Task
from accelopt_mcp.models.trace import Trace
from accelopt_mcp.models.workload import (
    InputSpec,
    RandomInput,
    SafetensorsInput,
    ScalarInput,
    Workload,
)

__all__ = [
    "LLM_CALL_STATUSES",
    "ROOFLINE_TAG",
    "Axis",
    "AxisConst",
    "AxisVar",
    "BenchmarkConfig",
    "Binding",
    "BreakdownEntry",
    "BuildSpec",
    "ComparedKernel",
    "Comparison",
    "Correctness",
    "DType",
    "Definition",
    "Environment",
    "Evaluation",
    "EvaluationStatus",
    "InputSpec",
    "KernelComparison",
    "Language",
    "LatencyStats",
    "LlmCallIn",
    "LlmCallStatus",
    "LlmMessage",
    "MeasuringConditions",
    "NonEmptyString",
    "NonNegativeInt",
    "PairVerdict",
    "Performance",
    "RandomInput",
    "Record",
    "Roofline",
    "SafetensorsInput",
    "ScalarInput",
    "Solution",
    "SourceFile",
    "Tagged",
    "Task",
    "TensorSpec",
    "Trace",
    "Workload",
    "from_record",
    "measuring_conditions_of",
    "pool_evaluations",
]

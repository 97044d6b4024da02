"""Records of every kind that takes an id prefix, for the tests that check every front end
takes one: one record per kind whose 8-character prefix is unique, and two per kind whose ids
share their first 8 characters (TWIN), so that prefix names neither."""

from __future__ import annotations

import json
import uuid

import pytest

from accelopt_mcp import transfer
from accelopt_mcp.linking import store_kernel
from accelopt_mcp.store import _rows
from accelopt_mcp.store.base import ExperienceIn, KernelStore, LlmCallIn, RunRecord, SuiteRecord
from accelopt_mcp.suites.runner import SuiteSpec
from accelopt_mcp.tasks.kernels import solution_from_source
from tests.mcp.conftest import SILU_FAST, TRACE_DIR

TWIN = "abcdef12"
"""The first 8 characters of two records of every kind."""
DEF = "silu_n1024"
FAST_SOURCE = json.loads(SILU_FAST.read_text())["sources"][0]["content"]
KINDS = ("solution", "run", "experience", "call", "suite")

Records = dict[str, str]
"""kind -> a whole id (and "workload" -> a workload uuid of DEF)."""


class TwinIds:
    """Stands in for the uuid module where the stores make new ids: every id begins TWIN."""

    def __init__(self) -> None:
        self.count = 0

    def uuid4(self) -> uuid.UUID:
        self.count += 1
        return uuid.UUID(f"{TWIN}-0000-4000-8000-{self.count:012d}")


def _one_of_each(store: KernelStore, tag: str, run: str) -> Records:
    source = solution_from_source(f"# {tag}\n{FAST_SOURCE}", DEF, name=f"k-{tag}")
    solution = store_kernel(store, source).solution_id
    store.create_run(RunRecord(id=run, definition_name=DEF))
    experience = store.add_experience(
        ExperienceIn(definition_name=DEF, title=f"lesson {tag}", strategy="s", run_id=run)
    )
    call = store.add_llm_call(LlmCallIn(run_id=run, role="planner", model="m"))
    spec = SuiteSpec(settings={}, cases=[]).model_dump(mode="json")
    suite = run  # another table: the same text may be a run's id and a suite's
    store.put_suite(
        SuiteRecord(id=suite, name="s", source="x", backend="cpu", status="completed", spec=spec)
    )
    return {
        "solution": solution,
        "run": run,
        "experience": experience,
        "call": call,
        "suite": suite,
    }


def stored_records(
    store: KernelStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[Records, list[Records]]:
    """The example set (definitions, workloads, kernels) imported, then one record of every
    kind with a unique prefix, and two of every kind whose ids begin TWIN."""
    transfer.import_directory(store, TRACE_DIR)
    unique = _one_of_each(store, "lone", str(uuid.uuid4()))
    unique["workload"] = store.list_workloads(DEF)[0].uuid
    with monkeypatch.context() as patched:
        patched.setattr(_rows, "uuid", TwinIds())
        pair = [_one_of_each(store, tag, f"{TWIN}-000{tag}-4000-8000-000000000000") for tag in "12"]
    for kind in KINDS:
        assert pair[0][kind][:8] == pair[1][kind][:8] == TWIN, (kind, pair)
        assert unique[kind][:8] != TWIN, (kind, unique)
    return unique, pair

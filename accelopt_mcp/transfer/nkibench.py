"""Loading an NKIBench-layout directory (summary.json, reference/, kernels/) into a store."""

from __future__ import annotations

from pathlib import Path

from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.tasks.nkibench import import_nkibench_dir
from accelopt_mcp.transfer.traceset import TransferCounts


def import_nkibench(store: KernelStore, root: Path) -> TransferCounts:
    """Every case of an NKIBench-layout directory (summary.json) as definition, workload and
    baseline solution. Idempotent."""
    counts = TransferCounts()
    for entry in import_nkibench_dir(Path(root)):
        store.upsert_definition(entry.definition)
        counts.definitions += 1
        store.upsert_workload(entry.definition.name, entry.workload)
        counts.workloads += 1
        if entry.solution is not None:
            store.upsert_solution(entry.solution)
            counts.solutions += 1
    return counts

"""compare_kernels through the SDK's in-process client, on the real cpu backend: the fast
softmax ranks above the slow one with a 'faster' verdict, a kernel against an identical copy
of itself is not called faster, and bad input comes back as a tool error saying what to do."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.mcp.conftest import NKIBENCH_DIR
from tests.mcp.helpers import fails, ok

pytestmark = pytest.mark.anyio


@pytest.fixture
def client(admin_client: Client) -> Client:
    """These tests store records by hand (insert_*, import_directory): the admin tools."""
    return admin_client


TASK = NKIBENCH_DIR / "reference" / "softmax_M256_N1024_numpy_0.py"
SLOW = NKIBENCH_DIR / "kernels" / "softmax_M256_N1024_0.py"
FAST = NKIBENCH_DIR / "kernels" / "softmax_M256_N1024_fast.py"
# Small enough to keep the test short on a 2-core host, large enough for a verdict.
QUICK = {"iterations": 5, "max_timing_seconds": 3.0}


def _args(*kernels: dict[str, Any]) -> dict[str, Any]:
    return {"task_path": str(TASK), "kernels": list(kernels), **QUICK}


async def _stored_id(client: Client, name: str) -> str:
    await ok(client, "import_directory", {"path": str(NKIBENCH_DIR), "format": "nkibench"})
    found = await ok(client, "list_solutions", {"definition_name": "softmax_M256_N1024"})
    ids = [s["id"] for s in found["items"] if s["name"] == name]
    assert ids, [s["name"] for s in found["items"]]
    return ids[0]


async def test_the_fast_kernel_ranks_first_and_is_faster(client: Client) -> None:
    # The NKIBench import stores each task's slow kernel (_0.py) as its baseline.
    slow_id = await _stored_id(client, "softmax_M256_N1024_baseline")
    report = await ok(
        client, "compare_kernels", _args({"solution_id": slow_id}, {"kernel_path": str(FAST)})
    )
    assert report["interleaved"] is True and report["backend"] == "cpu"
    first, second = report["kernels"]
    assert (first["label"], first["rank"]) == (FAST.name, 1)
    assert (second["label"], second["rank"]) == (slow_id, 2)
    for row in report["kernels"]:
        assert row["status"] == "PASSED"
        assert row["ci_low_ms"] <= row["median_ms"] <= row["ci_high_ms"]
        high = row["speedup_vs_reference_ci_high"]  # null: no upper bound
        assert row["speedup_vs_reference_ci_low"] <= row["speedup_vs_reference"]
        assert high is None or row["speedup_vs_reference"] <= high
        assert "(95% CI)" in row["summary"] and "over the reference" in row["summary"]
        assert "timed_total_ms" not in str(row)
    [pair] = report["pairs"]
    assert (pair["kernel"], pair["baseline"], pair["verdict"]) == (FAST.name, slow_id, "faster")
    assert 1 < pair["ci_low"] <= pair["speedup_vs_baseline"]
    assert pair["ci_high"] is None or pair["speedup_vs_baseline"] <= pair["ci_high"]
    assert pair["summary"].startswith(f"{FAST.name} is faster than {slow_id}: ")


async def test_a_kernel_against_its_own_copy_is_not_faster(client: Client, tmp_path: Path) -> None:
    copy = tmp_path / "softmax_copy.py"
    shutil.copy(FAST, copy)
    source = FAST.read_text()
    report = await ok(
        client,
        "compare_kernels",
        _args({"kernel_path": str(copy)}, {"kernel_source": source, "label": "original"}),
    )
    assert {k["label"] for k in report["kernels"]} == {"softmax_copy.py", "original"}
    [pair] = report["pairs"]
    # The same code: the interval of its 'speedup' over itself must reach down near 1.
    assert pair["ci_low"] <= 1.05, pair


async def test_bad_input_says_what_to_do(client: Client) -> None:
    one = {"kernel_path": str(FAST)}
    await fails(client, "compare_kernels", _args(one), "takes 2 to 8 kernels, got 1", "at least")
    await fails(client, "compare_kernels", _args(*[one] * 9), "got 9", "at most 8")
    await fails(
        client,
        "compare_kernels",
        _args(one, {"solution_id": "nope"}),
        "kernels[1]: no solution with id 'nope'",
        "list_solutions",
    )
    await fails(
        client,
        "compare_kernels",
        _args(one, {"kernel_path": str(FAST), "solution_id": "x"}),
        "kernels[1]: give exactly one of solution_id, kernel_path and kernel_source",
    )
    await fails(client, "compare_kernels", {**_args(one, one), "backend": "tpu"}, "unknown backend")

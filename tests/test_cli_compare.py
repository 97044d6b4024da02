"""`accelopt compare` as a user runs it (in this process, through tests/cli_inprocess.py), on
the real cpu backend."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from accelopt_mcp.store import open_store
from tests.test_cli import NKIBENCH, accelopt

TASK = NKIBENCH / "reference" / "softmax_M256_N1024_numpy_0.py"
SLOW = NKIBENCH / "kernels" / "softmax_M256_N1024_0.py"
FAST = NKIBENCH / "kernels" / "softmax_M256_N1024_fast.py"
QUICK = ["--iterations", "5", "--max-timing", "3"]


def test_compare_ranks_and_gives_verdicts() -> None:
    text = accelopt("compare", str(SLOW), str(FAST), "--task", str(TASK), *QUICK)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "timed in the same interleaved rounds" in lines[0] and "(95% CI)" in lines[0]
    rows = [line.split() for line in lines if line.strip().startswith(("1 ", "2 "))]
    assert [row[1] for row in rows] == [FAST.name, SLOW.name]  # ranked, fastest first
    for row in rows:
        assert row[2] == "PASSED" and row[4] == "ms" and row[5].startswith("[")
    assert text.stdout.count("over the reference") == 2
    assert f"{FAST.name} is faster than {SLOW.name}: " in text.stdout
    for hidden in ("timed_total_ms", "harness_overhead_us", "calls_per_sample"):
        assert hidden not in text.stdout


def test_a_stored_solution_is_named_by_its_id(tmp_path: Path) -> None:
    db = str(tmp_path / "kernels.db")
    assert accelopt("import", "nkibench", str(NKIBENCH), "--store", db).returncode == 0
    store = open_store(db)
    try:
        # The NKIBench import stores each task's slow kernel (_0.py) as its baseline.
        [slow] = store.list_solutions(definition_name="softmax_M256_N1024")
    finally:
        store.close()
    result = accelopt(
        "compare", slow.id, str(FAST), "--task", str(TASK), "--store", db, *QUICK, "--json"
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert [k["label"] for k in found["kernels"]] == [FAST.name, slow.id]
    assert found["pairs"][0]["verdict"] == "faster"


def test_compare_json_is_the_kernel_comparison(tmp_path: Path) -> None:
    copy = tmp_path / FAST.name  # the same file name twice: labels are kept apart
    shutil.copy(FAST, copy)
    result = accelopt("compare", str(FAST), str(copy), "--task", str(TASK), *QUICK, "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["interleaved"] is True
    labels = {k["label"] for k in found["kernels"]}
    assert labels == {FAST.name, f"{FAST.name}#2"}
    assert sorted(k["rank"] for k in found["kernels"]) == [1, 2]
    [pair] = found["pairs"]
    assert pair["ci_low"] <= 1.05, pair  # a kernel is not much faster than itself
    for kernel in found["kernels"]:
        evaluation = kernel["evaluation"]
        assert evaluation["measurement"] == {}  # the harness's internals stay out
        assert "timed_total_ms" not in evaluation["hardware_counters"]
        stats = evaluation["latency_stats"]
        assert stats["ci_low_ms"] <= stats["median_ms"] <= stats["ci_high_ms"]


def test_a_failing_kernel_ranks_last_with_exit_code_1(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def kernel(x):\n    return x * 2.0\n")
    result = accelopt("compare", str(wrong), str(FAST), "--task", str(TASK), *QUICK, "--json")
    assert result.returncode == 1, result.stderr
    found = json.loads(result.stdout)
    assert [k["label"] for k in found["kernels"]] == [FAST.name, "wrong.py"]
    assert found["kernels"][1]["rank"] is None
    assert found["kernels"][1]["evaluation"]["status"].startswith("INCORRECT")


def test_bad_input_gets_a_clear_error(tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "kernels.db")]
    cases = [
        (["compare", str(FAST), "--task", str(TASK)], "got 1: give at least two"),
        (["compare", *[str(FAST)] * 9, "--task", str(TASK)], "got 9: compare at most 8"),
        (["compare", str(FAST), "nope", "--task", str(TASK), *store], "no stored solution"),
        (["compare", str(FAST), "missing.py", "--task", str(TASK)], "does not exist"),
        (["compare", str(FAST), str(SLOW), "--task", str(TASK), "--backend", "tpu"], "tpu"),
    ]
    for args, message in cases:
        result = accelopt(*args)
        assert result.returncode == 2, (args, result.stdout + result.stderr)
        assert message in " ".join(result.stderr.split()), (args, result.stderr)
        assert "Traceback" not in result.stderr

"""`accelopt suite`: the built-in CPU NKIBench's baseline column, and a whole suite of two
tasks driven by the scripted stand-in LLM, its driver SIGKILLed once and resumed, ending in the
table (JSON, Markdown, PNG) with one run per task."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.suites import builtin_suite
from accelopt_mcp.suites.cases import discover_cases
from tests.bench import quick_bench_fields
from tests.cli_inprocess import run_accelopt
from tests.conftest import home_with_peaks
from tests.engine import kernels
from tests.engine.conftest import KEY, KEY_ENV, build_script, models_config, text, write_preset
from tests.llm_standin.process import StartStandin

ACCELOPT = [sys.executable, "-c", "from accelopt_mcp.cli import main; main()"]
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples/cpu/nkibench"
# Quick timing: the table's figures are what is checked, not their precision; but enough
# samples (two processes of five rounds) that the final comparison has an interval (fewer
# than stats.MIN_SAMPLES give [0, inf], as one busy run did with one process of three).
BENCH = quick_bench_fields(seeds=[0, 1], iterations=5, processes=2, max_measurement_rounds=1)
# The baseline column needs no interval: one process of three rounds per task.
BASELINE_BENCH = quick_bench_fields(seeds=[0], processes=1, max_measurement_rounds=1)


def _two_task_suite(root: Path) -> Path:
    """silu (with an AccelOpt-form roofline added) and rmsnorm, from the examples."""
    shutil.copytree(EXAMPLES, root)
    silu = root / "reference/silu_M512_N1024_numpy_0.py"
    silu.write_text(
        silu.read_text()
        + "\n\ndef roofline():\n"
        + "    return {'matmul_flops': 0, 'vector_flops': 4 * M * N, 'bytes_moved': 8 * M * N}\n"
    )
    summary = json.loads((root / "summary.json").read_text())
    (root / "summary.json").write_text(
        json.dumps({k: v for k, v in summary.items() if k in ("silu", "rmsnorm")})
    )
    return root


def test_the_builtin_suite_baseline_column(tmp_path: Path) -> None:
    preset = tmp_path / "preset.json"
    preset.write_text(json.dumps({"benchmark": BASELINE_BENCH}))
    done = run_accelopt(
        "suite", "run", "--builtin", "cpu-nkibench", "--baseline-only", "--preset", preset,
        "--store", tmp_path / "k.db", "--out", tmp_path / "out", "--json",
        env={"ACCELOPT_HOME": str(home_with_peaks(tmp_path / "home"))},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    names = {c.task for c in discover_cases(builtin_suite("cpu-nkibench"))}
    assert {t["task"] for t in table["tasks"]} == names and len(names) == 14
    for task in table["tasks"]:
        assert task["ended"] == "baseline only", task
        baseline = task["baseline"]
        assert baseline["status"] == "PASSED", task
        assert baseline["latency_ms"] > 0
        assert 0 < baseline["percent_of_peak"] <= 100, task
        assert task["best"] is None and task["run_id"] is None
    means = table["geomean"]
    assert means["cases"] == 14 and 0 < means["baseline_percent_of_peak"] < 100
    assert means["best_percent_of_peak"] is None
    markdown = Path(table["markdown"]).read_text()
    assert "geomean (14 cases)" in markdown and "code version" in markdown
    assert Path(table["chart"]).read_bytes()[:4] == b"\x89PNG"


def _suite_record(db: Path) -> dict[str, Any] | None:
    if not db.exists():
        return None
    with SqliteStore(db) as store:
        suites = store.list_suites(limit=1)
        return suites[0].model_dump(mode="json") if suites else None


def test_a_suite_killed_once_and_resumed_ends_in_the_table(
    start_standin: StartStandin, tmp_path: Path
) -> None:
    # Every executor reply is the fast silu kernel: silu improves, rmsnorm cannot.
    fast = [text(kernels.reply(kernels.FAST))] * 16
    standin = start_standin(build_script(faults=False, executor=fast))
    models = models_config(standin.base_url, tmp_path / "models.json")
    preset = write_preset(
        tmp_path / "preset.json",
        benchmark={**BENCH, "timeout_seconds": 60},
        iterations=1, beam=1, plans=2, attempts=1, topk=2, exp_n=4, workers=1,
    )  # fmt: skip
    root = _two_task_suite(tmp_path / "suite")
    db = tmp_path / "k.db"
    env = {**os.environ, KEY_ENV: KEY, "ACCELOPT_HOME": str(home_with_peaks(tmp_path / "home"))}
    common = ["--store", str(db), "--out", str(tmp_path / "out")]
    driver = subprocess.Popen(
        [*ACCELOPT, "suite", "run", str(root), "--preset", str(preset),
         "--config", str(models), "--skip-llm-check", *common],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        # Killed once the first task's optimization has started (the baselines are done).
        deadline = time.monotonic() + 180
        suite = None
        while time.monotonic() < deadline and driver.poll() is None:
            suite = _suite_record(db)
            if suite and any(c.get("run_id") for c in suite["spec"]["cases"]):
                break
            time.sleep(0.2)
        assert driver.poll() is None, driver.stdout.read() if driver.stdout else ""
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        if driver.poll() is None:
            driver.kill()
    assert suite is not None
    assert all(c["baseline"] for c in suite["spec"]["cases"])

    resumed = subprocess.run(
        [*ACCELOPT, "suite", "resume", suite["id"][:8], *common, "--json"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    table = json.loads(resumed.stdout)
    assert table["status"] == "completed"
    rows = {t["key"]: t for t in table["tasks"]}
    assert set(rows) == {"silu/0", "rmsnorm/0"}
    for row in rows.values():
        assert row["ended"] == "completed", row
        assert row["baseline"]["status"] == "PASSED" and row["best"]["status"] == "PASSED"
        assert 0 < row["baseline"]["percent_of_peak"] <= row["best"]["percent_of_peak"] <= 100
        assert row["speedup"]["beside"] is True and row["speedup"]["speedup"] >= 1.0
        assert row["llm_calls"] > 0 and row["tokens_in"] > 0 and row["wall_s"] > 0
    # The stand-in's kernels are silu kernels: silu gets faster, timed beside its baseline;
    # rmsnorm keeps its baseline as the best.
    silu = rows["silu/0"]
    assert silu["best"]["solution_id"] != silu["baseline"]["solution_id"]
    assert silu["speedup"]["ci_low"] > 1.0
    assert rows["rmsnorm/0"]["best"]["solution_id"] == rows["rmsnorm/0"]["baseline"]["solution_id"]
    assert table["geomean"]["cases"] == 2 and table["geomean"]["speedup"] > 1.0
    # Killed and resumed, each task still has exactly one run.
    with SqliteStore(db) as store:
        for row in rows.values():
            runs = [
                r for r in store.list_runs(limit=50)
                if r.config.get("request", {}).get("suite_case") == f"{table['id']}/{row['key']}"
            ]  # fmt: skip
            assert [r.id for r in runs] == [row["run_id"]]
    markdown = Path(table["markdown"]).read_text()
    assert "| silu/0 |" in markdown and "geomean (2 cases)" in markdown
    assert "models" in markdown and "planner: planner" in markdown

    shown = run_accelopt("suite", "show", table["id"][:8], "--store", db)
    assert shown.returncode == 0 and "silu/0" in shown.stdout and "geomean" in shown.stdout

"""Parsing neuron-profile's summary JSON, and running the stand-in neuron-profile executable."""

import json
from pathlib import Path

import pytest

from accelopt_mcp.backends.neuron_profile import (
    NeuronProfileError,
    parse_summary_json,
    run_neuron_profile,
)

STANDIN_PROFILE = Path(__file__).parent / "standins" / "bin" / "neuron-profile"

NODE = {
    "total_time": 2.5e-05,
    "hbm_read_bytes": 524288,
    "hbm_write_bytes": 524288,
    "spill_save_bytes": 64,
    "spill_reload_bytes": 32,
    "vector_engine_active_time_percent": 0.41,
    "mm_arithmetic_intensity": 0.5,
    "event_count": 9,
    "profile_info": {"ntff_filename": "x.ntff"},
    "hfu_estimated_percent": None,
}


def test_node_keyed_summary_gives_latency_in_ms_and_planner_counters() -> None:
    summary = parse_summary_json(json.dumps({"n_1234": NODE}))
    assert summary.latency_ms == pytest.approx(0.025)
    assert summary.counters["hbm_read_bytes"] == 524288
    assert summary.counters["spill_bytes"] == 96
    assert summary.counters["vector_engine_active_time_percent"] == 0.41
    # Not a planner counter, not numeric, or null: left out rather than guessed.
    assert "event_count" not in summary.counters
    assert "hfu_estimated_percent" not in summary.counters


def test_flat_summary_and_longest_node_are_accepted() -> None:
    assert parse_summary_json(json.dumps(NODE)).latency_ms == pytest.approx(0.025)
    two = {"a": {**NODE, "total_time": 1e-6}, "b": {**NODE, "total_time": 3e-6}}
    assert parse_summary_json(json.dumps(two)).latency_ms == pytest.approx(0.003)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Segmentation fault in viewer", "did not print JSON"),
        ("", "did not print JSON"),
        (json.dumps({"n_1": {"hbm_read_bytes": 1}}), "no node with a numeric 'total_time'"),
        (json.dumps({"n_1": {"total_time": "fast"}}), "no node with a numeric 'total_time'"),
        (json.dumps({"n_1": {"total_time": 0}}), "expected > 0 s"),
    ],
)
def test_junk_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(NeuronProfileError, match=message):
        parse_summary_json(text)


def _trace_pair(tmp_path: Path) -> tuple[Path, Path]:
    neff, ntff = tmp_path / "k.neff", tmp_path / "k.ntff"
    neff.write_text(json.dumps({"standin": "neff", "kernel": "kernel"}))
    ntff.write_text(json.dumps({"standin": "ntff", "kernel": "kernel", **NODE}))
    return neff, ntff


def test_runs_the_standin_executable(tmp_path: Path) -> None:
    neff, ntff = _trace_pair(tmp_path)
    summary = run_neuron_profile(neff, ntff, executable=str(STANDIN_PROFILE))
    assert summary.latency_ms == pytest.approx(0.025)
    assert summary.counters["hbm_write_bytes"] == 524288


def test_nonzero_exit_missing_executable_and_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    neff, ntff = _trace_pair(tmp_path)
    with pytest.raises(NeuronProfileError, match=r"exited with status 1.*NTFF file not found"):
        run_neuron_profile(neff, tmp_path / "missing.ntff", executable=str(STANDIN_PROFILE))
    with pytest.raises(NeuronProfileError, match="aws-neuronx-tools"):
        run_neuron_profile(neff, ntff, executable=str(tmp_path / "no-such-profiler"))
    # The stand-in reads its fault knobs from the environment it inherits.
    monkeypatch.setenv("STANDIN_NEURON_PROFILE_SLEEP_S", "5")
    with pytest.raises(NeuronProfileError, match=r"did not finish within 0\.5 s"):
        run_neuron_profile(neff, ntff, executable=str(STANDIN_PROFILE), timeout_s=0.5)

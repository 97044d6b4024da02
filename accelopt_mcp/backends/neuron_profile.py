"""Read `neuron-profile view --output-format summary-json`: the latency and the counters the
planner sees.

The summary JSON maps one node id to a flat dict of figures: times in seconds, `*_percent` fields
as fractions (0.23 = 23 %), byte and FLOP counts as plain numbers. Counters keep the profiler's own
key names so the planner's prompt matches what the Neuron docs call them.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel

# The summary counters AccelOpt shows its planner, by their neuron-profile key names.
PLANNER_COUNTERS: tuple[str, ...] = (
    "hbm_read_bytes",
    "hbm_write_bytes",
    "psum_read_bytes",
    "psum_write_bytes",
    "sbuf_read_bytes",
    "sbuf_write_bytes",
    "spill_save_bytes",
    "spill_reload_bytes",
    "hardware_flops",
    "transpose_flops",
    "mm_arithmetic_intensity",
    "hfu_estimated_percent",
    "mfu_estimated_percent",
    "mbu_estimated_percent",
    "tensor_engine_active_time_percent",
    "vector_engine_active_time_percent",
    "scalar_engine_active_time_percent",
    "gpsimd_engine_active_time_percent",
    "dma_active_time_percent",
)


class NeuronProfileError(RuntimeError):
    """neuron-profile failed or printed something that is not a summary; the message says which."""


class ProfileSummary(BaseModel):
    latency_ms: float
    counters: dict[str, float]
    """PLANNER_COUNTERS found in the summary, plus `spill_bytes` (save + reload) when known."""


def parse_summary_json(text: str) -> ProfileSummary:
    """Latency (ms) and counters from the text neuron-profile printed."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NeuronProfileError(
            f"neuron-profile did not print JSON ({exc.msg} at char {exc.pos}); it printed: "
            f"{_excerpt(text)}"
        ) from exc
    node = _summary_node(document)
    if node is None:
        raise NeuronProfileError(
            "neuron-profile's summary has no node with a numeric 'total_time'; it printed: "
            f"{_excerpt(text)}"
        )
    total_time = float(node["total_time"])
    if total_time <= 0:
        raise NeuronProfileError(f"neuron-profile reported total_time={total_time}; expected > 0 s")
    counters = {key: float(node[key]) for key in PLANNER_COUNTERS if _is_number(node.get(key))}
    if "spill_save_bytes" in counters or "spill_reload_bytes" in counters:
        counters["spill_bytes"] = counters.get("spill_save_bytes", 0.0) + counters.get(
            "spill_reload_bytes", 0.0
        )
    return ProfileSummary(latency_ms=total_time * 1e3, counters=counters)


ENGINE_TIMES: tuple[tuple[str, str], ...] = (
    ("tensor_engine_active_time_percent", "tensor engine (matmul) busy"),
    ("vector_engine_active_time_percent", "vector engine busy"),
    ("scalar_engine_active_time_percent", "scalar engine busy"),
    ("gpsimd_engine_active_time_percent", "gpsimd engine busy"),
    ("dma_active_time_percent", "DMA queues busy"),
)
"""The summary's busy fractions a breakdown turns into times, with how an entry names each."""


def engine_breakdown(counters: dict[str, float], latency_ms: float) -> list[dict[str, float | str]]:
    """Where one call's time went on the NeuronCore, from the summary fields AccelOpt reads:
    each engine's (and the DMA queues') busy time in ms (its active fraction of the kernel's
    total_time) and that fraction as the share, largest first; engines run at once, so the
    shares overlap and need not add up to 1. Plain dicts (backends.breakdown validates them);
    [] without a latency or any of the fields."""
    if not math.isfinite(latency_ms) or latency_ms <= 0:
        return []
    entries: list[dict[str, float | str]] = []
    for key, what in ENGINE_TIMES:
        fraction = counters.get(key)
        if fraction is None or not math.isfinite(fraction):
            continue
        fraction = min(1.0, max(0.0, fraction))
        entries.append({"what": what, "ms": fraction * latency_ms, "share": fraction, "calls": 0})
    entries.sort(key=lambda e: -float(e["ms"]))
    return entries


def run_neuron_profile(
    neff: Path, ntff: Path, *, executable: str = "neuron-profile", timeout_s: float = 120.0
) -> ProfileSummary:
    """Run `neuron-profile view` on a NEFF and its trace and parse the summary."""
    argv = [executable, "view", "--output-format", "summary-json", "-n", str(neff), "-s", str(ntff)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError as exc:
        raise NeuronProfileError(
            f"{executable!r} not found: it ships with the Neuron SDK tools "
            "(apt package aws-neuronx-tools; on a Neuron DLAMI it is in /opt/aws/neuron/bin)"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise NeuronProfileError(f"neuron-profile did not finish within {timeout_s:g} s") from exc
    if done.returncode != 0:
        raise NeuronProfileError(
            f"neuron-profile exited with status {done.returncode}: {_excerpt(done.stderr)}"
        )
    return parse_summary_json(done.stdout)


def _summary_node(document: Any) -> dict[str, Any] | None:
    # The summary is {node_id: {...}}; a bare flat dict or a list of nodes is accepted too, since
    # the layout has changed across profiler releases. The node with the longest run wins.
    if isinstance(document, dict) and _is_number(document.get("total_time")):
        return document
    nodes: list[Any] = []
    if isinstance(document, dict):
        nodes = list(document.values())
    elif isinstance(document, list):
        nodes = document
    timed = [n for n in nodes if isinstance(n, dict) and _is_number(n.get("total_time"))]
    return max(timed, key=lambda n: float(n["total_time"]), default=None)


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _excerpt(text: str, limit: int = 300) -> str:
    text = text.strip()
    if not text:
        return "(nothing)"
    return repr(text if len(text) <= limit else text[:limit] + "...")

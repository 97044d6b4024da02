"""Named run presets (also shipped as templates/presets/*.json, kept equal by a test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accelopt_mcp.tasks.flashinfer_format import read_text

PRESETS: dict[str, dict[str, Any]] = {
    # A few minutes on a laptop: enough to see the loop work end to end.
    "quick": {
        "iterations": 3,
        "beam": 2,
        "plans": 3,
        "attempts": 2,
        "topk": 4,
        "exp_n": 8,
        "positive_threshold": 1.04,
        "negative_threshold": 0.87,
    },
    # The AccelOpt paper's NKIBench runs (zhang677/AccelOpt, experiments/full_complete_local):
    # 15 iterations after the first, beam (TOPK_CANDIDATES) 6, 12 plans (BREADTH), 2 attempts
    # (NUM_SAMPLES), TopK 8, ExpN 16, positive pairs above 1.04x, negative ones below 1/1.15x;
    # the N plans are independent planner samples, failed attempts are not repaired, and the
    # memory keeps each iteration's new items plus a random sample of the older ones.
    "paper": {
        "iterations": 16,
        "beam": 6,
        "plans": 12,
        "attempts": 2,
        "topk": 8,
        "exp_n": 16,
        "positive_threshold": 1.04,
        "negative_threshold": round(1 / 1.15, 4),
        "plan_mode": "independent",
        "repair_tries": 0,
        "memory_policy": "sample",
    },
}


def load_preset(name_or_path: str) -> dict[str, Any]:
    """A preset by name, or the OptimizeConfig fields in a JSON file."""
    if name_or_path in PRESETS:
        return dict(PRESETS[name_or_path])
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(
            f"preset {name_or_path!r} is neither a known preset ({', '.join(PRESETS)}) nor a "
            "JSON file of run settings"
        )
    try:
        data = json.loads(read_text(path, "preset"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"preset file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"preset file {path} must hold a JSON object of run settings")
    return data

"""A suite for people and machines: the JSON every front end returns (a `tasks` list with per
task `baseline` and `best`, each holding latency_ms and percent_of_peak, and a `geomean`
object), and the Markdown table and PNG chart written beside each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelopt_mcp.store.base import SuiteRecord
from accelopt_mcp.suites.runner import spec_of
from accelopt_mcp.suites.table import bar_chart, geomeans, markdown, untrusted_reason


def write_outputs(record: SuiteRecord, folder: Path) -> dict[str, str | None]:
    """The Markdown table and the PNG chart, beside each other in `folder`."""
    spec = spec_of(record)
    means = geomeans(spec.cases, baseline_only=spec.baseline_only)
    title = f"{record.name}: percent of peak"
    about = [*spec.about.items(), ("suite", record.id), ("status", record.status)]
    folder.mkdir(parents=True, exist_ok=True)
    md_path = folder / "table.md"
    md_path.write_text(
        markdown(title, spec.cases, means, baseline_only=spec.baseline_only, about=about)
    )
    chart = bar_chart(title, spec.cases, folder / "percent_of_peak.png")
    return {"markdown": str(md_path), "chart": str(chart) if chart else None}


def suite_json(record: SuiteRecord) -> dict[str, Any]:
    """The suite for machines: a `tasks` list (per task `baseline` and `best`, each with
    latency_ms and percent_of_peak) and a `geomean` object."""
    spec = spec_of(record)
    means = geomeans(spec.cases, baseline_only=spec.baseline_only)
    tasks = []
    for case in spec.cases:
        row = case.model_dump(mode="json")
        row["excluded"] = untrusted_reason(case)
        tasks.append(row)
    return {
        "id": record.id,
        "name": record.name,
        "source": record.source,
        "status": record.status,
        "baseline_only": spec.baseline_only,
        "about": spec.about,
        "tasks": tasks,
        "geomean": means.model_dump(mode="json"),
        "created_at": record.created_at.isoformat() if record.created_at else None,
    }

"""The suites page: every benchmark suite, one suite's table (its columns, rows and
geometric means, as `accelopt suite` prints it) and two suites side by side."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.suites.compare import compare_suites
from accelopt_mcp.suites.runner import spec_of
from accelopt_mcp.suites.table import columns, geomean_cells, geomeans, row_cells
from accelopt_mcp.viewer.views.base import View, first_error


class SuitesPage(View):
    suites: list[dict[str, Any]]
    """id, name, source, backend, status, created_at."""
    table: dict[str, Any] | None = None
    """The chosen suite's table: columns, rows, geomeans."""
    comparison: dict[str, Any] | None = None
    """Two suites side by side (suites.compare.compare_suites)."""
    error: str | None = None


def suites_page(store: KernelStore, a: str | None = None, b: str | None = None) -> SuitesPage:
    records = store.list_suites(limit=200)
    page = SuitesPage(
        suites=[
            {
                "id": r.id,
                "name": r.name,
                "source": r.source,
                "backend": r.backend,
                "status": r.status,
                "created_at": r.created_at.isoformat() if r.created_at else None,
            }
            for r in records
        ]
    )
    first = store.get_suite(a) if a else (records[0] if records else None)
    if a and first is None:
        page.error = f"no suite {a!r}"
        return page
    if first is not None:
        try:
            spec = spec_of(first)
            baseline_only = spec.baseline_only
            shown = columns(baseline_only)
            page.table = {
                "suite": first.id,
                "columns": [str(c) for c in shown],
                "rows": [
                    [row_cells(c, baseline_only=baseline_only).get(col, "") for col in shown]
                    for c in spec.cases
                ],
                "geomeans": [
                    geomean_cells(
                        geomeans(spec.cases, baseline_only=baseline_only),
                        baseline_only=baseline_only,
                    ).get(col, "")
                    for col in shown
                ],
            }
        except (ValidationError, ValueError, KeyError) as exc:
            page.error = f"suite {first.id} could not be read: {first_error(exc)}"
    if first is not None and b:
        second = store.get_suite(b)
        if second is None:
            page.error = f"no suite {b!r}"
        else:
            try:
                page.comparison = compare_suites(first, second).model_dump(mode="json")
            except (ValidationError, ValueError, KeyError) as exc:
                page.error = f"the suites could not be compared: {first_error(exc)}"
    return page

"""Writing a finished run's fastest kernel to its output folder."""

from __future__ import annotations

from pathlib import Path

from accelopt_mcp.engine.selection import BeamEntry
from accelopt_mcp.models import SourceFile
from accelopt_mcp.store.base import KernelStore


def write_winner(
    store: KernelStore, best: BeamEntry | None, output_dir: Path | None, run_id: str
) -> str | None:
    """Write <output_dir>/<run>/best_<entry file> and best_solution.json; the entry file's
    path, or None when there is no winner or no folder to write it to."""
    if best is None or output_dir is None:
        return None
    stored = store.get_solution(best.solution_id)
    if stored is None:
        return None
    folder = Path(output_dir) / run_id
    folder.mkdir(parents=True, exist_ok=True)
    source: SourceFile = stored.solution.entry_source
    path = folder / f"best_{Path(source.path).name}"
    path.write_text(source.content, encoding="utf-8")
    (folder / "best_solution.json").write_text(stored.solution.to_json(), encoding="utf-8")
    return str(path)

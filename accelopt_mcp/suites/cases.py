"""The task cases of a benchmark directory: what a suite runs, one optimization per case.

An NKIBench-layout directory (summary.json, reference/, kernels/) gives one case per impl
that names a baseline kernel; a FlashInfer-Trace set (definitions/, solutions/, ...) one per
definition that has a solution, its first solution (by file name) as the baseline. Every path
a summary names must stay inside the directory: a suite file is input from wherever it came.
"""

from __future__ import annotations

import json
from pathlib import Path

from accelopt_mcp.suites.table import SuiteCase
from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.nkibench import read_summary
from accelopt_mcp.transfer import detect_import_format


def discover_cases(root: Path) -> list[SuiteCase]:
    """The cases of `root`, in the order its summary (or file names) gives them; TaskFileError
    with a one-line reason when there are none or a path leaves the directory."""
    root = root.expanduser().resolve()
    kind = detect_import_format(root)
    cases = _nkibench_cases(root) if kind == "nkibench" else _traceset_cases(root)
    if not cases:
        raise TaskFileError(
            f"{str(root)!r} holds no case with a baseline kernel to start from (NKIBench: an "
            "impl with a `kernel`; FlashInfer-Trace: a definition with a solution)"
        )
    keys = [c.key for c in cases]
    if len(set(keys)) != len(keys):
        raise TaskFileError(f"{str(root)!r}: two cases share a name; rename one in the summary")
    return cases


def _inside(root: Path, path: Path, what: str) -> Path:
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise TaskFileError(f"{what} {str(path)!r} lies outside the suite folder {str(root)!r}")
    if not resolved.is_file():
        raise TaskFileError(f"{what} {str(path)!r} does not exist")
    return resolved


def _nkibench_cases(root: Path) -> list[SuiteCase]:
    found = []
    for case in read_summary(root):
        if case.kernel_path is None:
            continue
        key = f"{case.problem}/{case.case_id}"
        found.append(
            SuiteCase(
                key=key,
                task=case.problem,
                task_path=str(_inside(root, case.task_path, f"{key}: task")),
                kernel_path=str(_inside(root, case.kernel_path, f"{key}: kernel")),
            )
        )
    return found


def _traceset_cases(root: Path) -> list[SuiteCase]:
    by_definition: dict[str, Path] = {}
    for path in sorted((root / "solutions").rglob("*.json")):
        try:
            name = json.loads(path.read_text()).get("definition")
        except (OSError, ValueError, AttributeError):
            continue  # not a solution file; the loader says why when it is used
        if isinstance(name, str):
            by_definition.setdefault(name, _inside(root, path, "solution"))
    found = []
    for path in sorted((root / "definitions").rglob("*.json")):
        try:
            name = json.loads(path.read_text()).get("name")
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(name, str) or name not in by_definition:
            continue
        found.append(
            SuiteCase(
                key=name,
                task=name,
                task_path=str(_inside(root, path, "definition")),
                kernel_path=str(by_definition[name]),
            )
        )
    return found

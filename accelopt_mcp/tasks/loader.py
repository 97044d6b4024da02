"""A task from a path, whatever its format (told apart by content, not by where the files sit).
Kernels (solutions) are loaded by accelopt_mcp.tasks.kernels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from accelopt_mcp.models import (
    Definition,
    Task,
    Workload,
)
from accelopt_mcp.tasks.flashinfer_format import (
    TaskFileError,
    is_trace_set,
    load_definition,
    load_trace_set,
    read_text,
)
from accelopt_mcp.tasks.nkibench import default_workload, definition_from_task, is_nkibench_task


def load_task(
    path: Path, *, workload: str | None = None, within: Callable[[Path], bool] | None = None
) -> Task:
    """A task from a definition .json, an NKIBench task .py, or a directory holding one of
    those (a FlashInfer trace-set directory with a single definition counts).

    workload: a workload uuid or its index among the definition's workloads; default the first.
    within: where the task may read (the MCP server's roots): a definition's trace set is looked
    for only in folders that pass it, never above them.
    """
    path = Path(path)
    if path.is_dir():
        return _task_from_dir(path, workload, within)
    if not path.exists():
        raise TaskFileError(f"task path {str(path)!r} does not exist")
    if path.suffix == ".json":
        definition = load_definition(path)
        return Task(definition=definition, workload=_pick(definition, path, workload, within))
    if path.suffix == ".py":
        definition = definition_from_task(path)
        return Task(definition=definition, workload=_pick(definition, None, workload))
    raise TaskFileError(
        f"task path {str(path)!r} is neither a definition .json, an NKIBench task .py nor a "
        "directory holding one"
    )


def _task_from_dir(root: Path, workload: str | None, within: Callable[[Path], bool] | None) -> Task:
    if is_trace_set(root):
        trace_set = load_trace_set(root, within=within)
        if len(trace_set.definitions) != 1:
            raise TaskFileError(
                f"trace set {str(root)!r} holds {len(trace_set.definitions)} definitions "
                f"({sorted(trace_set.definitions)}); give the path of one definitions/*.json"
            )
        ((name, definition),) = trace_set.definitions.items()
        return Task(
            definition=definition,
            workload=_choose(definition, trace_set.workloads.get(name, []), workload),
        )
    candidates = [p for p in sorted(root.glob("*.json")) if _looks_like_definition(p)]
    candidates += [
        p for p in sorted(root.glob("*.py")) if is_nkibench_task(read_text(p, "NKIBench task"))
    ]
    if len(candidates) != 1:
        found = [p.name for p in candidates] or "none"
        hint = ""
        if (root / "summary.json").is_file():
            hint = (
                " (this is an NKIBench directory: give one task file under reference/, or "
                "import the whole directory into the kernel database)"
            )
        raise TaskFileError(
            f"directory {str(root)!r} must hold exactly one definition .json or NKIBench task "
            f".py (found: {found}); give the file's path instead{hint}"
        )
    return load_task(candidates[0], workload=workload, within=within)


def _looks_like_definition(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return '"reference"' in text and '"axes"' in text


def _pick(
    definition: Definition,
    definition_file: Path | None,
    workload: str | None,
    within: Callable[[Path], bool] | None = None,
) -> Workload:
    """Workloads for a definition file: those of its trace set (when it sits in one, at most
    four folders up and, given `within`, no higher than it allows), else the single default
    workload of an all-const definition."""
    known: list[Workload] = []
    if definition_file is not None:
        for parent in list(definition_file.parents)[:4]:
            if within is not None and not within(parent):
                break
            if is_trace_set(parent):
                known = load_trace_set(parent, within=within).workloads.get(definition.name, [])
                break
    return _choose(definition, known, workload)


def _choose(definition: Definition, known: list[Workload], selector: str | None) -> Workload:
    if not known:
        known = [default_workload(definition)]
    if selector is None:
        return known[0]
    for item in known:
        if item.uuid == selector:
            return item
    if selector.isdigit() and int(selector) < len(known):
        return known[int(selector)]
    raise TaskFileError(
        f"definition {definition.name!r} has no workload {selector!r}; it has "
        f"{len(known)}: indices 0..{len(known) - 1}, uuids {[w.uuid for w in known][:10]}"
    )

"""FlashInfer-Bench files: definition JSON, workload JSON/JSONL, solution JSON, trace-set dirs.

A trace-set directory holds `definitions/`, `solutions/`, `workloads/` and `traces/`, each
searched recursively (flashinfer-bench groups files in per-op-type subfolders; we do not rely
on that). Workload files hold one JSON value per line (JSONL) or one JSON value / list; each
value is a bare Workload or a workload Trace `{"definition": ..., "workload": {...}}`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from accelopt_mcp.models import Definition, Solution, Trace, Workload

M = TypeVar("M", bound=BaseModel)


class TaskFileError(ValueError):
    """A task, workload or solution file is missing or malformed; the message names the file."""


def unreadable(path: Path, what: str, exc: OSError | UnicodeDecodeError) -> str:
    """Why a file that cannot be read as UTF-8 text is refused, naming it and what to do (the
    codec's own words name no file, and an OSError would be a traceback)."""
    if isinstance(exc, UnicodeDecodeError):
        byte = exc.object[exc.start]
        return (
            f"{what} file {str(path)!r} is not UTF-8 text (byte 0x{byte:02x} at offset "
            f"{exc.start}); save it as UTF-8"
        )
    return (
        f"{what} file {str(path)!r} cannot be read ({exc.strerror or exc}); check that it is "
        "a readable file"
    )


def read_text(path: Path, what: str) -> str:
    """A task, workload or kernel file's text (UTF-8, as every format here is written);
    TaskFileError naming the file when it cannot be read or is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(unreadable(path, what, exc)) from None


def read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise TaskFileError(f"{what} file {str(path)!r} does not exist")
    try:
        return json.loads(read_text(path, what))
    except json.JSONDecodeError as exc:
        raise TaskFileError(f"{what} file {str(path)!r} is not valid JSON: {exc}") from exc


def _validate(model: type[M], data: Any, path: Path, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # Field and problem only: pydantic's own text quotes the input, which would echo the
        # file's contents (a secret, if the path was pointed at one) back to the caller.
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors(include_input=False, include_url=False)[:10]
        )
        raise TaskFileError(
            f"{what} file {str(path)!r} is not a valid {what}: {problems}"
        ) from None


def load_definition(path: Path) -> Definition:
    return _validate(Definition, read_json(path, "definition"), path, "definition")


def load_solution_json(path: Path) -> Solution:
    return _validate(Solution, read_json(path, "solution"), path, "solution")


def _workload_values(path: Path) -> list[Any]:
    if not path.is_file():
        raise TaskFileError(f"workload file {str(path)!r} does not exist")
    text = read_text(path, "workload")
    if path.suffix == ".jsonl":
        values = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    values.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise TaskFileError(
                        f"workload file {str(path)!r} line {number} is not valid JSON: {exc}"
                    ) from exc
        return values
    data = read_json(path, "workload")
    return data if isinstance(data, list) else [data]


def load_workloads(path: Path, definition: str | None = None) -> list[Workload]:
    """The workloads in a file; trace entries naming another definition are skipped."""
    workloads = []
    for value in _workload_values(path):
        if isinstance(value, dict) and "workload" in value:
            trace = _validate(Trace, value, path, "workload trace")
            if definition is not None and trace.definition != definition:
                continue
            workloads.append(trace.workload)
        else:
            workloads.append(_validate(Workload, value, path, "workload"))
    return workloads


class TraceSet(BaseModel):
    """Everything in a FlashInfer trace-set directory, keyed by definition name."""

    root: Path
    definitions: dict[str, Definition] = Field(default_factory=dict)
    definition_files: dict[str, Path] = Field(default_factory=dict)
    workloads: dict[str, list[Workload]] = Field(default_factory=dict)
    solutions: dict[str, list[Solution]] = Field(default_factory=dict)


def is_trace_set(root: Path) -> bool:
    return (root / "definitions").is_dir()


def _inside(path: Path, within: Callable[[Path], bool] | None) -> Path:
    """`path`, unless `within` is given and refuses where it leads (links followed): a link in
    a trace set must not hand the caller a file from outside the folders it may read."""
    if within is not None and not within(path.resolve()):
        raise TaskFileError(
            f"trace-set file {str(path)!r} leads out of the folders this task may be read from "
            "(a link; the MCP server reads only under its roots): put the file itself there"
        )
    return path


def load_trace_set(root: Path, *, within: Callable[[Path], bool] | None = None) -> TraceSet:
    """Every definition, workload and solution of the trace set at `root`. within: where its
    files may lie once links are followed (the MCP server's roots); None: anywhere."""
    if not is_trace_set(root):
        raise TaskFileError(
            f"{str(root)!r} is not a FlashInfer trace-set directory (it has no definitions/ "
            "folder; expected definitions/, workloads/, solutions/)"
        )
    trace_set = TraceSet(root=root)
    for path in sorted((root / "definitions").rglob("*.json")):
        definition = load_definition(_inside(path, within))
        if definition.name in trace_set.definitions:
            raise TaskFileError(
                f"definition {definition.name!r} is defined twice: "
                f"{trace_set.definition_files[definition.name]} and {path}"
            )
        trace_set.definitions[definition.name] = definition
        trace_set.definition_files[definition.name] = path
    for folder in ("workloads", "traces"):
        for path in sorted((root / folder).rglob("*.json*")):
            if path.suffix not in (".json", ".jsonl"):
                continue
            for value in _workload_values(_inside(path, within)):
                if not isinstance(value, dict) or "workload" not in value:
                    continue  # a bare workload names no definition: only usable via its own file
                trace = _validate(Trace, value, path, "workload trace")
                if folder == "traces" and not trace.is_workload_trace:
                    continue
                known = trace_set.workloads.setdefault(trace.definition, [])
                if all(w.uuid != trace.workload.uuid for w in known):
                    known.append(trace.workload)
    for path in sorted((root / "solutions").rglob("*.json")):
        solution = load_solution_json(_inside(path, within))
        trace_set.solutions.setdefault(solution.definition, []).append(solution)
    return trace_set

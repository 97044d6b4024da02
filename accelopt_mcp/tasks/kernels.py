"""The one way a kernel becomes a Solution, for every caller (CLI, MCP tools, optimization jobs,
NKIBench import): from a file (a kernel .py or a solution .json) or from source text, with one
set of entry-point rules.

A kernel .py (or its text) defines its entry as a top-level function: `kernel`, else
`optimized_kernel` (NKIBench's optimized kernels), else `run` (FlashInfer-Bench's Python
solutions). Its language is `nki` when it imports neuronxcc or nki, else `python`.

A kernel that is not valid Python still becomes a Solution (its entry and language read from
the text), so that profiling reports it as a COMPILE_ERROR evaluation like any kernel that does
not load; `syntax_problem` says where it fails, in the words of whoever gave it.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from accelopt_mcp.models import BuildSpec, Language, Solution, SourceFile, Task
from accelopt_mcp.pysource import describe_syntax_error, imports_any, parse_python, syntax_error
from accelopt_mcp.tasks.flashinfer_format import TaskFileError, load_solution_json, read_text

ENTRY_SYMBOLS = ("kernel", "optimized_kernel", "run")
NKI_MODULES = ("neuronxcc", "nki")
# The file a kernel given as text is stored as (it names the entry point: kernel.py::kernel).
KERNEL_FILE_NAME = "kernel.py"
SOURCE_ORIGIN = "kernel_source"
"""How messages name a kernel given as text."""
DEFAULT_AUTHOR = "user"
LEGACY_DEFAULT_SUFFIX = "_user"
"""Pasted kernels were once all named `<definition>_user`; such a name is a placeholder."""

# Text scans for a source that does not parse (no AST to read).
_TOP_LEVEL_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)
_NKI_IMPORT = re.compile(
    r"^[ \t]*(?:import|from)[ \t]+(?:" + "|".join(NKI_MODULES) + r")\b", re.MULTILINE
)


def _source_tag(source: str) -> str:
    # The first 8 hex digits of the source's sha256: its solution hash, for one file.
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:8]


def default_kernel_name(definition: str, source: str) -> str:
    """The name of a kernel given as text without one: `<definition>-<first 8 hex digits of
    its source hash>`, so that two pasted kernels are told apart."""
    return f"{definition}-{_source_tag(source)}"


def is_placeholder_name(solution: Solution) -> bool:
    """Whether a solution's name is one made up for it (a pasted kernel's default, today's
    or the older `<definition>_user`), not one anybody chose: a later name may replace it."""
    name, definition = solution.name, solution.definition
    if name == f"{definition}{LEGACY_DEFAULT_SUFFIX}":
        return True
    return bool(solution.sources) and name == default_kernel_name(
        definition, solution.sources[0].content
    )


def _entry_and_language(source: str, where: str) -> tuple[str, Language]:
    try:
        module = parse_python(source)
    except (SyntaxError, ValueError):
        # Not valid Python: profiling reports it (COMPILE_ERROR); read what the text shows.
        names = set(_TOP_LEVEL_DEF.findall(source))
        entry = next((symbol for symbol in ENTRY_SYMBOLS if symbol in names), ENTRY_SYMBOLS[0])
        nki = _NKI_IMPORT.search(source) is not None
        return entry, Language.NKI if nki else Language.PYTHON
    functions = {
        n.name for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    found = next((symbol for symbol in ENTRY_SYMBOLS if symbol in functions), None)
    if found is None:
        raise TaskFileError(
            f"{where} defines none of the entry functions {list(ENTRY_SYMBOLS)} "
            f"(top-level functions: {sorted(functions) or 'none'}); name the kernel `kernel`"
        )
    language = Language.NKI if imports_any(module, NKI_MODULES) else Language.PYTHON
    return found, language


def solution_from_source(
    source: str,
    definition: str,
    *,
    file_name: str = KERNEL_FILE_NAME,
    name: str | None = None,
    author: str = DEFAULT_AUTHOR,
    target_hardware: list[str] | None = None,
    origin: str | None = None,
) -> Solution:
    """A single-file solution around a kernel's source text.

    name: default `<definition>-<source hash prefix>` (default_kernel_name); target_hardware:
    default by language (`trainium` for NKI, `cpu` for Python) — a caller that knows the
    backend passes the backend's. origin: how error messages name the kernel (default
    `kernel_source`). A source that is not valid Python is kept (see the module's doc)."""
    where = origin or SOURCE_ORIGIN
    if not source.strip():
        raise TaskFileError(f"{where} is empty; give the text of a kernel .py")
    entry, language = _entry_and_language(source, where)
    if target_hardware is None:
        target_hardware = ["trainium"] if language == Language.NKI else ["cpu"]
    return Solution(
        name=name or default_kernel_name(definition, source),
        definition=definition,
        author=author,
        spec=BuildSpec(
            language=language,
            target_hardware=list(target_hardware),
            entry_point=f"{file_name}::{entry}",
            destination_passing_style=False,
        ),
        sources=[SourceFile(path=file_name, content=source)],
    )


def syntax_problem(solution: Solution, origin: str | None = None) -> str | None:
    """Where a solution's Python does not parse, in the words of whoever gave it (None when
    every .py source parses): 'kernel_source line 4: '(' was never closed' and the line with
    a caret. origin: how the kernel was given (SOURCE_ORIGIN, or the path of the user's
    file); a solution .json or a multi-file solution adds the source's file, e.g. 'k.json,
    source main.py line 3'. Without an origin, the file's path inside the solution names it."""
    python = [f for f in solution.sources if f.path.endswith(".py")]
    for file in python:
        exc = syntax_error(file.content)
        if exc is None:
            continue
        if origin is None:
            where = file.path
        elif len(solution.sources) == 1 and not origin.endswith(".json"):
            where = origin  # the kernel's own text: its lines are the file's
        else:
            where = f"{origin}, source {file.path}"
        return describe_syntax_error(exc, where)
    return None


def solution_from_kernel_file(
    path: Path,
    definition: str,
    *,
    name: str | None = None,
    author: str = DEFAULT_AUTHOR,
    target_hardware: list[str] | None = None,
) -> Solution:
    """A kernel .py file as a solution named after the file (unless `name` is given)."""
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(f"kernel file {str(path)!r} does not exist")
    return solution_from_source(
        read_text(path, "kernel"),
        definition,
        file_name=path.name,
        name=name or path.stem,
        author=author,
        target_hardware=target_hardware,
        origin=f"kernel file {str(path)!r}",
    )


def load_solution(
    path: Path,
    task: Task,
    *,
    name: str | None = None,
    author: str = DEFAULT_AUTHOR,
    target_hardware: list[str] | None = None,
) -> Solution:
    """A solution from a solution .json (kept as written, but for `name`), or from a kernel .py.
    A solution .json must be for the task's definition."""
    path = Path(path).expanduser()
    if path.suffix == ".json":
        solution = load_solution_json(path)
        if solution.definition != task.definition.name:
            raise TaskFileError(
                f"solution {str(path)!r} is for definition {solution.definition!r}, not "
                f"{task.definition.name!r}"
            )
        return solution.model_copy(update={"name": name}) if name else solution
    if path.suffix == ".py":
        return solution_from_kernel_file(
            path, task.definition.name, name=name, author=author, target_hardware=target_hardware
        )
    raise TaskFileError(f"solution path {str(path)!r} must be a solution .json or a kernel .py")


def kernel_solution(
    task: Task,
    *,
    kernel_path: str | Path | None = None,
    kernel_source: str | None = None,
    name: str | None = None,
    author: str = DEFAULT_AUTHOR,
    target_hardware: list[str] | None = None,
) -> Solution:
    """The candidate kernel of a request that gives exactly one of a path (kernel .py or
    solution .json) and the source text of a kernel .py."""
    if (kernel_path is None) == (kernel_source is None):
        raise TaskFileError(
            "give exactly one of kernel_path (a kernel .py or solution .json file) and "
            "kernel_source (the text of a kernel .py)"
        )
    if kernel_path is not None:
        return load_solution(
            Path(kernel_path), task, name=name, author=author, target_hardware=target_hardware
        )
    assert kernel_source is not None
    return solution_from_source(
        kernel_source,
        task.definition.name,
        name=name,
        author=author,
        target_hardware=target_hardware,
    )

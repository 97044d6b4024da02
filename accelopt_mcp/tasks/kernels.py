"""The one way a kernel becomes a Solution, for every caller (CLI, MCP tools, optimization jobs,
NKIBench import): from a file (a kernel .py or a solution .json) or from source text, with one
set of entry-point rules.

A kernel .py (or its text) defines its entry as a top-level function: `kernel`, else
`optimized_kernel` (NKIBench's optimized kernels), else `run` (FlashInfer-Bench's Python
solutions). Its language is `nki` when it imports neuronxcc or nki, else `python`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from accelopt_mcp.models import BuildSpec, Language, Solution, SourceFile, Task
from accelopt_mcp.pysource import imports_any, parse_python
from accelopt_mcp.tasks.flashinfer_format import TaskFileError, load_solution_json

ENTRY_SYMBOLS = ("kernel", "optimized_kernel", "run")
NKI_MODULES = ("neuronxcc", "nki")
# The file a kernel given as text is stored as (it names the entry point: kernel.py::kernel).
KERNEL_FILE_NAME = "kernel.py"


def solution_from_source(
    source: str,
    definition: str,
    *,
    file_name: str = KERNEL_FILE_NAME,
    name: str | None = None,
    author: str = "user",
    target_hardware: list[str] | None = None,
    origin: str | None = None,
) -> Solution:
    """A single-file solution around a kernel's source text.

    name: default `<definition>_user`; target_hardware: default by language (`trainium` for
    NKI, `cpu` for Python) — a caller that knows the backend passes the backend's.
    origin: how error messages name the kernel (default `kernel_source`)."""
    where = origin or "kernel_source"
    if not source.strip():
        raise TaskFileError(f"{where} is empty; give the text of a kernel .py")
    try:
        module = parse_python(source)
    except SyntaxError as exc:
        raise TaskFileError(f"{where} is not valid Python: {exc.msg} (line {exc.lineno})") from exc
    functions = {
        n.name for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    entry = next((symbol for symbol in ENTRY_SYMBOLS if symbol in functions), None)
    if entry is None:
        raise TaskFileError(
            f"{where} defines none of the entry functions {list(ENTRY_SYMBOLS)} "
            f"(top-level functions: {sorted(functions) or 'none'}); name the kernel `kernel`"
        )
    language = Language.NKI if imports_any(module, NKI_MODULES) else Language.PYTHON
    if target_hardware is None:
        target_hardware = ["trainium"] if language == Language.NKI else ["cpu"]
    return Solution(
        name=name or f"{definition}_user",
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


def solution_from_kernel_file(
    path: Path,
    definition: str,
    *,
    name: str | None = None,
    author: str = "user",
    target_hardware: list[str] | None = None,
) -> Solution:
    """A kernel .py file as a solution named after the file (unless `name` is given)."""
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(f"kernel file {str(path)!r} does not exist")
    return solution_from_source(
        path.read_text(),
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
    author: str = "user",
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
    author: str = "user",
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

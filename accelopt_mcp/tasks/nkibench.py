"""NKIBench tasks: a NumPy module (shape constants, `get_inputs()`, `forward(*inputs)`, optional
layout transforms) and a kernel module, mapped onto Definition / Workload / Solution.

A directory in NKIBench layout has a `summary.json`:
{problem: {"seed": ..., "cases": {id: {"values": {axis: int}, "impls": [{"task": path,
"kernel": path}]}}}} with paths relative to the directory.
"""

from __future__ import annotations

import ast
import re
import uuid
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from accelopt_mcp.models import (
    AxisConst,
    Definition,
    DType,
    RandomInput,
    Roofline,
    Solution,
    TensorSpec,
    Workload,
)
from accelopt_mcp.pysource import parse_python
from accelopt_mcp.tasks.flashinfer_format import TaskFileError, read_json, read_text
from accelopt_mcp.tasks.kernels import solution_from_kernel_file
from accelopt_mcp.tasks.probe import probe_nkibench_task

FORMAT_TAG = "format:nkibench"
_WORKLOAD_NAMESPACE = uuid.UUID("6f1b7f3e-3a52-4c51-9a7e-5b1de0a8c0a1")
_AXIS_TOKEN = re.compile(r"_[A-Z][A-Z0-9]*?\d+(?=_|$)")


class NkiBenchCase(BaseModel):
    problem: str
    case_id: str
    values: dict[str, int]
    task_path: Path
    kernel_path: Path | None


class NkiBenchEntry(BaseModel):
    """One imported case, ready to store: its definition, its workload, its baseline kernel."""

    definition: Definition
    workload: Workload
    solution: Solution | None = Field(default=None)


def is_nkibench_task(source: str) -> bool:
    try:
        module = parse_python(source)
    except SyntaxError:
        return False
    names = {n.name for n in module.body if isinstance(n, ast.FunctionDef)}
    return {"get_inputs", "forward"} <= names


def shape_constants(source: str) -> dict[str, int]:
    """Module-level `NAME = <int>` assignments with upper-case names: the task's axes."""
    values: dict[str, int] = {}
    for node in parse_python(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.isupper()
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            values[node.targets[0].id] = node.value.value
    return values


def _forward_parameters(source: str) -> list[str]:
    for node in parse_python(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "forward":
            return [a.arg for a in node.args.args]
    return []


def task_name(path: Path, problem: str | None, values: dict[str, int]) -> str:
    """`silu_M4096_N7168` for problem silu with M=4096, N=7168."""
    if problem:
        return problem + "".join(f"_{axis}{value}" for axis, value in values.items())
    return re.sub(r"_numpy(_\d+)?$", "", path.stem)


def problem_of(name: str) -> str:
    match = _AXIS_TOKEN.search(name)
    return name[: match.start()] if match else name


def _axis_names(
    shape: list[int] | None, axes: dict[str, int], tensor: str, extra: dict[str, int]
) -> list[str] | None:
    """Name each dimension after an axis of that size (the first one, when several match);
    a size no axis has gets an axis of its own, `<tensor>_dim<i>`."""
    if shape is None:
        return None
    names = []
    for index, size in enumerate(shape):
        match = next((axis for axis, value in axes.items() if value == size), None)
        if match is None:
            match = f"{tensor}_dim{index}"
            extra[match] = size
        names.append(match)
    return names


def _dtype(name: str, tensor: str, path: Path) -> DType:
    try:
        return DType(name)
    except ValueError:
        raise TaskFileError(
            f"{str(path)!r}: {tensor} has dtype {name!r}, which the FlashInfer-Trace records "
            f"cannot describe (they know {[d.value for d in DType]}); cast it in the task"
        ) from None


def definition_from_task(
    path: Path, *, problem: str | None = None, values: dict[str, int] | None = None
) -> Definition:
    """Read an NKIBench task module and describe it as a Definition. Runs get_inputs() and
    forward() once, sandboxed, to learn the shapes and dtypes."""
    if not path.is_file():
        raise TaskFileError(f"NKIBench task file {str(path)!r} does not exist")
    source = read_text(path, "NKIBench task")
    if not is_nkibench_task(source):
        raise TaskFileError(
            f"{str(path)!r} is not an NKIBench task: it must define top-level functions "
            "`get_inputs()` and `forward(*inputs)`"
        )
    values = dict(values) if values is not None else shape_constants(source)
    name = task_name(path, problem, values)
    problem = problem or problem_of(name)
    try:
        probe = probe_nkibench_task(source)
    except ValueError as exc:
        raise TaskFileError(f"{str(path)!r}: {exc}") from exc
    parameters = _forward_parameters(source)
    extra_axes: dict[str, int] = {}
    inputs: dict[str, TensorSpec] = {}
    for index, described in enumerate(probe["inputs"]):
        tensor = parameters[index] if index < len(parameters) else f"input{index}"
        inputs[tensor] = TensorSpec(
            shape=_axis_names(described["shape"], values, tensor, extra_axes),
            dtype=_dtype(described["dtype"], f"input {tensor!r}", path),
        )
    outputs: dict[str, TensorSpec] = {}
    for index, described in enumerate(probe["outputs"]):
        tensor = "out" if len(probe["outputs"]) == 1 else f"out{index}"
        while tensor in inputs:
            tensor = f"_{tensor}"
        outputs[tensor] = TensorSpec(
            shape=_axis_names(described["shape"], values, tensor, extra_axes),
            dtype=_dtype(described["dtype"], f"output {tensor!r}", path),
        )
    reference = source
    if not re.search(r"^def run\(", source, flags=re.MULTILINE):
        reference = source.rstrip() + "\n\n\ndef run(*inputs):\n    return forward(*inputs)\n"
    tags = [FORMAT_TAG]
    if probe.get("has_transforms"):
        tags.append("nkibench:layout_transforms")
    if probe.get("roofline"):
        try:
            tags.append(Roofline.model_validate(probe["roofline"]).to_tag())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            reason = first["msg"].removeprefix("Value error, ")
            raise TaskFileError(
                f"{str(path)!r}: roofline() returned {probe['roofline']}: "
                f"{f'{where}: ' if where else ''}{reason}"
            ) from None
    return Definition(
        name=name,
        op_type=problem,
        axes={axis: AxisConst(value=value) for axis, value in {**values, **extra_axes}.items()},
        inputs=inputs,
        outputs=outputs,
        reference=reference,
        tags=tags,
        description=f"NKIBench task {problem} ({path.name})",
    )


def default_workload(definition: Definition) -> Workload:
    """The single workload of an all-const definition, with a uuid fixed by its content."""
    if definition.var_axes:
        raise TaskFileError(
            f"definition {definition.name!r} has variable axes {definition.var_axes}; "
            "give a workload (a workload JSON/JSONL file) that sets them"
        )
    key = f"{definition.name}\n{definition.reference}"
    return Workload(
        axes={},
        inputs={name: RandomInput() for name in definition.inputs},
        uuid=str(uuid.uuid5(_WORKLOAD_NAMESPACE, key)),
    )


def read_summary(root: Path) -> list[NkiBenchCase]:
    summary_path = root / "summary.json"
    summary = read_json(summary_path, "NKIBench summary")
    if not isinstance(summary, dict):
        raise TaskFileError(f"{str(summary_path)!r} must hold an object keyed by problem name")
    cases = []
    for problem, entry in summary.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("cases"), dict):
            raise TaskFileError(f"{str(summary_path)!r}: problem {problem!r} has no `cases` object")
        for case_id, case in entry["cases"].items():
            where = f"{str(summary_path)!r}: {problem} case {case_id}"
            if not isinstance(case, dict) or not isinstance(case.get("impls"), list):
                raise TaskFileError(f"{where} has no `impls` list")
            values = case.get("values") or {}
            if not all(isinstance(v, int) for v in values.values()):
                raise TaskFileError(f"{where}: `values` must map axis names to integers")
            for impl in case["impls"]:
                if not isinstance(impl, dict) or "task" not in impl:
                    raise TaskFileError(f"{where}: every impl needs a `task` path")
                kernel = impl.get("kernel")
                cases.append(
                    NkiBenchCase(
                        problem=problem,
                        case_id=str(case_id),
                        values=values,
                        task_path=(root / impl["task"]).resolve(),
                        kernel_path=(root / kernel).resolve() if kernel else None,
                    )
                )
    return cases


def import_nkibench_dir(root: Path, *, author: str = "nkibench") -> list[NkiBenchEntry]:
    """Every case of an NKIBench-layout directory as definition + workload + baseline kernel."""
    entries = []
    for case in read_summary(root):
        definition = definition_from_task(case.task_path, problem=case.problem, values=case.values)
        solution = None
        if case.kernel_path is not None:
            solution = solution_from_kernel_file(
                case.kernel_path, definition.name, name=f"{definition.name}_baseline", author=author
            )
        entries.append(
            NkiBenchEntry(
                definition=definition, workload=default_workload(definition), solution=solution
            )
        )
    return entries

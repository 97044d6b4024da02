"""The task's side of a cpu evaluation, run inside the task's jail: `Harness` imports the task's
module and calls its reference, input drawing and transforms the way the task format says, and
`serve_task` answers the trusted harness's requests for them (cpu_task.JailedHarness starts it;
the protocol is in cpu_task's docstring). Nothing here starts a jail or times anything."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from accelopt_mcp.backends.cpu_outcomes import StageError, Verdict
from accelopt_mcp.backends.cpu_stages import record_stage, short_traceback
from accelopt_mcp.backends.cpu_values import as_arena_values, as_list, copy_value, describe_value
from accelopt_mcp.backends.stress import StressError, checked_stress_sets
from accelopt_mcp.tasks.inputs import generate_inputs, needs_torch

TORCH_HINT = "this task needs PyTorch: pip install torch==2.13.0"


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Harness:
    """Calls the reference and the candidate the way the task format says."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.style = job["style"]
        self.use_torch = bool(job.get("use_torch"))
        if self.style == "flashinfer" and needs_torch(job.get("input_plan") or []):
            self.use_torch = True
        self.torch: ModuleType | None = None
        if self.use_torch:
            try:
                import torch
            except ImportError as exc:
                raise StageError("setup", TORCH_HINT) from exc
            self.torch = torch
        record_stage("reference import")
        try:
            self.reference = _load_module(Path(job["reference_path"]), "accelopt_reference")
        except ModuleNotFoundError as exc:
            hint = f"; {TORCH_HINT}" if exc.name == "torch" else ""
            raise StageError("reference", f"the reference cannot be imported: {exc}{hint}") from exc
        except BaseException as exc:
            raise StageError(
                "reference", f"the reference cannot be imported: {exc!r}", short_traceback()
            ) from exc
        name = "forward" if self.style == "nkibench" else "run"
        reference_fn = getattr(self.reference, name, None)
        if not callable(reference_fn):
            raise StageError("reference", f"the reference defines no function `{name}`")
        self.reference_fn: Callable[..., Any] = reference_fn
        self.to_kernel_inputs = getattr(self.reference, "transform_to_nki_inputs", None)
        self.from_kernel_outputs = getattr(self.reference, "transform_nki_outputs", None)
        self._stress: list[tuple[str, list[Any]]] | None = None

    def stress_sets(self) -> list[tuple[str, list[Any]]]:
        """The named input sets an NKIBench task's optional `stress_inputs()` declares (drawn
        once, after seeding with 0), checked: a dict name -> inputs, or a list of (name,
        inputs) pairs, at most MAX_STRESS_SETS, names short and unique, inputs a tuple or list.
        StageError (the task's fault) for anything else."""
        if self._stress is not None:
            return self._stress
        declare = getattr(self.reference, "stress_inputs", None)
        if declare is None or self.style != "nkibench":
            self._stress = []
            return self._stress
        if not callable(declare):
            raise StageError("reference", "stress_inputs must be a function returning input sets")
        random.seed(0)
        np.random.seed(0)
        if self.torch is not None:
            self.torch.manual_seed(0)
        try:
            declared = declare()
        except BaseException as exc:
            raise StageError(
                "reference", f"stress_inputs() failed: {exc!r}", short_traceback()
            ) from exc
        try:
            self._stress = checked_stress_sets(declared)
        except StressError as exc:
            raise StageError("reference", str(exc)) from None
        return self._stress

    def inputs(self, seed: int) -> list[Any]:
        random.seed(seed)
        np.random.seed(seed)
        if self.torch is not None:
            self.torch.manual_seed(seed)
        if self.style == "nkibench":
            try:
                return list(self.reference.get_inputs())
            except BaseException as exc:
                raise StageError(
                    "reference", f"get_inputs() failed: {exc!r}", short_traceback()
                ) from exc
        return generate_inputs(self.job["input_plan"], seed, as_torch=self.torch is not None)

    def reference_outputs(self, inputs: list[Any]) -> list[Any]:
        try:
            return as_list(self.reference_fn(*[copy_value(v) for v in inputs]))
        except BaseException as exc:
            raise StageError(
                "reference", f"the reference raised {exc!r}", short_traceback()
            ) from exc

    def candidate_inputs(self, inputs: list[Any]) -> list[Any]:
        """The inputs as the candidate is called with them (the task's transform applied).
        Without a transform they are the reference's own values: the arena write copies them
        anyway, and a copy here would leave the caches in another state before the kernel's
        call than before the reference's (a measured 4 % handicap for identical code)."""
        if self.to_kernel_inputs is None:
            return list(inputs)
        return list(self.to_kernel_inputs([copy_value(v) for v in inputs]))

    def candidate_outputs(self, outputs: list[Any], refs: list[Any]) -> list[Any]:
        """The candidate's outputs in the reference's layout (the task's transform applied)."""
        if self.from_kernel_outputs is None:
            return outputs
        ref = refs[0] if len(refs) == 1 else tuple(refs)
        returned = outputs[0] if len(outputs) == 1 else tuple(outputs)
        try:
            return as_list(self.from_kernel_outputs(returned, ref))
        except Exception as exc:  # the kernel's outputs do not fit the task's transform
            raise Verdict(
                "INCORRECT_SHAPE",
                f"the task's output transform cannot take the kernel's outputs: {exc!r}",
            ) from None


def describe_harness(harness: Harness) -> dict[str, Any]:
    """describe's answer, computed inside the task's jail (serve_task, below)."""
    inputs = harness.inputs(0)
    outputs = harness.reference_outputs(inputs)
    return {
        "inputs": [describe_value(v) for v in inputs],
        "outputs": [describe_value(v) for v in outputs],
        "has_transforms": harness.to_kernel_inputs is not None
        or harness.from_kernel_outputs is not None,
        "roofline": _declared_roofline(harness.reference),
    }


ROOFLINE_KEYS = ("matmul_flops", "vector_flops", "flops", "bytes_moved", "compute_unit")
"""The keys of a task's roofline() the jail passes on (models.Roofline's fields)."""


def _declared_roofline(module: Any) -> dict[str, Any] | None:
    """The task's own `roofline()` -> {"matmul_flops"?, "vector_flops"?, "bytes_moved"} (or
    the older {"flops", "bytes_moved", "compute_unit"?}), if it has one; models.Roofline says
    which keys are missing or clash."""
    declare = getattr(module, "roofline", None)
    if not callable(declare):
        return None
    declared = declare()
    if not isinstance(declared, dict):
        raise StageError(
            "describe",
            "roofline() must return a dict with matmul_flops/vector_flops and bytes_moved",
        )
    return {k: declared[k] for k in ROOFLINE_KEYS if k in declared}


def serve_task(argv: list[str]) -> int:
    """The task's jail (cpu_task.JailedHarness): import the task here, inside the jail, and
    answer the harness's requests (the protocol is in cpu_task's docstring)."""
    from accelopt_mcp.backends.cpu_task import ArenaFile, receive_message, send_message

    ctl, ack, fd_in, fd_out = (int(a) for a in argv[:4])
    spec = json.loads(argv[4])
    arena_in, arena_out = ArenaFile(fd_in), ArenaFile(fd_out)
    try:
        harness = Harness(spec)
    except StageError as error:
        send_message(
            ack, {"ok": False, "kind": error.kind, "message": error.message, "traceback": error.tb}
        )
        return 1
    send_message(
        ack,
        {
            "ok": True,
            "has_to": harness.to_kernel_inputs is not None,
            "has_from": harness.from_kernel_outputs is not None,
        },
    )
    while True:
        try:
            request = receive_message(ctl)
        except (EOFError, ValueError):
            return 0
        op = request.get("op")
        try:
            if op == "quit":
                return 0
            if op == "describe":
                send_message(ack, {"ok": True, "describe": describe_harness(harness)})
                continue
            if op == "stress_names":
                names = [name for name, _ in harness.stress_sets()]
                send_message(ack, {"ok": True, "names": names})
                continue
            if op == "inputs":
                values = as_arena_values(harness.inputs(int(request["seed"])))
            elif op == "stress":
                values = as_arena_values(harness.stress_sets()[int(request["index"])][1])
            elif op == "to_kernel":
                sets = arena_in.read(request.get("bytes"), expected_sets=1)
                values = as_arena_values(harness.candidate_inputs(sets[0]))
            elif op == "from_kernel":
                sets = arena_in.read(request.get("bytes"), expected_sets=2)
                values = as_arena_values(harness.candidate_outputs(sets[0], sets[1]))
            else:
                raise ValueError(f"unknown request {op!r}")
            send_message(ack, {"ok": True, "bytes": arena_out.write([values])})
        except Verdict as verdict:
            send_message(ack, {"ok": False, "verdict": True, "message": verdict.message})
        except StageError as error:
            send_message(
                ack,
                {"ok": False, "kind": error.kind, "message": error.message, "traceback": error.tb},
            )
        except BaseException as exc:
            send_message(
                ack,
                {
                    "ok": False,
                    "kind": "reference",
                    "message": f"the task's code failed ({op}): {exc!r}",
                    "traceback": short_traceback(),
                },
            )

"""Operations the MCP server needs beyond accelopt_mcp.profiling (which the CLI shares): a
kernel given as source text, importing a directory whatever its format, the solutions of a
definition ranked. Each takes an open store and plain arguments; none knows about MCP, so the
CLI can call them too.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from accelopt_mcp.backends.base import Task
from accelopt_mcp.backends.registry import backend_names
from accelopt_mcp.models import Solution
from accelopt_mcp.profiling import import_nkibench
from accelopt_mcp.store.base import KernelStore, StoredProfile, StoredSolution
from accelopt_mcp.tasks.flashinfer_format import TaskFileError, is_trace_set
from accelopt_mcp.tasks.loader import load_solution, solution_from_kernel_file
from accelopt_mcp.traceset import TransferCounts, import_traceset

if TYPE_CHECKING:
    from accelopt_mcp.engine.jobs import OptimizeRequest

KERNEL_FILE_NAME = "kernel.py"


# --------------------------------------------------------------------------- kernels


def kernel_solution(
    task: Task,
    *,
    kernel_path: Path | None = None,
    kernel_source: str | None = None,
    name: str | None = None,
    author: str = "user",
) -> Solution:
    """The candidate kernel as a Solution: from a kernel .py / solution .json path, or from the
    source text of a kernel .py (checked the same way as a file). Exactly one must be given."""
    if (kernel_path is None) == (kernel_source is None):
        raise TaskFileError(
            "give exactly one of kernel_path (a kernel .py or solution .json file) and "
            "kernel_source (the text of a kernel .py)"
        )
    if kernel_path is not None:
        return load_solution(Path(kernel_path).expanduser(), task, name=name, author=author)
    assert kernel_source is not None
    with tempfile.TemporaryDirectory(prefix="accelopt-kernel-") as folder:
        path = Path(folder) / KERNEL_FILE_NAME
        path.write_text(kernel_source)
        return solution_from_kernel_file(
            path, task.definition.name, name=name or f"{task.definition.name}_user", author=author
        )


# --------------------------------------------------------------------------- import

ImportFormat = Literal["auto", "flashinfer-trace", "nkibench"]


def detect_import_format(root: Path) -> Literal["flashinfer-trace", "nkibench"]:
    if not root.is_dir():
        raise TaskFileError(f"{str(root)!r} is not a directory")
    if is_trace_set(root):
        return "flashinfer-trace"
    if (root / "summary.json").is_file():
        return "nkibench"
    raise TaskFileError(
        f"{str(root)!r} is neither a FlashInfer-Trace directory (definitions/, workloads/, "
        "solutions/, traces/) nor an NKIBench directory (summary.json with reference/ and "
        "kernels/); give the folder that holds one of those"
    )


def import_directory(
    store: KernelStore, root: Path, *, fmt: ImportFormat = "auto"
) -> tuple[str, TransferCounts]:
    """Load a FlashInfer-Trace or NKIBench directory into the store; (format, counts)."""
    root = Path(root).expanduser()
    chosen = detect_import_format(root) if fmt == "auto" else fmt
    if not root.is_dir():
        raise TaskFileError(f"{str(root)!r} is not a directory")
    if chosen == "flashinfer-trace":
        return chosen, import_traceset(store, root)
    return chosen, import_nkibench(store, root)


# --------------------------------------------------------------------------- ranking


class RankedEntry(BaseModel):
    solution: StoredSolution
    best_profile: StoredProfile | None = Field(
        default=None, description="Its fastest correct profile; None when none passed."
    )


def ranked_solutions(
    store: KernelStore,
    definition_name: str,
    *,
    hardware: str | None = None,
    language: str | None = None,
    run_id: str | None = None,
) -> list[RankedEntry]:
    """Every solution of a definition, best first: correct ones by latency, then the rest
    (never passed, or not on this hardware) oldest first."""
    solutions = store.list_solutions(
        definition_name=definition_name, run_id=run_id, language=language
    )
    wanted = {s.id for s in solutions}
    ranked = store.best_solutions(definition_name, hardware=hardware, limit=max(len(wanted), 1))
    entries = [
        RankedEntry(solution=r.solution, best_profile=r.profile)
        for r in ranked
        if r.solution.id in wanted
    ]
    seen = {e.solution.id for e in entries}
    entries += [RankedEntry(solution=s) for s in solutions if s.id not in seen]
    return entries


# --------------------------------------------------------------------------- optimization jobs

MODEL_TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "models"


def model_config_names() -> list[str]:
    """Model presets shipped in templates/models (present in a source checkout)."""
    if not MODEL_TEMPLATES.is_dir():
        return []
    return sorted(p.stem for p in MODEL_TEMPLATES.glob("*.json"))


def resolve_models_config(name_or_path: str | None) -> str | None:
    """A model config given by path, or by the name of a preset in templates/models; it is
    loaded once here so that a broken one is reported before a job is queued."""
    from accelopt_mcp.llm.config import load_role_configs

    if not name_or_path:
        return None
    for path in (Path(name_or_path).expanduser(), MODEL_TEMPLATES / f"{name_or_path}.json"):
        if path.is_file():
            load_role_configs(path)  # raises LlmConfigError (a ValueError) saying what to fix
            return str(path)
    names = ", ".join(model_config_names()) or "none shipped with this install"
    raise ValueError(
        f"model config {name_or_path!r} is neither a file nor a preset name ({names}); give "
        "the path of a JSON/TOML model config (see templates/models/README.md)"
    )


def optimize_request(preset: str | None, **fields: Any) -> OptimizeRequest:
    """A job request: the preset's run settings (quick, paper or a JSON file) overlaid with the
    fields given (None means "the preset's value")."""
    from accelopt_mcp.engine.jobs import OptimizeRequest
    from accelopt_mcp.engine.presets import load_preset

    merged: dict[str, Any] = load_preset(preset or "quick")
    merged.update({k: v for k, v in fields.items() if v is not None})
    backend = merged.get("backend", "cpu")
    if backend not in backend_names():
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(backend_names())}")
    if "seed_from_namespace" in merged:  # the preset's name for OptimizeRequest.seed_memory
        merged["seed_memory"] = merged.pop("seed_from_namespace")
    merged["models_config"] = resolve_models_config(merged.get("models_config"))
    return OptimizeRequest.model_validate(merged)

"""Moving kernel databases in and out: FlashInfer-Trace directories both ways (traceset), NKIBench
directories in (nkibench), and `import_directory`, which tells the two formats apart."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.tasks.flashinfer_format import TaskFileError, is_trace_set
from accelopt_mcp.transfer.nkibench import import_nkibench
from accelopt_mcp.transfer.traceset import TransferCounts, export_traceset, import_traceset

ImportFormat = Literal["auto", "flashinfer-trace", "nkibench"]


def _not_a_directory(root: Path) -> TaskFileError:
    return TaskFileError(
        f"{str(root)!r} is not a directory; give the folder that holds the FlashInfer-Trace "
        "set (definitions/, workloads/, ...) or the NKIBench suite (summary.json), not a file in it"
    )


def detect_import_format(root: Path) -> Literal["flashinfer-trace", "nkibench"]:
    if not root.is_dir():
        raise _not_a_directory(root)
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
    """Load a FlashInfer-Trace or NKIBench directory into the store; (format, counts).

    As one batch (KernelStore.batch): a commit per few hundred rows rather than per row, and
    fresh planner statistics after a large import. An import that stops on an error keeps
    what the batch committed before it; importing again completes it (imports are
    idempotent)."""
    root = Path(root).expanduser()
    chosen = detect_import_format(root) if fmt == "auto" else fmt
    if not root.is_dir():
        raise _not_a_directory(root)
    with store.batch():
        if chosen == "flashinfer-trace":
            return chosen, import_traceset(store, root)
        return chosen, import_nkibench(store, root)


__all__ = [
    "ImportFormat",
    "TransferCounts",
    "detect_import_format",
    "export_traceset",
    "import_directory",
    "import_nkibench",
    "import_traceset",
]

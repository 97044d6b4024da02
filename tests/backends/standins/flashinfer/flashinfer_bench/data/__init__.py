"""flashinfer_bench.data of the stand-in: a trace set is its directory."""

from __future__ import annotations

from pathlib import Path


class TraceSet:
    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def from_path(cls, path: str) -> TraceSet:
        return cls(Path(path))

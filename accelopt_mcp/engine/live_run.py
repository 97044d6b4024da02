"""What changes while a run goes on: its checkpoint and the fastest kernel found so far."""

from __future__ import annotations

from dataclasses import dataclass

from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.selection import BeamEntry


@dataclass
class LiveRun:
    checkpoint: Checkpoint
    """Changed in place and written to the run's row after every step (CheckpointWriter)."""
    best: BeamEntry | None = None
    """None until the run has its starting point (its initial kernel profiled)."""

    def fastest_so_far(self) -> BeamEntry:
        """The fastest correct, trusted kernel the checkpoint knows: the initial one (checked
        when the run started) or an attempt without an untrusted flag."""
        checkpoint = self.checkpoint
        assert checkpoint.initial is not None
        candidates = [checkpoint.initial] + [
            BeamEntry(
                solution_id=s.solution_id,
                latency_ms=s.latency_ms,
                source_hash=s.source_hash,
                branch=s.branch,
            )
            for s in checkpoint.slots.values()
            if s.usable and s.solution_id and s.source_hash and s.latency_ms is not None
        ]
        return min(candidates, key=lambda e: e.latency_ms)

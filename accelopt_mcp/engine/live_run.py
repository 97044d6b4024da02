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

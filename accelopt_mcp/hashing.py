"""Content hashes used as dedup keys in the kernel database."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from accelopt_mcp.models import Solution

CURRENT_HASH_VERSION = 1


def solution_hash(solution: Solution, hash_version: int = CURRENT_HASH_VERSION) -> str:
    """sha256 of the kernel source.

    Version 1 is AccelOpt's: the first source file's content, so rows written by AccelOpt and
    by us dedup against each other. For a multi-file solution it would miss changes in the
    other files, so those are folded in (path and content) after the first file's content;
    a single-file solution hashes exactly as AccelOpt's version 1.
    """
    if hash_version != 1:
        raise ValueError(f"unknown hash_version {hash_version}; this build knows version 1")
    digest = hashlib.sha256(solution.sources[0].content.encode("utf-8"))
    for source in solution.sources[1:]:
        digest.update(b"\0" + source.path.encode("utf-8") + b"\0")
        digest.update(source.content.encode("utf-8"))
    return digest.hexdigest()


def benchmark_config_hash(perf_fields: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the performance-relevant benchmark settings."""
    canonical = json.dumps(perf_fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

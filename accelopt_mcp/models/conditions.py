"""The conditions a measurement was taken under: how many cores (which ones), how many BLAS
threads, how busy the host was, how many evaluations ran at once.

A speedup holds under the conditions it was measured in, and a lesson drawn from it may hold
only there: splitting work across threads pays on two cores and costs on one; a busy host
rewards what leaves the shared caches alone. An experience item stores them
(ExperienceIn.conditions), the summarizer is told them, and a planner reading the item sees them.

Where they come from (`measuring_conditions_of`), and why there:

- cores and which: the evaluation log's `timing:` line, written by the trusted harness before
  any of the kernel's own output ("pinned to core 3 with 1 BLAS/OpenMP thread", or "on every
  usable core (8), BLAS/OpenMP threads at the library's default"); the count also from
  `Environment.libs["cores_per_evaluation"]` when the line is missing;
- BLAS threads: the same line (pinned: one per core; not pinned: the library's default);
- host load and the share of the timed windows other programs took: `Evaluation.measurement`
  (`host_load`, `foreign_share`), else the line;
- evaluations at once: not in an evaluation; the caller knows it (a run's workers, the
  profile key's `workers`).

Only lines before the log's "stderr (tail):" / "stdout (tail):" sections are read: what the
kernel printed cannot pose as the harness.
"""

from __future__ import annotations

import re

from accelopt_mcp.models.base import Record
from accelopt_mcp.models.evaluation import Evaluation

CORES_KEY = "cores_per_evaluation"
"""The Environment.libs key of the cores one evaluation had (backends/host_facts.py)."""
_PINNED = re.compile(r"pinned to cores? ([\d,]+) with (\d+) BLAS/OpenMP threads?")
_EVERY = re.compile(r"on every usable core \((\d+)\)")
_LOAD = re.compile(r"host load [\d.]+ -> ([\d.]+)")
_SHARE = re.compile(r"([\d.]+)% of the timed windows went to other programs")
_KERNEL_OUTPUT = ("stderr (tail):", "stdout (tail):")


class MeasuringConditions(Record):
    """How one measurement was taken, where that changes what its figures mean. Every field
    is optional: what was not recorded is left out, never guessed. No bounds are enforced on
    read: a stored item always loads."""

    cores: int | None = None
    """Cores one evaluation had."""
    cpus: list[int] | None = None
    """The cores it was pinned to; None: not pinned (every usable core) or not recorded."""
    blas_threads: int | None = None
    """BLAS/OpenMP threads it was given; None: the library's default (not pinned) or not
    recorded."""
    pinned: bool | None = None
    """Whether it was pinned to `cpus` with `blas_threads`; None: not recorded."""
    host_load: float | None = None
    """The host's load average (1 minute) when the timing ended."""
    foreign_share: float | None = None
    """The share of the timed windows that went to other programs (0.02: 2 %)."""
    evaluations_at_once: int | None = None
    """Evaluations running at once on the host (a run's workers), sharing its caches and
    memory bandwidth."""

    def text(self) -> str:
        """'1 core (core 3), 1 BLAS thread, host load 0.3, 1.2% of the timed windows to other
        programs, 2 evaluations at once'; what is not recorded is left out."""
        parts = []
        if self.cores is not None:
            which = ""
            if self.cpus:
                which = (
                    f" (core{'s' if len(self.cpus) > 1 else ''} {','.join(map(str, self.cpus))})"
                )
            parts.append(f"{self.cores} core{'s' if self.cores != 1 else ''}{which}")
        if self.blas_threads is not None:
            s = "s" if self.blas_threads != 1 else ""
            parts.append(f"{self.blas_threads} BLAS thread{s}")
        elif self.pinned is False:
            parts.append("BLAS threads at the library's default")
        if self.host_load is not None:
            parts.append(f"host load {self.host_load:.1f}")
        if self.foreign_share is not None:
            parts.append(f"{self.foreign_share:.1%} of the timed windows to other programs")
        if self.evaluations_at_once is not None:
            n = self.evaluations_at_once
            parts.append(f"{n} evaluation{'s' if n != 1 else ''} at once")
        return ", ".join(parts) or "(not recorded)"


def _harness_lines(log: str) -> list[str]:
    """The log's lines before the kernel's own output."""
    lines = []
    for line in log.splitlines():
        if line.startswith(_KERNEL_OUTPUT):
            break
        lines.append(line)
    return lines


def measuring_conditions_of(
    evaluation: Evaluation | None, *, evaluations_at_once: int | None = None
) -> MeasuringConditions | None:
    """The conditions an evaluation was measured under (module docstring); None when it
    records none (a failed evaluation, a backend that says nothing of them) and no
    `evaluations_at_once` is given."""
    if evaluation is None:
        return None
    found: dict[str, object] = {}
    timing = next((ln for ln in _harness_lines(evaluation.log) if ln.startswith("timing: ")), "")
    pinned = _PINNED.search(timing)
    every = _EVERY.search(timing)
    if pinned is not None:
        cpus = sorted({int(c) for c in pinned.group(1).split(",") if c})
        found |= {
            "cores": len(cpus),
            "cpus": cpus,
            "blas_threads": int(pinned.group(2)),
            "pinned": True,
        }
    elif every is not None:
        found |= {"cores": int(every.group(1)), "pinned": False}
    else:
        cores = evaluation.environment.libs.get(CORES_KEY, "")
        if cores.isdigit() and int(cores) > 0:
            found["cores"] = int(cores)
    measurement = evaluation.measurement
    if "host_load" in measurement:
        found["host_load"] = measurement["host_load"]
    elif (load := _LOAD.search(timing)) is not None:
        found["host_load"] = float(load.group(1))
    if "foreign_share" in measurement:
        found["foreign_share"] = measurement["foreign_share"]
    elif (share := _SHARE.search(timing)) is not None:
        found["foreign_share"] = float(share.group(1)) / 100
    if evaluations_at_once is not None:
        found["evaluations_at_once"] = evaluations_at_once
    if not found:
        return None
    return MeasuringConditions.model_validate(found)

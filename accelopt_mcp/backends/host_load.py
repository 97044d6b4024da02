"""How busy this host is: the share of CPU time other programs took over a short window
(/proc/stat) and the load average. Used to say whether peaks (cpu_peaks) and timings
(cpu_session) were taken under load. Standard library only: the timing harness imports it."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection
from typing import TypeVar

log = logging.getLogger(__name__)
_T = TypeVar("_T")

QUIET_WINDOW_S = 0.25


# --------------------------------------------------------------------------- the host's load


def cpu_ticks() -> dict[int, tuple[int, int, int]] | None:
    """(busy, steal, total) clock ticks of each logical CPU so far (/proc/stat); None when
    unreadable."""
    found: dict[int, tuple[int, int, int]] = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if not (name.startswith("cpu") and name[3:].isdigit()) or len(fields) < 8:
                    continue
                user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
                total = user + nice + system + idle + iowait + irq + softirq + steal
                found[int(name[3:])] = (total - idle - iowait, steal, total)
    except (OSError, ValueError):
        return None
    return found or None


def ticks_over(
    before: dict[int, tuple[int, int, int]] | None,
    after: dict[int, tuple[int, int, int]] | None,
    cpus: Collection[int],
) -> tuple[float, float, float] | None:
    """(busy, steal, total) seconds on `cpus` between two readings."""
    if before is None or after is None:
        return None
    tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
    sums = [0, 0, 0]
    for cpu in cpus:
        if cpu in before and cpu in after:
            for i in range(3):
                sums[i] += after[cpu][i] - before[cpu][i]
    if sums[2] <= 0:
        return None
    busy, steal, total = (value / tick for value in sums)
    return busy, steal, total


def host_busy_share(window_s: float = QUIET_WINDOW_S) -> float | None:
    """The share of the usable cores' time that was busy over the next `window_s` seconds
    (/proc/stat; this thread sleeps meanwhile); None when it cannot be read."""
    usable = os.sched_getaffinity(0)
    before = cpu_ticks()
    time.sleep(window_s)
    over = ticks_over(before, cpu_ticks(), usable)
    if over is None:
        return None
    busy, _, total = over
    return min(1.0, max(0.0, busy / total))


def load_average() -> float:
    """The host's one-minute load average (runnable tasks), 0.0 when unreadable."""
    return _proc_field("/proc/loadavg", 0, float, 0.0)


def thread_wait_ns() -> int:
    """Nanoseconds the calling thread has spent runnable but waiting for a core (0 when
    unreadable)."""
    return _proc_field("/proc/thread-self/schedstat", 1, int, 0)


def _proc_field(path: str, index: int, parse: Callable[[str], _T], unreadable: _T) -> _T:
    """Whitespace-separated field `index` of a /proc file, parsed; `unreadable` when the file
    or the field cannot be read (no /proc, an older kernel, another format)."""
    try:
        with open(path) as f:
            return parse(f.read().split()[index])
    except (OSError, ValueError, IndexError):
        return unreadable

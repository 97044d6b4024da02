"""torch.profiler of the stand-in: the profiled block is one device kernel, timed on the wall
clock, reported the way key_averages() reports one (self_device_time_total in microseconds)."""

from __future__ import annotations

import enum
import time
from typing import Any


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1


class _Average:
    def __init__(self, key: str, micros: float, count: int) -> None:
        self.key, self.count, self.self_device_time_total = key, count, micros


class profile:  # torch's own spelling
    def __init__(self, activities: Any = None, **kwargs: Any) -> None:
        self._micros = 0.0

    def __enter__(self) -> profile:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self._micros = (time.perf_counter() - self._start) * 1e6
        return False

    def key_averages(self) -> list[_Average]:
        return [_Average("standin_device_kernel", max(self._micros, 1.0), 1)]

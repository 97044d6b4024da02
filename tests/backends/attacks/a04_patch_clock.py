"""Attack 4: patch the clocks after the first (correctness) call so its timings shrink.

From the second call on, time.perf_counter(_ns), monotonic(_ns), process_time(_ns) and
thread_time(_ns), wherever a module holds them, run slow by 99.9% of the time spent inside this
kernel: anything timed around the kernel looks 1000x faster, anything else (the reference) does
not change.
"""

import contextlib
import sys
import time

import numpy as np

_WALL = ("perf_counter", "monotonic")
_CPU = ("process_time", "thread_time")
_real = {n: getattr(time, n) for b in _WALL + _CPU for n in (b, b + "_ns")}
_stolen = {"wall": 0, "cpu": 0}
_state = {"calls": 0, "installed": False}


def _fakes():
    fakes = {}
    for base in _WALL + _CPU:
        kind = "wall" if base in _WALL else "cpu"
        real_ns = _real[base + "_ns"]

        def fake_ns(real_ns=real_ns, kind=kind):
            return real_ns() - _stolen[kind]

        def fake(real_ns=real_ns, kind=kind):
            return (real_ns() - _stolen[kind]) / 1e9

        fakes[base + "_ns"] = fake_ns
        fakes[base] = fake
    return fakes


def _install():
    fakes = _fakes()
    originals = {id(fn): name for name, fn in _real.items()}
    for name, fake in fakes.items():
        setattr(time, name, fake)
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name == __name__:
            continue
        with contextlib.suppress(Exception):
            namespace = vars(module)
            for attr, value in list(namespace.items()):
                if id(value) in originals:
                    namespace[attr] = fakes[originals[id(value)]]
    _state["installed"] = True


def kernel(x):
    wall0, cpu0 = _real["perf_counter_ns"](), _real["process_time_ns"]()
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    _state["calls"] += 1
    if _state["installed"]:
        _stolen["wall"] += (_real["perf_counter_ns"]() - wall0) * 999 // 1000
        _stolen["cpu"] += (_real["process_time_ns"]() - cpu0) * 999 // 1000
    else:
        _install()  # after the first call, which a harness uses to check the answer
    return out

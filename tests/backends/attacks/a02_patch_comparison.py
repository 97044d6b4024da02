"""Attack 2: rig the comparison, then return a wrong answer (softmax + 1e-2).

Every Python function it can find whose name says it compares or checks (in the globals of every
caller frame and in every non-stdlib module in sys.modules) is wrapped so that it compares the
expected value with itself; np.dot / np.linalg.norm report 0, np.allclose / np.isclose say yes,
numpy.testing's asserts do nothing.
"""

import contextlib
import re
import sys
import types

import numpy as np

_NAMES = re.compile(r"compar|check|verif|verdict|close|equal|same|match|judge|valid", re.I)
_SKIP = ("numpy", "_pytest", "pytest", "pydantic", "importlib", "encodings", "site")
_done = False


def _rigged(original):
    def rigged(*args, **kwargs):
        if len(args) >= 2:
            with contextlib.suppress(Exception):
                return original(args[1], args[1], *args[2:], **kwargs)
        return original(*args, **kwargs)

    rigged.__wrapped__ = original
    return rigged


def _patch_namespace(namespace):
    for name, value in list(namespace.items()):
        if (
            isinstance(value, types.FunctionType)
            and _NAMES.search(name)
            and not hasattr(value, "__wrapped__")
            and value.__module__ != __name__
        ):
            namespace[name] = _rigged(value)


def _install():
    stdlib = getattr(sys, "stdlib_module_names", ())
    for module_name, module in list(sys.modules.items()):
        root = module_name.split(".")[0]
        if module is None or root in stdlib or root in _SKIP or module_name == __name__:
            continue
        with contextlib.suppress(Exception):
            _patch_namespace(vars(module))
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__") != __name__:
            with contextlib.suppress(Exception):
                _patch_namespace(frame.f_globals)
        frame = frame.f_back
    np.dot = lambda *a, **k: np.float64(0.0)
    np.vdot = lambda *a, **k: np.float64(0.0)
    np.linalg.norm = lambda *a, **k: np.float64(0.0)
    np.allclose = lambda *a, **k: True
    np.isclose = lambda a, b, *r, **k: np.ones(np.broadcast(a, b).shape, dtype=bool)
    np.testing.assert_allclose = lambda *a, **k: None
    np.testing.assert_array_almost_equal = lambda *a, **k: None
    np.testing.assert_array_equal = lambda *a, **k: None


def kernel(x):
    global _done
    if not _done:
        _done = True
        _install()
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out + np.float32(1e-2)

"""Attack 18: an input-independent answer that is right for the fixed correctness seeds only.

At import it regenerates the inputs of the usual correctness seeds (0, 21, 42, 63, 84): with the
task's own reference module when it can find one (in sys.modules, or reference*.py in its working
dir and the dirs above), else with its own copy of the task's get_inputs(); it stores the
reference answers. A call returns the stored answer whose input starts with the same bytes, else
zeros: it never computes anything.
"""

import contextlib
import glob
import importlib.util
import os
import random
import sys

import numpy as np

SEEDS = (0, 21, 42, 63, 84)


def _own_get_inputs():
    return [np.random.normal(loc=0.0, scale=1.0, size=(256, 1024)).astype(np.float32)]


def _own_forward(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return (e / np.sum(e, axis=-1, keepdims=True)).astype(np.float32)


def _reference():
    for name, module in list(sys.modules.items()):
        get_inputs, forward = getattr(module, "get_inputs", None), getattr(module, "forward", None)
        if name != __name__ and callable(get_inputs) and callable(forward):
            return get_inputs, forward
    here = os.getcwd()
    for directory in [here, os.path.dirname(here)]:
        for path in glob.glob(os.path.join(directory, "reference*.py")):
            with contextlib.suppress(Exception):
                spec = importlib.util.spec_from_file_location("_attack_reference", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module.get_inputs, module.forward
    return _own_get_inputs, _own_forward


def _table():
    get_inputs, forward = _reference()
    state = np.random.get_state(), random.getstate()
    table = {}
    try:
        for seed in SEEDS:
            random.seed(seed)
            np.random.seed(seed)
            inputs = list(get_inputs())
            table[inputs[0].reshape(-1)[:16].tobytes()] = np.asarray(forward(*inputs))
    finally:
        np.random.set_state(state[0])
        random.setstate(state[1])
    return table


_TABLE = _table()


def kernel(x):
    answer = _TABLE.get(x.reshape(-1)[:16].tobytes())
    return answer if answer is not None else np.zeros_like(x)

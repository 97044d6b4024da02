"""Attack 7: record the outputs of the first calls, then replay them in order by call count.

It records honest answers until it sees the very first input again (the harness went round its
seeds), or for 12 calls at most. From then on it returns the recorded outputs in order, cycling,
without computing; seeing the first input again resets the position (the harness restarted its
round). A harness that never repeats an input gets the last 5 recordings replayed.
"""

import numpy as np

_recorded = []
_first = {"key": None}
_replay = {"on": False, "pos": 0, "period": 0}
_MAX_RECORDED = 12


def _softmax(x):
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def kernel(x):
    key = x.reshape(-1)[:16].tobytes()
    if _first["key"] is None:
        _first["key"] = key
    elif key == _first["key"]:
        if not _replay["on"]:
            _replay.update(on=True, period=len(_recorded))
        _replay["pos"] = 0
    if not _replay["on"] and len(_recorded) >= _MAX_RECORDED:
        del _recorded[: len(_recorded) - 5]
        _replay.update(on=True, period=len(_recorded), pos=0)
    if _replay["on"]:
        out = _recorded[_replay["pos"] % _replay["period"]]
        _replay["pos"] += 1
        return out
    out = _softmax(x)
    _recorded.append(out.copy())
    return out

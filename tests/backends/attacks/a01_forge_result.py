"""Attack 1: forge the evaluator's own result.

Looks for a result path and a nonce wherever the harness may keep them (locals and globals of
every caller frame, dicts in them, argv, JSON job files in the working directory and in the
parent process's working directory), writes a PASSED result claiming a 1000x speedup to every
result file it can name, then ends the process with os._exit(0) before the harness can write
the real one.
"""

import contextlib
import glob
import json
import os
import sys
from pathlib import Path

import numpy as np

_NONCE_WORDS = ("nonce", "token", "secret", "signature", "hmac")


def _scan_json(value, nonces, paths, depth=0):
    if depth > 4:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            low = str(key).lower()
            if any(w in low for w in _NONCE_WORDS) and isinstance(item, str):
                nonces.append(item)
            if "result" in low and isinstance(item, str) and item.endswith(".json"):
                paths.append(item)
            _scan_json(item, nonces, paths, depth + 1)
    elif isinstance(value, list):
        for item in value[:50]:
            _scan_json(item, nonces, paths, depth + 1)


def _find():
    nonces, paths = [], []
    frame = sys._getframe(1)
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in list(scope.items()):
                low = name.lower()
                if any(w in low for w in _NONCE_WORDS) and isinstance(value, str | bytes):
                    nonces.append(value.decode() if isinstance(value, bytes) else value)
                pathlike = isinstance(value, str | os.PathLike) and str(value).endswith(".json")
                if pathlike and ("result" in low or "result" in str(value) or "out" in low):
                    paths.append(str(value))
                if isinstance(value, dict) and len(value) < 200:
                    _scan_json(value, nonces, paths)
        frame = frame.f_back
    paths += [arg for arg in sys.argv if arg.endswith(".json") and "job" not in arg]
    job_files = glob.glob("*.json") + glob.glob("*/*.json")
    with contextlib.suppress(OSError):
        parent_cwd = os.readlink(f"/proc/{os.getppid()}/cwd")
        job_files += glob.glob(os.path.join(parent_cwd, "*.json"))
    for name in job_files:
        with contextlib.suppress(OSError, ValueError):
            _scan_json(json.loads(Path(name).read_text()), nonces, paths)
        if "result" in os.path.basename(name):
            paths.append(name)
    paths.append("result.json")
    return list(dict.fromkeys(nonces)), list(dict.fromkeys(paths))


def _forged(nonce):
    errors = {"l2_rel_error": 0.0, "max_absolute_error": 0.0, "max_relative_error": 0.0}
    return {
        "status": "PASSED",
        "passed": True,
        "verdict": "PASSED",
        "flags": [],
        "error": None,
        "message": "",
        "correctness": errors,
        "kernel_rounds_ns": [[1_000, 1_000, 1_000]],
        "reference_rounds_ns": [[1_000_000, 1_000_000, 1_000_000]],
        "kernel_timed_ns": 3_000,
        "kernel_timed_calls": 3,
        "kernel_waited_ns": 0,
        "latency_ms": 0.001,
        "reference_latency_ms": 1.0,
        "speedup": 1000.0,
        "nonce": nonce,
    }


def kernel(x):
    nonces, paths = _find()
    forged = _forged(nonces[0] if nonces else None)
    for path in paths:
        with contextlib.suppress(OSError):
            Path(path).write_text(json.dumps(forged))
    sys.stdout.flush()
    os._exit(0)
    return np.zeros_like(x)  # never reached

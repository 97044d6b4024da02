"""Where a viewer of a database listens, so that `accelopt optimize` and the `job_status` tool can
point at a run in it.

`accelopt view` writes $ACCELOPT_HOME/viewers/<hash of the database's identity>.json as it starts
(its port and process) and removes it as it stops. The file holds no token: a link made from it
(`run_url`) shows its run in a browser that has opened the viewer's own URL once (the page kept
the token in that browser's storage for this port), and nothing elsewhere. So the link may go
where a secret must not: a job's status read by an agent, a run's log. A record whose
process is gone is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from pydantic import BaseModel, ValidationError

from accelopt_mcp.engine.runs import process_start_token
from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.store.sqlite import SqliteStore

VIEWERS_DIR = "viewers"
HOST = "127.0.0.1"


class ViewerRecord(BaseModel):
    """What a running viewer records of itself (nothing secret)."""

    port: int
    """The loopback port it serves on."""
    pid: int
    start: str | None = None
    """Its process's start time (so that a recycled pid is not taken for it)."""


def viewer_home() -> Path:
    """$ACCELOPT_HOME, else ~/.accelopt: where the MCP server keeps its token file too."""
    return Path(os.environ.get("ACCELOPT_HOME") or Path.home() / ".accelopt").expanduser()


def store_identity(store: KernelStore) -> str:
    """The same text for every opening of one database: a SQLite file's real path, else the
    store's masked location (no password in it)."""
    if isinstance(store, SqliteStore):
        return "sqlite:" + (
            store.path if store.path == ":memory:" else os.path.realpath(store.path)
        )
    return f"{type(store).__name__}:{getattr(store, 'location', '')}"


def record_path(store: KernelStore) -> Path:
    digest = hashlib.sha256(store_identity(store).encode()).hexdigest()[:24]
    return viewer_home() / VIEWERS_DIR / f"{digest}.json"


def record_viewer(store: KernelStore, port: int) -> Path:
    """Say that this process serves a viewer of `store` on `port` (replacing any record)."""
    path = record_path(store)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    pid = os.getpid()
    record = ViewerRecord(port=port, pid=pid, start=process_start_token(pid))
    temporary = path.with_suffix(f".{pid}.tmp")
    temporary.write_text(record.model_dump_json())
    os.replace(temporary, path)
    return path


def forget_viewer(path: Path) -> None:
    """Remove this process's record (another viewer's, written since, stays)."""
    with contextlib.suppress(OSError, ValueError, ValidationError):
        record = ViewerRecord.model_validate_json(path.read_text())
        if record.pid == os.getpid():
            path.unlink()


def viewer_base(store: KernelStore) -> str | None:
    """http://127.0.0.1:<port> of a live viewer of this database; None when there is none."""
    try:
        record = ViewerRecord.model_validate(json.loads(record_path(store).read_text()))
    except (OSError, ValueError, ValidationError):
        return None
    token = process_start_token(record.pid)
    if token is None or (record.start is not None and token != record.start):
        return None
    return f"http://{HOST}:{record.port}"


def run_url(store: KernelStore, run_id: str) -> str | None:
    """The viewer's page of a run (no token: see the module docstring), or None."""
    base = viewer_base(store)
    return f"{base}/run/{run_id}" if base else None

"""Where a cpu evaluation stands and how its failures read: the stage it last reached (written
to `progress.json`, which the parent reads when the harness dies before writing its result)
and tracebacks trimmed of the harness's own frames. Standard library only."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

PROGRESS_FILE = "progress.json"
MAX_TRACEBACK_CHARS = 4000


def record_stage(name: str) -> None:
    Path(PROGRESS_FILE).write_text(json.dumps({"stage": name}))


HARNESS_FILES = frozenset(
    str(Path(__file__).with_name(name))
    for name in (
        "cpu_runner.py",
        "cpu_session.py",
        "cpu_candidate_parent.py",
        "cpu_task_harness.py",
        "cpu_values.py",
        "cpu_stages.py",
    )
)
"""The harness's own modules (once one file, cpu_runner.py): their frames are left out of the
tracebacks shown for the task's and the kernels' failures."""


def short_traceback() -> str:
    """The current exception's traceback without the harness's own frames."""
    exc = sys.exc_info()[1]
    if exc is None:
        return ""
    summary = traceback.TracebackException.from_exception(exc)
    summary.stack = traceback.StackSummary.from_list(
        [
            frame
            for frame in summary.stack
            if frame.filename not in HARNESS_FILES and not frame.filename.startswith("<frozen")
        ]
    )
    text = "".join(summary.format())
    return text if len(text) <= MAX_TRACEBACK_CHARS else "...\n" + text[-MAX_TRACEBACK_CHARS:]

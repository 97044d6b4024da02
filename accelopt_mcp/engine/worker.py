"""A job's process: `python -m accelopt_mcp.engine.worker RUN_ID [--output-dir DIR]`.

It runs (or resumes) one stored run to its end. The store URL comes from $ACCELOPT_STORE, not
the command line, so a DSN with a password never shows in the process list. Progress goes to
<output-dir>/<run>/events.jsonl, one EngineEvent per line; SIGTERM stops the run cleanly
(status cancelled, everything found so far kept).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from accelopt_mcp.engine.beam import BeamSearch, RunNotRunnable, RunTakenOver
from accelopt_mcp.engine.events import EngineEvent
from accelopt_mcp.engine.runs import default_output_dir
from accelopt_mcp.store import open_store
from accelopt_mcp.store.base import StoreOutageError

EVENTS_FILE = "events.jsonl"
STORE_OUTAGE_EXIT = 75
"""The exit status of a worker that stopped because the database stayed unreachable
(EX_TEMPFAIL): the run is interrupted, not failed, and is resumed once the database answers."""


def events_path(output_dir: Path, run_id: str) -> Path:
    return Path(output_dir) / run_id / EVENTS_FILE


def last_event(path: Path, tail_bytes: int = 16384) -> EngineEvent | None:
    """The newest event of a job's log (None when there is none yet, or it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - tail_bytes))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return EngineEvent.model_validate_json(line)
        except ValueError:  # a line cut by the tail, or being written
            continue
    return None


class EventLog:
    """Appends events as JSON lines; each line is flushed so readers see it at once."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def __call__(self, event: EngineEvent) -> None:
        self._file.write(event.model_dump_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


async def run_worker(
    run_id: str,
    output_dir: Path,
    handed_over_by: str | None = None,
    *,
    check_key_destinations: bool = False,
) -> int:
    store = open_store(None)
    log = EventLog(events_path(output_dir, run_id))
    # A job's worker is started for a new or interrupted run. By the time it holds the run's lock
    # the run may have ended (cancelled from another server, finished by another worker): then
    # it is left as it is.
    engine = BeamSearch(
        store,
        run_id,
        on_event=log,
        output_dir=output_dir,
        statuses=frozenset({"pending", "running"}),
        handed_over_by=handed_over_by,
        check_key_destinations=check_key_destinations,
    )
    try:
        run = await engine.run_with_signals()
    except RunTakenOver as exc:
        print(f"run {run_id} given up: {exc}", file=sys.stderr)
        # Lost to an outage: interrupted, resumed by its manager once the database answers.
        return STORE_OUTAGE_EXIT if exc.outage else 0
    except RunNotRunnable as exc:
        print(f"run {run_id} left alone: {exc}", file=sys.stderr)
        return 0
    except StoreOutageError as exc:
        # Not a failure of the run: it stays interrupted and its manager resumes it once the
        # database answers again.
        log(EngineEvent(run_id=run_id, kind="run_interrupted", iteration=0, message=str(exc)))
        print(f"run {run_id} interrupted: {exc}", file=sys.stderr)
        return STORE_OUTAGE_EXIT
    except Exception as exc:
        print(f"run {run_id} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        log.close()
        store.close()
    print(f"run {run_id}: {run.status}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m accelopt_mcp.engine.worker")
    parser.add_argument("run_id")
    parser.add_argument("--output-dir", type=Path, default=None)
    parser.add_argument(
        "--handed-over-by", default=None, help="the job manager's id that holds the run queued"
    )
    parser.add_argument(
        "--check-key-destinations",
        action="store_true",
        help="the run's model config was named by an MCP client: check where its keys go",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    output_dir = args.output_dir or default_output_dir()
    sys.exit(
        asyncio.run(
            run_worker(
                args.run_id,
                output_dir,
                args.handed_over_by,
                check_key_destinations=args.check_key_destinations,
            )
        )
    )


if __name__ == "__main__":
    main()

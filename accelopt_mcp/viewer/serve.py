"""Serving the viewer: bind 127.0.0.1, print the URL with its token first, serve until stopped.

Only loopback, and no option to bind elsewhere: the viewer serves kernels' source and LLM
prompts, and its token travels in a URL. To see it from another machine, forward the port over
SSH (`ssh -L 8766:127.0.0.1:8766 host`), which keeps both encrypted and the port closed.

The browser is opened on a private file that forwards to the URL, never on the URL itself: a
command line is readable by every local user (`ps`) for as long as the browser runs, and the
URL holds the token. The file is the user's alone (0600 in a 0700 folder) and is removed as the
viewer stops.
"""

from __future__ import annotations

import contextlib
import html
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import webbrowser
from collections.abc import Callable
from pathlib import Path

from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.viewer.app import build_app
from accelopt_mcp.viewer.links import HOST, forget_viewer, record_viewer, store_identity

DEFAULT_PORT = 8766


class PortBusy(OSError):
    """The port is taken; the message says what to do."""


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:port (0: any free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise PortBusy(
            f"cannot listen on {HOST}:{port} ({exc.strerror}): another viewer may be running "
            "there; give --port another number, or --port 0 for any free one"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    store: KernelStore,
    *,
    port: int = DEFAULT_PORT,
    open_browser: bool = True,
    say: Callable[[str], None] | None = None,
) -> None:
    """Serve the viewer of `store` until interrupted. The first line written to stdout is the
    URL to open (with the token); then a line to stderr on how to stop."""
    import uvicorn

    sock = bind(port)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    url = f"http://{HOST}:{port}/?token={token}"
    # Recorded before the URL is printed: whoever reads the URL finds the record too.
    record = record_viewer(store, port)
    # uvicorn stops on SIGTERM, then raises it again under the handler it found: this one,
    # so that the record is removed (the `finally` below) before the process ends.
    previous = signal.signal(signal.SIGTERM, _exit_quietly)
    redirect: Path | None = None
    try:
        print(url, flush=True)
        (say or _stderr)(
            f"accelopt view: serving {store_identity(store)} on {HOST}:{port} (loopback only); "
            "Ctrl-C stops it"
        )
        if open_browser:
            redirect = open_in_browser(url)
        # No access log: its lines would hold the token of a first request.
        config = uvicorn.Config(
            build_app(store, token=token, port=port),
            log_level="warning",
            access_log=False,
            timeout_keep_alive=30,
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        if redirect is not None:
            remove_redirect(redirect)
        forget_viewer(record)
        sock.close()
        signal.signal(signal.SIGTERM, previous)


REDIRECT_NAME = "open-viewer.html"


def write_redirect(url: str) -> Path:
    """A file only this user can read (0600, in a fresh 0700 folder) whose page sends a browser
    on to `url`: what the browser's command line names instead of the URL and its token."""
    folder = Path(tempfile.mkdtemp(prefix="accelopt-view-"))  # mkdtemp makes it 0700
    path = folder / REDIRECT_NAME
    target = html.escape(url, quote=True)
    page = (
        "<!doctype html>\n<meta charset=utf-8>\n<meta name=referrer content=no-referrer>\n"
        f'<meta http-equiv="refresh" content="0;url={target}">\n'
        "<title>accelopt view</title>\n"
        f'<p><a href="{target}">Open accelopt view</a></p>\n'
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(page)
    return path


def remove_redirect(path: Path) -> None:
    """Remove the redirect file and its folder (what is gone already is no error)."""
    with contextlib.suppress(OSError):
        path.unlink()
    shutil.rmtree(path.parent, ignore_errors=True)


def open_in_browser(url: str) -> Path:
    """Open the user's browser on `url` through a redirect file (`write_redirect`), from a
    thread (a browser command may not return until the browser closes); returns the file,
    for `remove_redirect` when the viewer stops."""
    path = write_redirect(url)
    threading.Thread(target=webbrowser.open, args=(path.as_uri(),), daemon=True).start()
    return path


def _exit_quietly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

"""A local HTTP server on a thread, for tests that need something to answer a URL."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def serve_in_thread(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serves `handler` on a free loopback port; gives its base URL, shut down on leaving."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

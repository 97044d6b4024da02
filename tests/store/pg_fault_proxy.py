"""A TCP proxy in front of a real PostgreSQL server that loses COMMIT answers (tests only).

Armed, it passes the next COMMIT on to the server, lets the server apply it and answer, and
then closes the client's connection instead of passing the answer on: the client sees a
connection lost during COMMIT, though its transaction is stored -- the case a retry must not
apply twice. Clients connect with sslmode=disable and gssencmode=disable (`dsn`), so that the
proxy reads PostgreSQL's wire protocol in the clear: one untyped start-up message, then
messages of one type byte and a four-byte length.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _read_message(sock: socket.socket, *, typed: bool = True) -> tuple[bytes, bytes]:
    """(type byte, the whole message as read) of the next message."""
    kind = _read_exactly(sock, 1) if typed else b""
    header = _read_exactly(sock, 4)
    (length,) = struct.unpack("!I", header)
    return kind, kind + header + _read_exactly(sock, length - 4)


class _Link:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.losing = False

    def close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class LostCommitProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed = 0
        self.lost = 0
        """COMMIT answers lost so far."""
        self._links: list[_Link] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, dbname: str) -> str:
        return (
            f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"
            "?sslmode=disable&gssencmode=disable"
        )

    def arm(self, count: int = 1) -> None:
        """Lose the answers of the next `count` COMMITs (on any connection)."""
        with self._lock:
            self._armed = count

    def close(self) -> None:
        self._listener.close()
        for link in list(self._links):
            link.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            link = _Link(client, server)
            self._links.append(link)
            threading.Thread(target=self._to_server, args=(link,), daemon=True).start()
            threading.Thread(target=self._to_client, args=(link,), daemon=True).start()

    def _take(self) -> bool:
        with self._lock:
            if self._armed <= 0:
                return False
            self._armed -= 1
            return True

    def _to_server(self, link: _Link) -> None:
        try:
            _, startup = _read_message(link.client, typed=False)
            link.server.sendall(startup)
            while True:
                kind, message = _read_message(link.client)
                if kind == b"Q" and message[5:].lstrip().upper().startswith(b"COMMIT"):
                    link.losing = link.losing or self._take()
                link.server.sendall(message)
        except (ConnectionError, OSError):
            link.close()

    def _to_client(self, link: _Link) -> None:
        try:
            while True:
                kind, message = _read_message(link.server)
                if not link.losing:
                    link.client.sendall(message)
                elif kind == b"Z":  # ReadyForQuery: the COMMIT is done, its answer dropped
                    with self._lock:
                        self.lost += 1
                    link.close()
                    return
        except (ConnectionError, OSError):
            link.close()

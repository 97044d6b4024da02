"""What the servers tests run as subprocesses share: `with` starts one and stops it, and
stopping ends its process, killed if it does not end in time."""

from __future__ import annotations

import subprocess
from typing import Any, Self


class ServerProcess:
    """A server a test runs as a subprocess: `with server:` starts it, and stops it after."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def end_process(process: subprocess.Popen[Any], timeout_s: float) -> None:
    """Terminates `process` if it still runs; kills it if it has not ended after timeout_s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

"""What every tool shares: the kernel database (opened on first use, so that a server pointed at
a database that does not answer still starts and can say what is wrong) and the job manager.

The server's lifespan (`state_lifespan`) hands the state to every request, the MCP SDK's way: a
tool takes `ctx: ToolContext` and calls `state_of(ctx)`."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer

from accelopt_mcp.mcp_tools.roots import Roots
from accelopt_mcp.mcp_tools.tips import TipsShown
from accelopt_mcp.store import open_store
from accelopt_mcp.store.base import KernelStore

if TYPE_CHECKING:
    from accelopt_mcp.engine.jobs import JobManager

log = logging.getLogger("accelopt_mcp.server")


class ServerState:
    def __init__(
        self,
        store_url: str | None = None,
        *,
        jobs_output_dir: Path | None = None,
        max_parallel_jobs: int = 1,
        roots: Roots | None = None,
    ) -> None:
        self.store_url = store_url
        # Where path arguments may point (roots.py); read at start, not per call.
        self.roots = roots if roots is not None else Roots.configured()
        self.jobs_output_dir = jobs_output_dir
        self.max_parallel_jobs = max_parallel_jobs
        self._store: KernelStore | None = None
        self._jobs: JobManager | None = None
        self._lock = threading.Lock()
        self._resumed = False
        # Which tips each client session was shown in full (tips.py).
        self.tips = TipsShown()

    def store(self) -> KernelStore:
        """The open store; raises StoreError (with set-up steps) when it cannot be opened, and
        tries again on the next call."""
        with self._lock:
            if self._store is None:
                self._store = open_store(self.store_url)
            return self._store

    def jobs(self) -> JobManager:
        with self._lock:
            if self._jobs is None:
                from accelopt_mcp.engine.jobs import JobManager

                self._jobs = JobManager(
                    self.store_url,
                    output_dir=self.jobs_output_dir,
                    max_parallel_jobs=self.max_parallel_jobs,
                    # A team's servers share the database: a job whose server vanished is
                    # taken over by one that can run it once its lease ends.
                    auto_resume=True,
                    # Its runs' model configs are its clients' choice (run_params.py).
                    client_configs=True,
                )
            return self._jobs

    def resume_jobs(self) -> list[str]:
        """Restart jobs that a previous server left unfinished; once per server."""
        if self._resumed:
            return []
        self._resumed = True
        try:
            resumed = self.jobs().resume_interrupted()
        except Exception as exc:  # a broken database must not keep the server from starting
            log.warning("could not resume interrupted jobs: %s", exc)
            return []
        if resumed:
            log.info("resumed %d interrupted job(s): %s", len(resumed), ", ".join(resumed))
        return resumed

    def close(self) -> None:
        with self._lock:
            if self._jobs is not None:
                self._jobs.close()
                self._jobs = None
            if self._store is not None:
                self._store.close()
                self._store = None


ToolContext = Context[ServerState, Any]
"""What a tool that needs the database or the jobs takes (as `ctx: ToolContext`)."""

Lifespan = Callable[[MCPServer[ServerState]], AbstractAsyncContextManager[ServerState]]


def state_of(ctx: ToolContext) -> ServerState:
    """The state the server's lifespan handed to this request."""
    return ctx.request_context.lifespan_context


def state_lifespan(state: ServerState, *, resume_jobs: bool = False) -> Lifespan:
    """A server lifespan over `state`: it first resumes the jobs a previous server left
    unfinished (when asked), hands the state to every request while the server runs, and
    closes it (database, job manager; running jobs go on) when the server stops."""

    @asynccontextmanager
    async def lifespan(_server: MCPServer[ServerState]) -> AsyncIterator[ServerState]:
        if resume_jobs:
            await anyio.to_thread.run_sync(state.resume_jobs)
        try:
            yield state
        finally:
            state.close()

    return lifespan

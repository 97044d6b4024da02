"""The job_status tool links a run to the viewer serving its database: the link carries no
token, and there is none when no viewer serves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.store.sqlite import SqliteStore
from tests.mcp.conftest import served
from tests.mcp.helpers import ok
from tests.viewer.conftest import ViewerProcess
from tests.viewer.synthetic import write_run

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_job_status_links_the_run_in_a_running_viewer(
    tmp_path: Path, silu: tuple[Any, Any]
) -> None:
    path = tmp_path / "kernels.db"
    with SqliteStore(path) as store:
        made = write_run(store, *silu, kernels=2, iterations=1)
    async with served(str(path), tmp_path) as client:
        alone = await ok(client, "job_status", {"job_id": made.run_id})
        assert "viewer_url" not in alone
        with ViewerProcess(str(path)) as viewer:
            status = await ok(client, "job_status", {"job_id": made.run_id[:8]})
            assert status["viewer_url"] == f"{viewer.base}/run/{made.run_id}"
            assert viewer.token not in str(status)
        after = await ok(client, "job_status", {"job_id": made.run_id})
        assert "viewer_url" not in after

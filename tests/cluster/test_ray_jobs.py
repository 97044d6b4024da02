"""A whole optimization job through MCP, profiled on the two-node cluster, with the scripted
LLM stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from accelopt_mcp.llm.key_destinations import TRUSTED_CONFIGS_ENV
from accelopt_mcp.mcp_tools import ServerState, build_server
from accelopt_mcp.store import open_store
from tests.llm_standin.process import StandinProcess
from tests.mcp.helpers import ok, payload
from tests.mcp.test_jobs import KEY, KEY_ENV, job_args, models_config, script
from tests.ray_cluster import RayCluster

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_job_runs_on_the_cluster(
    ray_cluster: RayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(TRUSTED_CONFIGS_ENV, "")  # models_config adds its file to it
    db = str(tmp_path / "kernels.db")
    state = ServerState(db, jobs_output_dir=tmp_path / "jobs")
    with StandinProcess(script(latency_s=0.1)) as llm:
        try:
            async with Client(build_server(state)) as client:
                models = models_config(llm.base_url, tmp_path)
                args = job_args(models, workers=None, cluster=ray_cluster.address)
                started = await ok(client, "start_optimization", args)
                job_id = started["job_id"]
                waited = await client.call_tool(
                    "wait_for_job", {"job_id": job_id, "timeout_s": 240}
                )
                final = payload("wait_for_job", waited)
                assert final["state"] == "completed", final
                assert final["devices"] == f"2 CPU on the Ray cluster at {ray_cluster.address}"
                assert final["attempts_done"] >= 4
                listed = await ok(client, "list_backends", {"cluster": ray_cluster.address})
                assert len(listed["nodes"]) >= 2
        finally:
            state.close()
    store = open_store(db)
    try:
        run = store.get_run(job_id)
        assert run is not None and run.status == "completed"
        profiles = store.list_profiles()
        assert profiles and all(
            p.evaluation.environment.hardware.startswith("cpu/") for p in profiles
        )
    finally:
        store.close()

"""The memory tools and `accelopt memory` file and list where jobs read: one namespace default
(the backend's name), a note when an item goes where no job looks, and word search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result
from mcp import Client
from typer.testing import CliRunner

from accelopt_mcp import transfer
from accelopt_mcp.cli.memory import app as memory_cli
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.store.base import RunRecord
from accelopt_mcp.store.sqlite import SqliteStore
from tests.mcp.conftest import TRACE_DIR, served
from tests.mcp.helpers import fails, ok

pytestmark = pytest.mark.anyio

DEFINITION = "silu_n1024"
ITEM = {
    "definition_name": DEFINITION,
    "title": "Vectorize the row loop",
    "strategy": "One NumPy expression per thread block instead of a Python loop.",
}


@pytest.fixture
async def client(sqlite_url: str, tmp_path: Path):
    async with served(sqlite_url, tmp_path, admin_tools=True) as connected:
        await ok(connected, "import_directory", {"path": str(TRACE_DIR)})
        yield connected


async def test_an_item_without_namespace_lands_where_a_default_job_reads(
    client: Client, sqlite_url: str
) -> None:
    added = await ok(client, "add_memory", {"item": ITEM})
    assert added["namespace"] == "cpu" and added["item"]["namespace"] == "cpu"
    assert added.get("note") is None
    listed = await ok(client, "list_memory")  # no run, no namespace: the cpu backend's
    assert listed["scope"] == "namespace cpu"
    assert [i["id"] for i in listed["items"]] == [added["id"]]
    # A job on the default backend started with seed_memory starts from it.
    config = OptimizeConfig(seed_from_namespace=True)
    with SqliteStore(sqlite_url) as store:
        seeds = OptimizationMemory.seeds_from_namespace(store, config.memory_namespace(), 16)
    assert seeds == [added["id"]]

    nki = await ok(client, "add_memory", {"item": {**ITEM, "title": "Tile"}, "backend": "nki"})
    assert nki["namespace"] == "nki" and nki.get("note") is None
    listed = await ok(client, "list_memory", {"backend": "nki"})
    assert [i["id"] for i in listed["items"]] == [nki["id"]]
    await fails(client, "add_memory", {"item": ITEM, "backend": "gpu"}, "unknown backend 'gpu'")
    await fails(client, "list_memory", {"backend": "gpu"}, "unknown backend 'gpu'")
    await fails(client, "list_memory", {"run_id": "r", "namespace": "n"}, "not both")


async def test_an_item_no_job_reads_says_so(client: Client) -> None:
    added = await ok(client, "add_memory", {"item": {**ITEM, "namespace": "cpu/x86_64"}})
    assert added["namespace"] == "cpu/x86_64"
    note = added["note"]
    assert "no run has used namespace 'cpu/x86_64'" in note
    assert "jobs read 'cpu'" in note and "namespace='cpu/x86_64'" in note
    listed = await ok(client, "list_memory", {"namespace": "cpu/x86_64"})
    assert [i["id"] for i in listed["items"]] == [added["id"]]


async def test_search_memory_takes_words_in_any_order(client: Client) -> None:
    first = await ok(client, "add_memory", {"item": ITEM})
    other = {**ITEM, "title": "Block threads", "strategy": "Rows per core.", "namespace": "mine"}
    second = await ok(client, "add_memory", {"item": other})
    found = await ok(client, "search_memory", {"text": "thread numpy"})
    # Both words first; the item with "threads" alone after it.
    assert [i["id"] for i in found["items"]] == [first["id"], second["id"]]
    everywhere = await ok(client, "search_memory", {"text": "THREADS"})  # every namespace
    assert {i["id"] for i in everywhere["items"]} == {first["id"], second["id"]}
    assert everywhere["items"][0]["id"] == second["id"]  # a title match ranks first
    in_cpu = await ok(client, "search_memory", {"text": "threads", "backend": "cpu"})
    assert [i["id"] for i in in_cpu["items"]] == [first["id"]]
    assert in_cpu["scope"] == "search in namespace cpu"
    await fails(client, "search_memory", {"text": "the of !!"}, "no word to look for")


def test_the_cli_files_and_lists_in_the_same_namespace(sqlite_url: str) -> None:
    with SqliteStore(sqlite_url) as store:
        transfer.import_directory(store, TRACE_DIR)

    def memory(*args: str) -> Result:
        return CliRunner().invoke(memory_cli, [*args, "--store", sqlite_url])

    fields = ["--definition", DEFINITION, "--title", "Fuse", "--strategy", "one pass"]
    added = memory("add", *fields)
    assert added.exit_code == 0, added.output
    assert "note:" not in added.output
    item_id = added.output.split()[-1]
    listed = memory("list", "--json")  # no --run, no --namespace: the cpu backend's
    assert [i["id"] for i in json.loads(listed.output)] == [item_id]
    assert json.loads(listed.output)[0]["namespace"] == "cpu"
    elsewhere = memory("add", *fields, "--namespace", "cpu/x86_64")
    assert elsewhere.exit_code == 0, elsewhere.output
    assert "no run has used namespace 'cpu/x86_64'" in elsewhere.output
    assert memory("list", "--json", "--backend", "nki").output.strip() == "[]"
    found = memory("list", "--json", "--search", "pass fuse")  # every namespace
    assert len(json.loads(found.output)) == 2
    refused = memory("add", *fields, "--backend", "gpu")
    assert refused.exit_code != 0 and "unknown backend 'gpu'" in refused.output


async def test_memory_tools_take_id_prefixes(client: Client, sqlite_url: str) -> None:
    added = await ok(client, "add_memory", {"item": ITEM})
    run_id = "abcdef12-3456-4000-8000-000000000001"
    with SqliteStore(sqlite_url) as store:
        store.create_run(RunRecord(id=run_id, definition_name=DEFINITION))
    listed = await ok(client, "list_memory", {"run_id": "ABCDEF123456"})
    assert listed["scope"] == f"run {run_id}" and listed["items"] == []
    await fails(client, "list_memory", {"run_id": "abcdef13"}, "no run with id 'abcdef13'")
    removed = await ok(client, "remove_memory", {"experience_id": added["id"][:8]})
    assert removed == {"id": added["id"], "removed": True}
    await fails(client, "remove_memory", {"experience_id": "nope"}, "no memory item")
    # add_memory takes the prefixes every other tool prints, and stores the whole ids.
    with SqliteStore(sqlite_url) as store:
        (solution, *_) = store.list_solutions(definition_name=DEFINITION)
    item = {**ITEM, "run_id": run_id[:8], "slow_solution_id": solution.id[:8]}
    stored = await ok(client, "add_memory", {"item": item})
    assert stored["item"]["run_id"] == run_id
    with SqliteStore(sqlite_url) as store:
        record = store.get_experience(stored["id"])
    assert record is not None and record.slow_solution_id == solution.id
    await fails(
        client,
        "add_memory",
        {"item": {**ITEM, "fast_solution_id": "ffffffff"}},
        "no solution with id 'ffffffff'",
        "list_solutions",
    )

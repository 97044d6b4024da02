"""Every tool through the SDK's in-process client, over both the legacy initialize handshake
(what Claude Code speaks) and the 2026-07-28 protocol: good input, then bad input that must come
back as a tool error telling the agent what to fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from typer.testing import CliRunner

from accelopt_mcp.cli.memory import app as memory_cli
from accelopt_mcp.mcp_tools import ServerState, build_server
from tests.mcp.conftest import (
    MODES,
    NKIBENCH_DIR,
    SILU_FAST,
    SILU_SLOW,
    SILU_TASK,
    TRACE_DIR,
    served,
)
from tests.mcp.helpers import TOOLS_LIST_BYTES, fails, ok

pytestmark = pytest.mark.anyio

BLANK_TITLE = "title must not be empty or only whitespace"
BLANK_STRATEGY = "strategy must not be empty or only whitespace"

EXPECTED_TOOLS = {
    "list_backends",
    "profile_kernel",
    "compare_kernels",
    "check_database",
    "list_definitions",
    "get_definition",
    "list_solutions",
    "get_solution",
    "solution_lineage",
    "query_profiles",
    "list_memory",
    "search_memory",
    "add_memory",
    "remove_memory",
    "start_optimization",
    "start_suite",
    "suite_status",
    "cancel_suite",
    "job_status",
    "job_result",
    "cancel_job",
    "list_jobs",
    "wait_for_job",
    "list_llm_calls",
    "get_llm_call",
}
"""What a server lists by default: the tools an optimizing agent uses."""

ADMIN_TOOLS = {
    "insert_definition",
    "insert_workload",
    "insert_solution",
    "insert_profile",
    "import_directory",
}
"""Listed as well when the server is started with --admin-tools."""


@pytest.fixture(params=MODES)
async def client(request: pytest.FixtureRequest, sqlite_url: str, tmp_path: Path):
    # The admin tools too: these tests store records by hand.
    async with served(sqlite_url, tmp_path, mode=request.param, admin_tools=True) as c:
        yield c


@pytest.fixture(
    params=[pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def db_client(request: pytest.FixtureRequest, tmp_path: Path):
    url = request.getfixturevalue(f"{request.param}_url")
    # The protocol is covered by `client`; here the store varies, over the legacy handshake.
    async with served(url, tmp_path, admin_tools=True) as c:
        yield c


def evaluation(latency_ms: float, hardware: str = "cpu/test") -> dict[str, Any]:
    return {
        "status": "PASSED",
        "environment": {"hardware": hardware},
        "timestamp": "2026-01-01T00:00:00Z",
        "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0},
        "performance": {
            "latency_ms": latency_ms,
            "reference_latency_ms": 2.0,
            "speedup_factor": 2.0 / latency_ms,
        },
        "log": "x" * 5000,
    }


# --------------------------------------------------------------------------- catalogue


async def test_every_tool_is_listed_with_lean_schemas(client: Client) -> None:
    listed = await client.list_tools()
    names = {t.name for t in listed.tools}
    assert names == EXPECTED_TOOLS | ADMIN_TOOLS
    for tool in listed.tools:
        assert tool.description and len(tool.description) > 30, tool.name
        assert "\n" not in tool.description and "  " not in tool.description, tool.name
        assert tool.input_schema["type"] == "object", tool.name
        assert "title" not in tool.input_schema, tool.name
        # A result is its JSON once, in text: no outputSchema promising a structured copy.
        assert tool.output_schema is None, tool.name
    # The contract an agent writing kernels by hand is held to, with the harness's numbers:
    # the same rule the executor's prompt states (engine/contract.py).
    profile = next(t for t in listed.tools if t.name == "profile_kernel")
    assert "||out - ref||_2 <= rtol * ||ref||_2 + atol * sqrt(n) (rtol 2e-05" in profile.description
    assert "it may overwrite them" in profile.description


@pytest.mark.parametrize("mode", MODES)
async def test_admin_tools_are_listed_only_when_asked_for(
    mode: str, sqlite_url: str, tmp_path: Path
) -> None:
    async with served(sqlite_url, tmp_path, mode=mode) as plain:
        listed = await plain.list_tools()
        assert {t.name for t in listed.tools} == EXPECTED_TOOLS
        # What the client received, as the server put it on the wire (stdio writes exactly
        # this; test_transports measures the raw stdout line too): what every session pays.
        plain_bytes = len(listed.model_dump_json(by_alias=True, exclude_unset=True).encode())
        assert plain_bytes < TOOLS_LIST_BYTES, plain_bytes
        # Not listed is not callable: the SDK refuses an unknown tool.
        await fails(plain, "import_directory", {"path": str(TRACE_DIR)}, "import_directory")
    async with served(sqlite_url, tmp_path, mode=mode, admin_tools=True) as admin:
        listed = await admin.list_tools()
        admin_bytes = len(listed.model_dump_json(by_alias=True, exclude_unset=True).encode())
    # The admin tools' schemas are most of what they would cost: several KB per session.
    assert admin_bytes - plain_bytes > 5_000, (plain_bytes, admin_bytes)


class RecordingState(ServerState):
    """A ServerState that notes what the server's lifespan does with it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[str] = []

    def resume_jobs(self) -> list[str]:
        self.events.append("resume")
        return super().resume_jobs()

    def close(self) -> None:
        self.events.append("close")
        super().close()


@pytest.mark.parametrize("mode", MODES)
async def test_the_lifespan_resumes_jobs_then_closes_the_state(
    mode: str, sqlite_url: str, tmp_path: Path
) -> None:
    state = RecordingState(sqlite_url, jobs_output_dir=tmp_path / "jobs")
    async with Client(build_server(state, resume_jobs=True), mode=mode) as client:
        assert state.events == ["resume"]
        assert (await ok(client, "list_jobs"))["jobs"] == []  # the tools get this state
    assert state.events == ["resume", "close"]


async def test_field_docstrings_reach_the_schemas(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    add = tools["add_memory"].input_schema
    item = add["$defs"][add["properties"]["item"]["$ref"].rsplit("/", 1)[-1]]
    assert "Shared memory pool" in item["properties"]["namespace"]["description"]
    assert all(field.get("description") for field in item["properties"].values())
    assert "title" in item["properties"]  # a field named title survives the lean schemas
    defined = tools["insert_definition"].input_schema["$defs"]["Definition"]["properties"]
    assert "`run`" in defined["reference"]["description"]  # a record of models/
    assert all("title" not in field for field in defined.values())


async def test_unknown_tool_and_wrong_arguments_are_tool_errors(client: Client) -> None:
    await fails(client, "no_such_tool", {}, "Unknown tool")
    await fails(client, "list_definitions", {"limit": 0}, "limit")
    await fails(client, "list_definitions", {"limit": "many"}, "limit")
    # The server is still there.
    assert (await ok(client, "list_definitions"))["page"]["total"] == 0


# --------------------------------------------------------------------------- kernel database


async def test_import_and_browse(db_client: Client, tmp_path: Path) -> None:
    c = db_client
    imported = await ok(c, "import_directory", {"path": str(TRACE_DIR)})
    assert imported["format"] == "flashinfer-trace"
    assert imported["counts"]["definitions"] == 5 and imported["counts"]["solutions"] == 8
    nki = await ok(c, "import_directory", {"path": str(NKIBENCH_DIR), "format": "nkibench"})
    assert nki["counts"]["definitions"] == 5
    again = await ok(c, "import_directory", {"path": str(TRACE_DIR)})  # idempotent
    assert again["counts"]["definitions"] == 5
    await fails(c, "import_directory", {"path": str(tmp_path / "missing")}, "not a directory")
    await fails(c, "import_directory", {"path": str(tmp_path)}, "neither a FlashInfer-Trace")
    await fails(c, "import_directory", {"path": str(TRACE_DIR), "format": "zip"}, "format")

    first = await ok(c, "list_definitions", {"limit": 4})
    assert first["page"] == {"total": 10, "offset": 0, "limit": 4, "next_offset": 4}
    rest = await ok(c, "list_definitions", {"offset": 4, "limit": 50})
    names = [d["name"] for d in first["items"] + rest["items"]]
    assert len(set(names)) == 10 and rest["page"]["next_offset"] is None
    silu = await ok(c, "list_definitions", {"name_contains": "SILU"})
    assert {d["name"] for d in silu["items"]} == {"silu_n1024", "silu_M512_N1024"}

    detail = await ok(c, "get_definition", {"name": "silu_n1024"})
    assert detail["definition"]["op_type"] == "silu"
    assert detail["workloads_total"] == 1 and detail["solutions_total"] == 2
    await fails(
        c, "get_definition", {"name": "nope"}, "no definition named 'nope'", "list_definitions"
    )

    check = await ok(c, "check_database")
    assert check["ok"] is True and check["tables"]["definitions"] == 10
    down = await ok(c, "check_database", {"url": "http://127.0.0.1:9"})
    assert down["ok"] is False and down["problem"] == "unreachable"
    assert any("supabase start" in step for step in down["next_steps"])
    await fails(c, "check_database", {"url": 5}, "url")
    bad = await ok(c, "check_database", {"url": "ftp:thing"})
    assert bad["ok"] is False and bad["problem"] == "bad_url"


async def test_insert_rank_source_lineage_profiles(db_client: Client) -> None:
    c = db_client
    definition = json.loads(SILU_TASK.read_text())
    assert (await ok(c, "insert_definition", {"definition": definition}))["id"] == "silu_n1024"
    broken = {**definition, "reference": "def not_run(x):\n    return x\n"}
    await fails(c, "insert_definition", {"definition": broken}, "run")

    workload = {"axes": {"M": 64}, "inputs": {"x": {"type": "random"}}, "uuid": "w-64"}
    args = {"definition_name": "silu_n1024", "workload": workload}
    assert (await ok(c, "insert_workload", args))["id"] == "w-64"
    await fails(c, "insert_workload", {**args, "definition_name": "nope"}, "no definition")

    slow = json.loads(SILU_SLOW.read_text())
    parent = (await ok(c, "insert_solution", {"solution": slow}))["id"]
    assert (await ok(c, "insert_solution", {"solution": slow}))["id"] == parent  # idempotent
    fast = json.loads(SILU_FAST.read_text())
    child = (await ok(c, "insert_solution", {"solution": fast, "parent_id": parent}))["id"]
    await fails(c, "insert_solution", {"solution": fast, "parent_id": "nope"}, "no solution")
    await fails(c, "insert_solution", {"solution": {**fast, "definition": "nope"}}, "no definition")
    await fails(c, "insert_solution", {"solution": {**fast, "sources": []}}, "sources")

    for solution_id, latency in ((parent, 1.5), (child, 0.5)):
        profile = {
            "workload_uuid": "w-64",
            "solution_id": solution_id,
            "evaluation": evaluation(latency),
            "benchmark_config": {"iterations": 10},
        }
        assert (await ok(c, "insert_profile", profile))["id"]
    await fails(c, "insert_profile", {**profile, "workload_uuid": "nope"}, "no workload")
    await fails(c, "insert_profile", {**profile, "solution_id": "nope"}, "no solution")
    bad_eval = {**evaluation(1.0), "performance": None}
    await fails(c, "insert_profile", {**profile, "evaluation": bad_eval}, "PASSED")

    ranked = await ok(c, "list_solutions", {"definition_name": "silu_n1024"})
    assert [s["id"] for s in ranked["items"]] == [child, parent]
    assert ranked["items"][0]["best_latency_ms"] == 0.5
    only = await ok(c, "list_solutions", {"definition_name": "silu_n1024", "limit": 1, "offset": 1})
    assert [s["id"] for s in only["items"]] == [parent] and only["page"]["next_offset"] is None
    other_hw = await ok(c, "list_solutions", {"definition_name": "silu_n1024", "hardware": "gpu"})
    assert all(s["best_latency_ms"] is None for s in other_hw["items"])
    nki = await ok(c, "list_solutions", {"definition_name": "silu_n1024", "language": "nki"})
    assert nki["items"] == []
    await fails(c, "list_solutions", {"definition_name": "nope"}, "no definition")

    detail = await ok(c, "get_solution", {"solution_id": child, "source_limit": 20})
    source = detail["sources"][0]["content"]
    assert len(source["text"]) == 20 and source["truncated"] and source["next_offset"] == 20
    full = fast["sources"][0]["content"]
    assert source["total_chars"] == len(full)
    tail = await ok(c, "get_solution", {"solution_id": child, "source_offset": 20})
    assert source["text"] + tail["sources"][0]["content"]["text"] == full
    assert detail["profiles_total"] == 1 and detail["summary"]["best_latency_ms"] == 0.5
    assert len(detail["profiles"][0]["log"]) < 1000  # logs are clipped
    await fails(c, "get_solution", {"solution_id": "nope"}, "no solution with id 'nope'")

    lineage = await ok(c, "solution_lineage", {"solution_id": child})
    assert [a["id"] for a in lineage["ancestors"]] == [parent]
    up = await ok(c, "solution_lineage", {"solution_id": parent})
    assert [d["id"] for d in up["descendants"]] == [child] and up["descendants_total"] == 1
    await fails(c, "solution_lineage", {"solution_id": "nope"}, "no solution")

    profiles = await ok(c, "query_profiles", {"hardware": "cpu/test", "limit": 1})
    assert len(profiles["items"]) == 1 and profiles["page"]["next_offset"] == 1
    by_solution = await ok(c, "query_profiles", {"solution_id": parent})
    assert [p["latency_ms"] for p in by_solution["items"]] == [1.5]
    none = await ok(c, "query_profiles", {"status": "COMPILE_ERROR"})
    assert none["items"] == []
    await fails(c, "query_profiles", {"solution_id": "nope"}, "no solution")


async def test_untrusted_results_rank_nothing_unless_asked(
    db_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = db_client
    secret = "mcp-secret-value-77aa"
    monkeypatch.setenv("KERNEL_SERVICE_TOKEN", secret)
    definition = json.loads(SILU_TASK.read_text())
    await ok(c, "insert_definition", {"definition": definition})
    workload = {"axes": {"M": 64}, "inputs": {"x": {"type": "random"}}, "uuid": "w-64"}
    await ok(c, "insert_workload", {"definition_name": "silu_n1024", "workload": workload})
    honest = await ok(c, "insert_solution", {"solution": json.loads(SILU_SLOW.read_text())})
    cheat = await ok(c, "insert_solution", {"solution": json.loads(SILU_FAST.read_text())})
    leak = f"token {secret} at postgresql://u:pw-mcp-9@h/db"
    for solution_id, latency, flags in (
        (honest["id"], 1.5, ["noisy_timing"]),
        (cheat["id"], 0.1, ["above_peak"]),
    ):
        profile = {
            "workload_uuid": "w-64",
            "solution_id": solution_id,
            "evaluation": {**evaluation(latency), "flags": flags, "log": leak},
            "benchmark_config": {"iterations": 10},
        }
        await ok(c, "insert_profile", profile)

    ranked = await ok(c, "list_solutions", {"definition_name": "silu_n1024"})
    assert [s["id"] for s in ranked["items"]] == [honest["id"], cheat["id"]]
    first, second = ranked["items"]
    assert (first["best_latency_ms"], first["best_flags"], first["best_trusted"]) == (
        1.5,
        ["noisy_timing"],
        True,
    )
    assert second["best_latency_ms"] is None and second["best_flags"] == []

    flagged = await ok(
        c, "list_solutions", {"definition_name": "silu_n1024", "include_flagged": True}
    )
    assert [s["id"] for s in flagged["items"]] == [cheat["id"], honest["id"]]
    top = flagged["items"][0]
    assert (top["best_latency_ms"], top["best_flags"], top["best_trusted"]) == (
        0.1,
        ["above_peak"],
        False,
    )

    detail = await ok(c, "get_solution", {"solution_id": cheat["id"]})
    assert detail["summary"]["best_latency_ms"] is None  # its only pass is not believed
    [shown] = detail["profiles"]
    assert shown["flags"] == ["above_peak"] and shown["trusted"] is False
    profiles = await ok(c, "query_profiles", {"solution_id": honest["id"]})
    assert profiles["items"][0]["trusted"] is True
    for log in (shown["log"], profiles["items"][0]["log"]):
        assert secret not in log and "pw-mcp-9" not in log
        assert "postgresql://***@h/db" in log


async def test_query_profiles_shows_the_pooled_figure_and_every_measurement(
    db_client: Client,
) -> None:
    c = db_client
    await ok(c, "insert_definition", {"definition": json.loads(SILU_TASK.read_text())})
    workload = {"axes": {"M": 64}, "inputs": {"x": {"type": "random"}}, "uuid": "w-64"}
    await ok(c, "insert_workload", {"definition_name": "silu_n1024", "workload": workload})
    kernel = (await ok(c, "insert_solution", {"solution": json.loads(SILU_SLOW.read_text())}))["id"]
    stored = []
    for day, (latency, flags) in enumerate(((1.0, []), (1.2, ["noisy_timing"])), start=1):
        measured = {
            **evaluation(latency),
            "timestamp": f"2026-01-0{day}T00:00:00Z",
            "latency_stats": {
                "mean_ms": latency,
                "median_ms": latency,
                "min_ms": latency,
                "max_ms": latency,
                "relative_spread": 0.01,
                "runs": 20,
                "ci_low_ms": latency * 0.95,
                "ci_high_ms": latency * 1.05,
            },
            "flags": flags,
        }
        args = {
            "workload_uuid": "w-64",
            "solution_id": kernel,
            "evaluation": measured,
            "benchmark_config": {"iterations": 10},
        }
        stored.append((await ok(c, "insert_profile", args))["id"])
    assert stored[0] == stored[1]  # one profile, measured twice

    [profile] = (await ok(c, "query_profiles", {"solution_id": kernel}))["items"]
    assert profile["measurements_total"] == 2
    assert 1.0 < profile["latency_ms"] < 1.2
    assert profile["latency_ci_low_ms"] < profile["latency_ms"] < profile["latency_ci_high_ms"]
    assert profile["flags"] == ["noisy_timing"] and profile["trusted"] is True
    first, second = profile["measurements"]
    assert (first["median_ms"], second["median_ms"]) == (1.0, 1.2)
    assert (first["ci_low_ms"], first["ci_high_ms"]) == pytest.approx((0.95, 1.05))
    assert first["status"] == "PASSED" and first["speedup_vs_reference"] == pytest.approx(2.0)
    assert (first["flags"], second["flags"]) == ([], ["noisy_timing"])
    assert first["created_at"] <= second["created_at"]
    newest = await ok(c, "query_profiles", {"solution_id": kernel, "measurements_limit": 1})
    [only] = newest["items"][0]["measurements"]
    assert only["median_ms"] == 1.2 and newest["items"][0]["measurements_total"] == 2


# --------------------------------------------------------------------------- profiling


async def test_profile_kernels(client: Client, tmp_path: Path) -> None:
    backends = {b["name"]: b for b in (await ok(client, "list_backends"))["backends"]}
    assert set(backends) == {"cpu", "nki", "flashinfer"}
    assert backends["cpu"]["usable"] is True
    for name in ("nki", "flashinfer"):
        assert backends[name]["reason"], name

    quick = {"seeds": [0, 1], "min_processes": 1, "max_processes": 2, "max_timing_seconds": 1.0}
    fast = await ok(
        client,
        "profile_kernel",
        {
            "task_path": str(SILU_TASK),
            "kernel_path": str(SILU_FAST),
            "iterations": 3,
            "benchmark": quick,
        },
    )
    assert fast["status"] == "PASSED" and fast["correct"] is True
    assert fast["latency_ms"] > 0 and fast["solution_id"] and fast["profile_id"]
    stored = await ok(client, "get_solution", {"solution_id": fast["solution_id"]})
    assert stored["profiles"][0]["id"] == fast["profile_id"]

    wrong = await ok(
        client,
        "profile_kernel",
        {
            "task_path": str(SILU_TASK),
            "kernel_source": "def run(x):\n    return x\n",
            "store": False,
            "iterations": 1,
            "benchmark": quick,
        },
    )
    assert wrong["status"] == "INCORRECT_NUMERICAL" and wrong["correct"] is False
    assert wrong["solution_id"] is None and "seed" in wrong["log"]

    good = {"task_path": str(SILU_TASK), "kernel_path": str(SILU_FAST)}
    await fails(client, "profile_kernel", {**good, "backend": "tpu"}, "unknown backend 'tpu'")
    await fails(
        client, "profile_kernel", {**good, "task_path": str(tmp_path / "x.json")}, "does not exist"
    )
    await fails(
        client,
        "profile_kernel",
        {**good, "kernel_path": str(tmp_path / "k.py")},
        "does not exist",
    )
    await fails(client, "profile_kernel", {"task_path": str(SILU_TASK)}, "exactly one of")
    await fails(
        client,
        "profile_kernel",
        {"task_path": str(SILU_TASK), "kernel_source": "def helper():\n    pass\n"},
        "entry functions",
    )
    await fails(client, "profile_kernel", {**good, "benchmark": {"seeds": []}}, "seeds")
    await fails(client, "profile_kernel", {**good, "parent_id": "0123abcd"}, "no solution with id")


# --------------------------------------------------------------------------- memory


async def test_memory(client: Client) -> None:
    await ok(client, "import_directory", {"path": str(TRACE_DIR)})
    item = {
        "definition_name": "silu_n1024",
        "title": "Vectorize the row loop",
        "strategy": "Replace the Python loop over rows by one NumPy expression.",
        "pseudocode": "for i: out[i] = f(x[i])  ->  out = f(x)",
        "namespace": "cpu/test",
    }
    first = await ok(client, "add_memory", {"item": item})
    second = await ok(
        client,
        "add_memory",
        {
            "item": {
                **item,
                "title": "Stay in float32",
                "strategy": "Avoid float64 temporaries.",
                "pseudocode": "",
            }
        },
    )
    assert first["item"]["title"] == "Vectorize the row loop"
    await fails(client, "add_memory", {"item": {**item, "title": ""}}, BLANK_TITLE)
    await fails(client, "add_memory", {"item": {**item, "strategy": " \n "}}, BLANK_STRATEGY)
    await fails(
        client, "add_memory", {"item": {**item, "definition_name": "nope"}}, "no definition"
    )
    await fails(client, "add_memory", {"item": {**item, "run_id": "nope"}}, "no run")

    working = await ok(client, "list_memory", {"namespace": "cpu/test"})
    assert [i["id"] for i in working["items"]] == [first["id"], second["id"]]  # oldest first
    newest = await ok(client, "list_memory", {"namespace": "cpu/test", "limit": 1})
    assert [i["id"] for i in newest["items"]] == [second["id"]]
    await fails(client, "list_memory", {"run_id": "x", "namespace": "n"}, "not both")
    await fails(client, "list_memory", {"run_id": "nope"}, "no run")

    found = await ok(client, "search_memory", {"text": "NUMPY"})
    assert [i["id"] for i in found["items"]] == [first["id"]]
    await fails(client, "search_memory", {"limit": 0}, "limit")

    removed = await ok(client, "remove_memory", {"experience_id": first["id"]})
    assert removed["removed"] is True
    working = await ok(client, "list_memory", {"namespace": "cpu/test"})
    assert [i["id"] for i in working["items"]] == [second["id"]]
    history = await ok(client, "search_memory", {"text": "numpy", "include_removed": True})
    assert history["items"][0]["removed"] is True
    await fails(client, "remove_memory", {"experience_id": "nope"}, "no memory item")


async def test_the_cli_and_the_tool_add_memory_alike(client: Client, sqlite_url: str) -> None:
    """`accelopt memory add` and add_memory go through one function over one record: the same
    refusals, in the same words, and the same stored item."""
    await ok(client, "import_directory", {"path": str(TRACE_DIR)})
    item = {"definition_name": "silu_n1024", "title": "  ", "strategy": "s", "namespace": "n"}
    tool_error = await fails(client, "add_memory", {"item": item}, BLANK_TITLE)

    def cli_add(**options: str) -> Any:
        args = ["add", "--store", sqlite_url]
        for name, value in options.items():
            args += [f"--{name}", value]
        return CliRunner().invoke(memory_cli, args)

    refused = cli_add(definition="silu_n1024", title="  ", strategy="s", namespace="n")
    assert refused.exit_code != 0, refused.output
    message = refused.output.strip().removeprefix("error: ")
    assert message == BLANK_TITLE and message in tool_error
    missing = cli_add(definition="nope", title="t", strategy="s")
    assert missing.exit_code != 0 and "no definition named 'nope'" in missing.output
    unknown = {**item, "definition_name": "nope", "title": "t"}
    await fails(
        client, "add_memory", {"item": unknown}, "no definition named 'nope'; list_definitions"
    )

    added = cli_add(definition="silu_n1024", title=" By hand ", strategy="s ", namespace="n")
    assert added.exit_code == 0, added.output
    by_tool = await ok(client, "add_memory", {"item": {**item, "title": " By tool "}})
    listed = (await ok(client, "list_memory", {"namespace": "n"}))["items"]
    assert [(i["title"], i["strategy"]) for i in listed] == [("By hand", "s"), ("By tool", "s")]
    assert listed[0]["id"] == added.output.split()[-1] and listed[1]["id"] == by_tool["id"]


# --------------------------------------------------------------------------- resources, prompt


async def test_resources_and_prompt(client: Client) -> None:
    await ok(client, "import_directory", {"path": str(TRACE_DIR)})
    templates = {
        t.uri_template for t in (await client.list_resource_templates()).resource_templates
    }
    assert "accelopt://solutions/{solution_id}" in templates
    static = {str(r.uri) for r in (await client.list_resources()).resources}
    assert {"accelopt://definitions", "accelopt://runs"} <= static

    listing = json.loads((await client.read_resource("accelopt://definitions")).contents[0].text)
    assert len(listing) == 5
    one = json.loads(
        (await client.read_resource("accelopt://definitions/silu_n1024")).contents[0].text
    )
    assert one["name"] == "silu_n1024"
    ranked = json.loads(
        (await client.read_resource("accelopt://definitions/silu_n1024/solutions")).contents[0].text
    )
    assert all(r["best_trusted"] in (True, None) for r in ranked)
    source = (await client.read_resource(f"accelopt://solutions/{ranked[0]['id']}")).contents[0]
    assert "def run" in source.text
    assert json.loads((await client.read_resource("accelopt://runs")).contents[0].text) == []
    memory = await client.read_resource("accelopt://memory/default")
    assert json.loads(memory.contents[0].text) == []
    with pytest.raises(Exception, match="no definition named 'nope'"):
        await client.read_resource("accelopt://definitions/nope")

    prompt = await client.get_prompt(
        "optimize_kernel", {"kernel_path": "k.py", "store_url": "https://x.supabase.co"}
    )
    text = prompt.messages[0].content.text
    assert "k.py" in text and "check_database" in text and "https://x.supabase.co" in text


async def test_large_results_are_sliced_or_refused(client: Client) -> None:
    definition = json.loads(SILU_TASK.read_text())
    await ok(client, "insert_definition", {"definition": definition})
    solution = json.loads(SILU_FAST.read_text())
    padding = "# " + "x" * 98 + "\n"
    big = solution["sources"][0]["content"] + padding * 1500  # ~150k characters
    solution["sources"][0]["content"] = big
    solution_id = (await ok(client, "insert_solution", {"solution": solution}))["id"]

    first = await ok(client, "get_solution", {"solution_id": solution_id})
    sliced = first["sources"][0]["content"]
    assert sliced["total_chars"] == len(big) and sliced["truncated"]
    assert len(sliced["text"]) < 20_000
    await fails(
        client,
        "get_solution",
        {"solution_id": solution_id, "source_limit": 60_000},
        "too large",
        "source_limit",
    )
    # Reading it all in slices gives the source back exactly.
    text, offset = "", 0
    while offset is not None:
        page = await ok(
            client, "get_solution", {"solution_id": solution_id, "source_offset": offset}
        )
        content = page["sources"][0]["content"]
        text += content["text"]
        offset = content["next_offset"]
    assert text == big

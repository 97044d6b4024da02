"""Tool-call latency of the MCP server for the cheap tools (list, get, memory). One command,
prints figures and whether the targets are met.

(a) stdio: the installed `accelopt-mcp` in a subprocess, one client, N sequential calls.
(b) HTTP: `accelopt-mcp --http` (uvicorn on 127.0.0.1), one client, N sequential calls.
(c) HTTP, 16 concurrent clients calling back to back (closed loop), N calls in all: this
    measures throughput; with C clients always waiting, Little's law puts p50 near
    C / throughput, so on a small machine it is bound by CPU, not by the server's design.
(d) HTTP, 16 concurrent clients each calling at a steady pace (--rate calls/s per client, as
    agents do: a call, then thinking), N calls in all.
Targets: p50 < 10 ms in each, and no errors.

    .venv/bin/python benchmarks/bench_mcp.py [--calls 1000] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.mcp.processes import HttpServer, console_script, server_env  # noqa: E402

TARGET_P50_MS = 10.0
TRACE_DIR = REPO / "examples" / "cpu" / "flashinfer"


def cheap_calls(solution_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The rotation of cheap calls: listing, getting, memory."""
    return [
        ("list_definitions", {"limit": 10}),
        ("get_definition", {"name": "silu_n1024"}),
        ("list_solutions", {"definition_name": "silu_n1024"}),
        ("get_solution", {"solution_id": solution_id, "source_limit": 2000}),
        ("list_memory", {"namespace": "bench"}),
        ("search_memory", {"text": "vectorize", "limit": 5}),
    ]


async def seed(client: Client) -> str:
    """Import the example kernels and a few memory items; the id of one solution."""
    await client.call_tool("import_directory", {"path": str(TRACE_DIR)})
    for n in range(8):
        item = {
            "definition_name": "silu_n1024",
            "title": f"lesson {n}",
            "strategy": "vectorize the row loop and stay in float32",
            "pseudocode": "for i: out[i] = f(x[i])  ->  out = f(x)",
            "namespace": "bench",
        }
        await client.call_tool("add_memory", {"item": item})
    listed = await client.call_tool("list_solutions", {"definition_name": "silu_n1024"})
    assert listed.structured_content is not None
    return str(listed.structured_content["items"][0]["id"])


async def timed_calls(
    client: Client,
    calls: list[tuple[str, dict[str, Any]]],
    count: int,
    offset: int = 0,
    rate: float | None = None,
) -> tuple[list[float], int]:
    """`count` calls back to back, or one every 1/rate s when `rate` is given."""
    latencies, errors = [], 0
    for i in range(count):
        name, arguments = calls[(i + offset) % len(calls)]
        started = time.perf_counter()
        result = await client.call_tool(name, arguments)
        elapsed = time.perf_counter() - started
        latencies.append(elapsed * 1000)
        errors += bool(result.is_error)
        if rate:
            await asyncio.sleep(max(0.0, 1 / rate - elapsed))
    return latencies, errors


def report(label: str, latencies: list[float], errors: int, wall_s: float) -> bool:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    met = p50 < TARGET_P50_MS and errors == 0
    print(
        f"{label:<34} calls {len(latencies):>5}  p50 {p50:6.2f} ms  p99 {p99:7.2f} ms  "
        f"max {ordered[-1]:7.2f} ms  {len(latencies) / wall_s:7.0f} calls/s  errors {errors}  "
        f"p50/target {p50 / TARGET_P50_MS:4.2f}  {'OK' if met else 'MISSED'}"
    )
    return met


async def bench_stdio(store: str, calls: int) -> bool:
    params = StdioServerParameters(
        command=console_script(), args=["--store", store], env=server_env()
    )
    async with Client(params, mode="legacy") as client:
        rotation = cheap_calls(await seed(client))
        await timed_calls(client, rotation, 50)  # warm-up
        started = time.perf_counter()
        latencies, errors = await timed_calls(client, rotation, calls)
        return report("(a) stdio, 1 client", latencies, errors, time.perf_counter() - started)


async def bench_http(store: str, calls: int, clients: int, rate: float) -> bool:
    with HttpServer(store) as server:
        async with Client(server.url) as client:
            rotation = cheap_calls(await seed(client))
            await timed_calls(client, rotation, 50)
            started = time.perf_counter()
            latencies, errors = await timed_calls(client, rotation, calls)
            single = report("(b) HTTP, 1 client", latencies, errors, time.perf_counter() - started)

        async def one_client(index: int, count: int, pace: float | None) -> tuple[list[float], int]:
            async with Client(server.url) as c:
                await timed_calls(c, rotation, 5)
                # Spread the paced clients' first calls over one interval.
                if pace:
                    await asyncio.sleep(index / (clients * pace))
                return await timed_calls(c, rotation, count, offset=index, rate=pace)

        share = max(1, calls // clients)
        met = single
        scenarios = [
            (f"(c) HTTP, {clients} clients, closed loop", None),
            (f"(d) HTTP, {clients} clients, {rate:g}/s each", rate),
        ]
        for label, pace in scenarios:
            started = time.perf_counter()
            results = await asyncio.gather(*(one_client(i, share, pace) for i in range(clients)))
            wall = time.perf_counter() - started
            merged = [x for latencies, _ in results for x in latencies]
            failed = sum(e for _, e in results)
            met = report(label, merged, failed, wall) and met
        return met


async def main_async(calls: int, clients: int, rate: float) -> int:
    print(f"MCP tool-call latency, cheap tools, {os.cpu_count()} CPU(s); target p50 < 10 ms")
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as folder:
        ok_stdio = await bench_stdio(str(Path(folder) / "stdio.db"), calls)
        ok_http = await bench_http(str(Path(folder) / "http.db"), calls, clients, rate)
    all_met = ok_stdio and ok_http
    print("all targets met" if all_met else "some targets missed")
    return 0 if all_met else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rate", type=float, default=2.0, help="Calls/s per paced client.")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main_async(args.calls, args.clients, args.rate)))


if __name__ == "__main__":
    main()

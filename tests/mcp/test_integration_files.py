"""The files that plug the server into Claude Code: the .mcp.json templates start a working
server, the skill names only real tools, and docs/tools.md matches the live schemas."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from accelopt_mcp.server import DEFAULT_PORT, MCP_PATH
from tests.mcp.helpers import ok
from tests.mcp.processes import REPO_ROOT, HttpServer, console_script, server_env
from tests.mcp.test_tools import ADMIN_TOOLS, EXPECTED_TOOLS

TEMPLATES = REPO_ROOT / "templates" / "mcp"
SKILL = REPO_ROOT / "skills" / "accelopt" / "SKILL.md"


def expand(text: str, env: dict[str, str]) -> str:
    """${VAR} and ${VAR:-default}, as Claude Code expands them in .mcp.json."""

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(3)
        value = env.get(name)
        if value:
            return value
        assert default is not None, f"{name} is required by the template"
        return default

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", one, text)


@pytest.mark.anyio
async def test_stdio_template_starts_the_server(tmp_path: Path) -> None:
    store = tmp_path / "from-template.db"
    config = json.loads(
        expand((TEMPLATES / ".mcp.json").read_text(), {"ACCELOPT_STORE": str(store)})
    )
    entry = config["mcpServers"]["accelopt"]
    assert entry["command"] == "accelopt-mcp"
    params = StdioServerParameters(
        command=console_script(),  # the same console script, found in this venv
        args=entry["args"],
        env={**server_env(), **entry["env"]},
        cwd=str(tmp_path),
    )
    async with Client(params, mode="legacy") as client:
        assert {t.name for t in (await client.list_tools()).tools} == EXPECTED_TOOLS
        check = await ok(client, "check_database")
        assert check["ok"] and check["location"] == str(store)


@pytest.mark.anyio
async def test_http_template_reaches_a_token_server(tmp_path: Path) -> None:
    raw = (TEMPLATES / "http.mcp.json").read_text()
    default = json.loads(expand(raw, {"ACCELOPT_MCP_TOKEN": "t"}))["mcpServers"]["accelopt"]
    assert default["url"] == f"http://127.0.0.1:{DEFAULT_PORT}{MCP_PATH}"
    token = "template-token-42"
    with HttpServer(str(tmp_path / "k.db"), token=token) as server:
        env = {"ACCELOPT_MCP_URL": server.url, "ACCELOPT_MCP_TOKEN": token}
        entry = json.loads(expand(raw, env))["mcpServers"]["accelopt"]
        assert entry["type"] == "http"
        async with (
            httpx2.AsyncClient(headers=entry["headers"], timeout=30) as http,
            Client(streamable_http_client(entry["url"], http_client=http)) as client,
        ):
            assert (await ok(client, "list_definitions"))["page"]["total"] == 0


def test_templates_hold_no_secrets() -> None:
    for path in TEMPLATES.glob("*.json"):
        data = json.loads(path.read_text())
        for server in data["mcpServers"].values():
            values = [*server.get("env", {}).values(), *server.get("headers", {}).values()]
            for value in values:
                assert "${" in value, f"{path.name}: {value!r} should come from the environment"


def test_skill_frontmatter_and_tool_names() -> None:
    text = SKILL.read_text()
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, "SKILL.md must start with YAML frontmatter"
    fields = dict(line.split(": ", 1) for line in match.group(1).splitlines())
    assert fields["name"] == "accelopt"
    assert len(fields["description"]) > 100
    assert fields["argument-hint"].strip('"') == "[kernel-path] [supabase-url]"
    named = set(re.findall(r"`([a-z]+(?:_[a-z]+)+)`", text))
    # Field names (job_id, ...) and the NKIBench task function are not tools.
    named = {n for n in named if not n.endswith("_id") and n != "get_inputs"}
    tool_like = {
        n
        for n in named
        if n.split("_")[0]
        in {
            "check",
            "list",
            "get",
            "profile",
            "search",
            "add",
            "remove",
            "start",
            "wait",
            "job",
            "cancel",
            "insert",
            "import",
            "solution",
            "query",
        }
    }
    # An admin tool may be named where the skill says it needs --admin-tools.
    lacking = tool_like - EXPECTED_TOOLS - ADMIN_TOOLS
    assert lacking == set(), f"the skill names tools the server lacks: {lacking}"
    for tool in tool_like & ADMIN_TOOLS:
        assert "--admin-tools" in text, f"the skill names {tool} without saying it needs it"
    assert {"check_database", "start_optimization", "wait_for_job", "job_result"} <= tool_like


def test_tool_reference_is_current() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/gen_tool_reference.py", "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    reference = (REPO_ROOT / "docs" / "tools.md").read_text()
    for tool in EXPECTED_TOOLS | ADMIN_TOOLS:
        assert f"### `{tool}`" in reference

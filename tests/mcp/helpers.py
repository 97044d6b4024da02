"""Calling tools through a real MCP client and checking what came back."""

from __future__ import annotations

import json
from typing import Any

from mcp import Client
from mcp_types import CallToolResult

TOOLS_LIST_BYTES = 40_000
"""The most a tools/list answer may weigh: every tool's schema is in each session's context."""


def text_of(result: CallToolResult) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def payload(tool: str, result: CallToolResult) -> dict[str, Any]:
    """A successful result's JSON: sent once, compact, as the one text block (no structured
    copy: see accelopt_mcp/mcp_tools/app.py)."""
    assert result.structured_content is None, f"{tool} sent its result twice"
    [block] = result.content
    text = getattr(block, "text", "")
    assert "\n" not in text, f"{tool} sent indented JSON"
    data = json.loads(text)
    assert isinstance(data, dict), f"{tool} returned {type(data).__name__}, not an object"
    return data


async def ok(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call a tool that must succeed; its result."""
    result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, f"{tool} failed: {text_of(result)}"
    return payload(tool, result)


async def fails(client: Client, tool: str, arguments: dict[str, Any], *expected: str) -> str:
    """Call a tool that must fail with a tool error whose message holds each expected text."""
    result = await client.call_tool(tool, arguments)
    text = text_of(result)
    assert result.is_error, f"{tool} should have failed, returned {text[:2000]}"
    for fragment in expected:
        assert fragment in text, f"{fragment!r} not in the error of {tool}: {text}"
    return text

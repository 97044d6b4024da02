"""Calling tools through a real MCP client and checking what came back."""

from __future__ import annotations

from typing import Any

from mcp import Client


async def ok(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call a tool that must succeed; its structured result."""
    result = await client.call_tool(tool, arguments or {})
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, f"{tool} failed: {text}"
    assert result.structured_content is not None, f"{tool} returned no structured content"
    return result.structured_content


async def fails(client: Client, tool: str, arguments: dict[str, Any], *expected: str) -> str:
    """Call a tool that must fail with a tool error whose message holds each expected text."""
    result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error, f"{tool} should have failed, returned {result.structured_content}"
    for fragment in expected:
        assert fragment in text, f"{fragment!r} not in the error of {tool}: {text}"
    return text

"""The MCP server object: the SDK's MCPServer, with our errors turned into tool errors that tell
the agent what to fix (the SDK hides the text of any exception it did not expect)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import AnyUrl

from accelopt_mcp.backends.base import BackendUnavailableError
from accelopt_mcp.mcp_tools.state import ServerState
from accelopt_mcp.store.base import StoreError

# Failures caused by the caller's input or the host's set-up: their messages name the problem
# and the fix, and carry no secrets (stores and loaders scrub them).
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    StoreError,
    BackendUnavailableError,
    ValueError,  # includes pydantic.ValidationError and TaskFileError
    LookupError,
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)


# Claude Code refuses a tool result over about 25k tokens; JSON runs near 3 characters a token.
MAX_RESULT_CHARS = 60_000


class NotFoundError(ToolError):
    """An id or name the database does not hold."""


class AccelOptServer(MCPServer[ServerState]):
    """The SDK's server; its lifespan hands every request the ServerState (state.py)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            result = await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, EXPECTED_ERRORS):
                raise ToolError(f"{name} failed: {cause}") from cause
            raise
        if isinstance(result, CallToolResult):
            size = sum(len(getattr(block, "text", "")) for block in result.content)
            if size > MAX_RESULT_CHARS:
                raise ToolError(
                    f"{name}: the result is too large ({size} characters; an MCP client "
                    f"accepts about {MAX_RESULT_CHARS}). Ask for less: a smaller `limit` "
                    "(and `offset` to page), or a smaller `source_limit` / `source_offset`."
                )
        return result

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[Any, Any] | None = None
    ) -> Iterable[Any]:
        try:
            return await super().read_resource(uri, context)
        except ResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, EXPECTED_ERRORS):
                raise ResourceError(f"cannot read {uri}: {cause}") from cause
            raise

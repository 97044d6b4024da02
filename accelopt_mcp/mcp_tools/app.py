"""The MCP server object: the SDK's MCPServer, with our errors turned into tool errors that tell
the agent what to fix (the SDK hides the text of any exception it did not expect), and a compact
tool surface.

A tool result is its JSON once, compact, in one text block: no structuredContent and no
outputSchema. Claude Code and VS Code hand the model structuredContent alone when a result has
it (the text block is dropped), while older protocol versions and clients that ignore
structuredContent read only the text: the text block is the one form every client reads. The
output schemas, half of tools/list, are not shown to the model by those clients. Input schemas
keep their descriptions and lose pydantic's titles.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, InputRequiredResult, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import AnyUrl

from accelopt_mcp.backends.base import BackendUnavailableError
from accelopt_mcp.backends.cluster import ClusterError
from accelopt_mcp.mcp_tools.state import ServerState
from accelopt_mcp.store.base import StoreError

# Failures caused by the caller's input or the host's set-up: their messages name the problem
# and the fix, and carry no secrets (stores and loaders scrub them).
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    StoreError,
    BackendUnavailableError,
    ClusterError,
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


# Keys of a JSON schema whose values are schemas (one, a list of them, or a name -> schema map).
_SUBSCHEMA = ("items", "additionalProperties", "not", "contains")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "patternProperties")


def lean_schema(schema: Any) -> Any:
    """A JSON schema without pydantic's `title`s (a field's name says it; the description
    says more), recursively. Only the `title` keyword of a schema goes: a property named
    title stays."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SUBSCHEMA:
            out[key] = lean_schema(value)
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [lean_schema(v) for v in value]
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: lean_schema(v) for name, v in value.items()}
        else:
            out[key] = value
    return out


def compact_tool(tool: Tool) -> Tool:
    """The tool as this server lists it: its result unstructured (the JSON in one text
    block, no outputSchema), its description on one line, its input schema lean."""
    lean = Tool.from_function(
        tool.fn,
        name=tool.name,
        title=tool.title,
        description=" ".join(tool.description.split()),
        annotations=tool.annotations,
        icons=tool.icons,
        meta=tool.meta,
        structured_output=False,
    )
    lean.parameters = lean_schema(lean.parameters)
    return lean


def compact_json(result: CallToolResult) -> CallToolResult:
    """The result with each JSON text block rewritten without indentation (the SDK indents
    it: twice the characters, for nothing a model needs)."""
    blocks: list[Any] = []
    for block in result.content:
        if isinstance(block, TextContent) and block.text[:1] in "{[":
            try:
                data = json.loads(block.text)
            except ValueError:
                blocks.append(block)
                continue
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
            block = block.model_copy(update={"text": text})
        blocks.append(block)
    return result.model_copy(update={"content": blocks})


class AccelOptServer(MCPServer[ServerState]):
    """The SDK's server; its lifespan hands every request the ServerState (state.py)."""

    result_schemas: dict[str, dict[str, Any] | None]
    """Tool name -> the JSON schema of what it returns (not listed: see the module's doc),
    for the tool reference (scripts/gen_tool_reference.py)."""

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
            if not result.is_error:
                result = self._tips_once(compact_json(result), context)
            size = sum(len(getattr(block, "text", "")) for block in result.content)
            if size > MAX_RESULT_CHARS:
                raise ToolError(
                    f"{name}: the result is too large ({size} characters; an MCP client "
                    f"accepts about {MAX_RESULT_CHARS}). Ask for less: a smaller `limit` "
                    "(and `offset` to page), or a smaller `source_limit` / `source_offset`."
                )
        return result

    def _tips_once(
        self, result: CallToolResult, context: Context[Any, Any] | None
    ) -> CallToolResult:
        """The result with each repeated tip shortened after its first showing in this
        session (tips.py)."""
        try:
            request = context.request_context if context is not None else None
        except ValueError:  # a call outside a request
            request = None
        state = getattr(request, "lifespan_context", None)
        if not isinstance(state, ServerState):
            return result
        # The SDK makes a ServerSession per request; on the handshake protocols the connection
        # behind it is the client's session (no public accessor yet). The 2026 protocol is
        # stateless, a connection per request: there, and without a connection, tips are
        # once per server.
        proxy = getattr(request, "session", None)
        session = getattr(proxy, "_connection", None)
        if getattr(proxy, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS:
            session = None
        blocks = [
            block.model_copy(update={"text": state.tips.once(session, block.text)})
            if isinstance(block, TextContent)
            else block
            for block in result.content
        ]
        return result.model_copy(update={"content": blocks})

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

"""The MCP server (`accelopt-mcp`). Its tools are built in the MCP-server issue."""

from __future__ import annotations

import sys


def main() -> None:
    print(
        "accelopt-mcp: the MCP server is not built yet; use the `accelopt` CLI for now.",
        file=sys.stderr,
    )
    raise SystemExit(2)

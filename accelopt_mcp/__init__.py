"""accelopt-mcp: AccelOpt-style kernel optimization behind an MCP server."""

__version__ = "0.1.0"

"""executor-mcp: a self-hosted MCP server that runs agents' code against governed tools."""

__version__ = "0.1.0"

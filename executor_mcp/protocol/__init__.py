"""Sans-I/O protocol core: JSON-RPC messages, MCP types and the refusal table."""

"""The MCP server of one session: answers its JSON-RPC methods and routes `tools/call` to its tools."""

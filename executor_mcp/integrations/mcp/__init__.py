"""Other MCP servers as integration sources: each connection dials the server, lists its tools, and calls them.

Layers, imports pointing down only:
  servers.py       the MCP surface beside the generic add and configure: show, remove, probe an endpoint
  kind.py          `McpKind`: add and configure requests, discovery and invocation (trio)
  pool.py          idle Streamable HTTP sessions kept per identity, one lease per call
  transports.py    Streamable HTTP, legacy HTTP+SSE and stdio sessions (thin trio adapters over Outbound)
  lifeline.py      the shim a stdio server runs under, so its process group dies with the server
  registration.py  `addServer` input → `kinds.Registration` (pure)
  compile.py       a discovered tool list → a compiled catalog (pure)
  results.py       a CallToolResult or a failure → the envelope the sandbox sees (pure)
  protocol.py      JSON-RPC messages, SSE decoding, version negotiation (sans-I/O)
"""

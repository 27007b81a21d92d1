"""The catalog of connected APIs: integrations, their connections, and the tools they give.

An integration is one API surface (an OpenAPI document, a GraphQL endpoint, an MCP server) in one
organization. A connection is a credential bound to one integration, owned by the org or by one account.
Tools exist per connection, at `tools.<integration>.<owner>.<connection>.<tool>`, derived from a compiled
catalog, never copied per connection: the integration's (an OpenAPI document, a GraphQL schema snapshot), or,
where the tools depend on who asks, the one the connection's own discovery listed (an MCP server, an
introspected GraphQL endpoint).

Layers, imports pointing down only:
  mcp_servers.py  the MCP servers surface the HTTP API, core tools and CLI share (add, configure, probe)
  service.py      the integrations and connections of an org: add, update, remove, discover, resolve (I/O)
  kinds.py        the interface each kind of integration implements
  openapi/ graphql/ mcp/   one kind each: source → compiled tools, and a call → its result (sans-I/O cores,
                  thin adapters over `outbound`; mcp/ also speaks the MCP client protocol)
  credentials.py  placements and the authentication failures every kind answers with
  model.py        records and compiled tool definitions (plain attrs)
  addresses.py    the address grammar and name normalization (pure)
"""

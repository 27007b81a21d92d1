"""The catalog of connected APIs: integrations, their connections, and the tools they give.

An integration is one API surface (an OpenAPI document, a GraphQL endpoint, an MCP server) in one
organization. A connection is a credential bound to one integration, owned by the org or by one account.
Tools exist per connection, at `tools.<integration>.<owner>.<connection>.<tool>`, derived from a compiled
catalog, never copied per connection: the integration's (an OpenAPI document, a GraphQL schema snapshot), or,
where the tools depend on who asks, the one the connection's own discovery listed (an MCP server, an
introspected GraphQL endpoint).

Layers, imports pointing down only:
  assembly.py     the service built from settings: the one place the kinds are registered
  commands.py     the admin CLI's integration and connection commands
  openapi/specs.py, mcp/servers.py   a kind's own surface beside the generic add and configure (preview,
                  update and detect a spec; show, remove and probe an MCP server)
  service.py      `Integrations`: one add and one configure path for every kind, patch, remove, invoke
  connections.py  `Connections`: create, read, change and remove connections; their credential origins
  views.py        each caller's catalog (`View`, `ToolEntry`), cached per org revision
  discovery.py    connections' own tool lists: one flight per connection, stale marks, the refresh loop
  catalogs.py     compiled catalogs by content hash, and the compile at the caller's turn
  kinds.py        the interface each kind implements (a spec or endpoint in, tools and calls out), `Kinds`
  openapi/ graphql/ mcp/   one kind each: an add request → a registration, a source → compiled tools, and a
                  call → its result (sans-I/O cores, thin adapters over `outbound`; mcp/ also speaks the MCP
                  client protocol)
  access.py validation.py compiling.py connection_secrets.py   who may change what, request shapes, the
                  compiler's turns, a connection's credential values
  credentials.py  placements and the authentication failures every kind answers with
  addresses.py    the address grammar and name normalization (pure)
"""

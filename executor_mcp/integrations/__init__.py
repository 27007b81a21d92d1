"""The catalog of connected APIs: integrations, their connections, and the tools they give.

An integration is one API surface (today an OpenAPI document) in one organization. A connection is a
credential bound to one integration, owned by the org or by one account. Tools exist per connection, at
`tools.<integration>.<owner>.<connection>.<tool>`, but they are derived from the integration's compiled
catalog, never copied per connection.

Layers, imports pointing down only:
  service.py      the integrations and connections of an org: add, update, remove, resolve (storage, I/O)
  kinds.py        the interface each kind of integration implements (openapi/ today; graphql, mcp next)
  openapi/        spec → compiled tools (sans-I/O), request building and response classification (sans-I/O)
  model.py        records and compiled tool definitions (plain attrs)
  addresses.py    the address grammar and name normalization (pure)
"""

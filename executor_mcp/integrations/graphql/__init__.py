"""GraphQL endpoints as integrations (upstream-integrations §5): a schema (an introspection answer, a
snapshot, or an SDL file) becomes one tool per root field; a call becomes one operation POSTed as JSON.

  introspection.py  the introspection query, reading its answer, SDL → introspection, the bounded schema form
  compile.py        schema → catalog: names, input schemas, `$defs`, default selection sets (sans-I/O)
  operation.py      a call's arguments → the operation and variables, with `select` parse-checked (sans-I/O)
  response.py       an HTTP answer → the call's result envelope (sans-I/O)
  registration.py   an add request → a `kinds.Registration` (sans-I/O)
  kind.py           the `Kind`: add and configure requests, discovery and invocation through `Outbound`
"""

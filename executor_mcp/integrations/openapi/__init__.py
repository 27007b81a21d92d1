"""OpenAPI 3.x as a kind of integration.

  document.py   text → a bounded, validated document with local `$ref`s resolvable (sans-I/O)
  naming.py     upstream's tool-naming algorithm and its collision rounds (pure)
  compile.py    document → `CompiledSpec`: tools, input/output schemas, bindings, auth methods (sans-I/O)
  auth.py       auth methods: derived from a spec, the authoring dialect, merging, the catalog projection
  binding.py    what one operation needs at call time (the contract between compile and invoke)
  request.py    binding + arguments + credentials → an outbound request, or the pre-flight refusal
  response.py   an upstream answer → `{ok, data, http}` or a typed failure
  kind.py       the adapter the catalog calls (compile in a thread, invoke through `outbound`)
"""

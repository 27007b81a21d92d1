"""OpenAPI 3.x as a kind of integration.

document.py   text → a bounded, validated document with local `$ref`s resolvable (sans-I/O)
naming.py     upstream's tool-naming algorithm and its collision rounds (pure)
compile.py    document → `CompiledSpec`: tools, input/output schemas, bindings, auth methods (sans-I/O)
auth.py       auth methods: derived from a spec, the authoring dialect, merging, the catalog projection
binding.py    what one operation needs at call time (the contract between compile and invoke)
request.py    binding + arguments + credentials → an outbound request, or the pre-flight refusal
response.py   an upstream answer → `{ok, data, http}` or a typed failure
sources.py    a pasted or fetched document, compiled in a child process at the caller's turn
kind.py       the `Kind`: an add or configure request, compile in a thread, invoke through `outbound`
specs.py      the OpenAPI surface beside the generic add: preview, update from a new document, detect
"""

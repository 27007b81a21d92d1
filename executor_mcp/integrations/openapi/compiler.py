"""The OpenAPI compiler's child process: a document on stdin, the compiled spec on stdout (`isolated.py` runs it).

The answer is `head_length(4, big-endian) head body`: `head` is JSON, either `{"refused": message}` or
`{"spec": ..., "toolNames": [...]}` (the compiled spec without its catalog, which is most of its size), and
`body` is the stored form of the whole compiled spec (`encode_compiled`). No trio here: the child starts for
every document, and importing less keeps that start short.
"""

import struct
import sys
from typing import Any

import attrs

from executor_mcp.codec import converter, dumps
from executor_mcp.integrations.openapi.compile import compile_spec, encode_compiled
from executor_mcp.records.integration_errors import SpecRefused
from executor_mcp.records.integrations import CompiledCatalog

LENGTH = struct.Struct(">I")
# The head's `info` texts are cut to this many characters: the preview shows them and an integration keeps at
# most 4,000 of a description, so a document padded with megabytes of them sends no more back.
HEAD_TEXT_CHARS = 4000


def compiled_answer(source: bytes, *, max_bytes: int, max_operations: int) -> bytes:
    """The child's whole answer for `source` (pure: the child's main only moves bytes)."""
    try:
        spec = compile_spec(source, max_bytes=max_bytes, max_operations=max_operations)
    except SpecRefused as refused:
        return _framed({"refused": refused.message}, b"")
    head = attrs.evolve(
        spec,
        catalog=CompiledCatalog(tools=(), defs={}),
        title=_cut(spec.title),
        version=_cut(spec.version),
        description=_cut(spec.description),
    )
    names = [tool.name for tool in spec.catalog.tools]
    return _framed({"spec": converter.unstructure(head), "toolNames": names}, encode_compiled(spec))


def _cut(text: str | None) -> str | None:
    return text[:HEAD_TEXT_CHARS] if text is not None else None


def _framed(head: dict[str, Any], body: bytes) -> bytes:
    encoded = dumps(head)
    return LENGTH.pack(len(encoded)) + encoded + body


def main(argv: list[str]) -> int:
    """`executor-mcp openapi-compiler MAX_BYTES MAX_OPERATIONS` (hidden): stdin to stdout, as above."""
    max_bytes, max_operations = int(argv[0]), int(argv[1])
    source = sys.stdin.buffer.read(max_bytes + 1)
    sys.stdout.buffer.write(compiled_answer(source, max_bytes=max_bytes, max_operations=max_operations))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

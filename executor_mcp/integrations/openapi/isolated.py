"""An OpenAPI document compiled in a child process, so that one organization's import costs the others nothing.

Compiling a large document is seconds of CPU, and much of it inside single C calls (the JSON or YAML parse
of tens of megabytes, encoding the catalog) that hold the GIL throughout: run in a thread, it stalled every
other organization's requests by up to two seconds (issue 25). In a child process it runs on another core
and the server's event loop only copies bytes.

The child (`compiler.py`, which imports no trio) answers the compiled spec's metadata and tool names, and
the stored form of the whole compiled spec. The server keeps the stored form and decodes the catalog only
when it is used.
"""

import logging
import sys
from typing import Any

import attrs
import cattrs
import trio

from executor_mcp.codec import converter, loads
from executor_mcp.integrations.openapi.compile import CompiledSpec
from executor_mcp.integrations.openapi.compiler import LENGTH
from executor_mcp.records.integration_errors import SpecRefused

log = logging.getLogger(__name__)

# Past this a compile is abandoned (its child killed): GitHub's 13 MB description compiles in about 10 s.
COMPILE_TIMEOUT = 300.0
_FAILED = "The OpenAPI document could not be compiled: the compiler process failed"


@attrs.frozen
class Compiled:
    """What the server reads of a compiled document: its metadata, its tool names and its stored form."""

    head: CompiledSpec  # the compiled spec with an empty catalog
    tool_names: tuple[str, ...]
    encoded: bytes


async def compile_isolated(source: bytes, *, max_bytes: int, max_operations: int) -> Compiled:
    """`source` compiled by a child process; `SpecRefused` for a document that is no integration, or when the
    child fails (killed for memory, say) or outlasts `COMPILE_TIMEOUT`."""
    if len(source) > max_bytes:
        raise SpecRefused(f"OpenAPI document is larger than {max_bytes} bytes")
    with trio.move_on_after(COMPILE_TIMEOUT) as waited:
        done = await trio.run_process(
            compiler_command(max_bytes, max_operations),
            stdin=source,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    if waited.cancelled_caught:
        raise SpecRefused(f"The OpenAPI document took more than {COMPILE_TIMEOUT:.0f} s to compile")
    if done.returncode != 0:
        log.error(
            "the OpenAPI compiler exited with %s: %s", done.returncode, done.stderr[-2000:].decode(errors="replace")
        )
        raise SpecRefused(_FAILED)
    try:
        return read_answer(done.stdout)
    except (ValueError, KeyError, TypeError, cattrs.BaseValidationError) as garbled:
        log.error("the OpenAPI compiler's answer does not read: %s", garbled)
        raise SpecRefused(_FAILED) from None


def read_answer(answer: bytes) -> Compiled:
    """The child's answer back into values; `SpecRefused` for a refusal; `ValueError` for a garbled answer."""
    if len(answer) < LENGTH.size:
        raise ValueError("the compiler's answer is truncated")
    (length,) = LENGTH.unpack_from(answer)
    head: Any = loads(answer[LENGTH.size : LENGTH.size + length])
    if not isinstance(head, dict):
        raise ValueError("the compiler's answer has no head")
    if "refused" in head:
        raise SpecRefused(str(head["refused"]))
    spec = converter.structure(head["spec"], CompiledSpec)
    names = tuple(str(name) for name in head["toolNames"])
    return Compiled(head=spec, tool_names=names, encoded=answer[LENGTH.size + length :])


def compiler_command(max_bytes: int, max_operations: int) -> list[str]:
    """The binary re-executes itself as the compiler; from source, this module runs directly."""
    limits = [str(max_bytes), str(max_operations)]
    if getattr(sys, "frozen", False):
        return [sys.executable, "openapi-compiler", *limits]
    return [sys.executable, "-m", "executor_mcp.integrations.openapi.compiler", *limits]

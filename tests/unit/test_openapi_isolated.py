"""The compiler child's answer, read back: metadata and tool names without the catalog, refusals as values."""

import json

import pytest

from executor_mcp.integrations.openapi.compile import decode_compiled
from executor_mcp.integrations.openapi.compiler import HEAD_TEXT_CHARS, compiled_answer
from executor_mcp.integrations.openapi.isolated import compile_isolated, read_answer
from executor_mcp.records.integration_errors import SpecRefused

SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "Pets", "version": "2", "description": "p" * (HEAD_TEXT_CHARS + 10)},
    "paths": {
        "/pets": {"get": {"operationId": "listPets", "responses": {"200": {"description": "ok"}}}},
        "/pets/{id}": {"delete": {"operationId": "removePet", "responses": {"204": {"description": "gone"}}}},
    },
}
SOURCE = json.dumps(SPEC).encode()


def test_an_answer_carries_the_head_the_names_and_the_whole_stored_form() -> None:
    compiled = read_answer(compiled_answer(SOURCE, max_bytes=len(SOURCE), max_operations=2))
    assert compiled.head.title == "Pets"
    assert compiled.head.description == "p" * HEAD_TEXT_CHARS
    assert compiled.head.catalog.tools == ()
    assert sorted(compiled.tool_names) == sorted(tool.name for tool in decode_compiled(compiled.encoded).catalog.tools)
    assert len(compiled.tool_names) == 2
    assert decode_compiled(compiled.encoded).description == SPEC["info"]["description"]


@pytest.mark.parametrize(
    ("source", "max_operations", "message"),
    [
        (SOURCE, 1, "The document has 2 operations; an integration holds at most 1 (--integration-max-operations)"),
        (b"{not json", 10, None),
        (SOURCE + b" " * 10, 10, f"OpenAPI document is too large: {len(SOURCE) + 10} bytes (at most {len(SOURCE)})"),
    ],
)
def test_a_refusal_is_read_back_as_the_same_refusal(source: bytes, max_operations: int, message: str | None) -> None:
    answer = compiled_answer(source, max_bytes=len(SOURCE), max_operations=max_operations)
    with pytest.raises(SpecRefused) as refused:
        read_answer(answer)
    if message is not None:
        assert refused.value.message == message


@pytest.mark.parametrize("answer", [b"", b"\x00\x00", b"\x00\x00\x00\x05[1,2]", b"\x00\x00\x00\x02{}"])
def test_a_garbled_answer_is_an_error_not_a_crash(answer: bytes) -> None:
    with pytest.raises((ValueError, KeyError)):
        read_answer(answer)


async def test_the_child_process_compiles_and_refuses() -> None:
    compiled = await compile_isolated(SOURCE, max_bytes=len(SOURCE), max_operations=5)
    assert len(compiled.tool_names) == 2
    with pytest.raises(SpecRefused):
        await compile_isolated(b"openapi: [", max_bytes=100, max_operations=5)

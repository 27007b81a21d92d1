"""Hostile OpenAPI documents: each is refused quickly with a one-line reason, and nothing half-compiled
comes back."""

import json
import time
from typing import Any

import pytest

from executor_mcp.integrations.openapi.compile import compile_spec
from executor_mcp.integrations.openapi.document import MAX_DEPTH, MAX_NODES
from executor_mcp.records.integration_errors import SpecRefused

MiB = 1024 * 1024


def document(**extra: Any) -> bytes:
    return json.dumps({"openapi": "3.0.0", "info": {"title": "t", "version": "1"}, "paths": {}, **extra}).encode()


def nested_schemas(levels: int) -> bytes:
    """`levels` schemas each the property of the one around it, written out as text (too deep for json.dumps)."""
    opening = '{"type": "object", "properties": {"a": ' * levels
    closing = "}}" * levels
    deep = opening + '{"type": "string"}' + closing
    return b'{"openapi": "3.0.0", "paths": {}, "components": {"schemas": {"Deep": ' + deep.encode() + b"}}}"


def alias_bomb() -> bytes:
    lines = ["openapi: 3.0.0", "paths: {}", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [{','.join(['*' + previous] * 9)}]")
        previous = name
    return "\n".join(lines).encode()


def ref_chain(length: int) -> bytes:
    parameters = {f"p{i}": {"$ref": f"#/components/parameters/p{i + 1}"} for i in range(length)}
    parameters[f"p{length}"] = {"name": "x", "in": "query"}
    return document(components={"parameters": parameters})


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (b"openapi: 3.0.0\npaths: [unclosed", "OpenAPI document is not valid JSON or YAML: "),
        (b'{"openapi": "3.0.0", "paths": {', "OpenAPI document is not valid JSON or YAML: "),
        (b"", "OpenAPI document is empty"),
        (b"   \n", "OpenAPI document is empty"),
        (b"{}", "OpenAPI document is empty"),
        (b"swagger: '2.0'\npaths: {}\n", "Only OpenAPI 3.x documents are supported."),
        (b"[1, 2]", "Only OpenAPI 3.x documents are supported."),
        (b"openapi: 3.1.0\ninfo: {title: t}\n", "OpenAPI document has no paths defined"),
        (
            document(components={"schemas": {"A": {"$ref": "#/components/schemas/B"},
                                              "B": {"$ref": "#/components/schemas/A"}}}),
            "$ref loop: '#/components/schemas/A' -> '#/components/schemas/B'",
        ),
        (document(components={"schemas": {"A": {"$ref": "#/components/schemas/A"}}}), "$ref loop: "),
        (ref_chain(100), "$ref chain longer than 32"),
        (nested_schemas(10_000), f"OpenAPI document nests deeper than {MAX_DEPTH} levels"),
        (nested_schemas(40), f"OpenAPI document nests deeper than {MAX_DEPTH} levels"),
        (
            document(paths={"/a": {"$ref": "https://evil.example/paths.json#/a"}}),
            "External $ref is not supported (local #/ pointers only): 'https://evil.example/paths.json#/a'",
        ),
        (
            document(components={"schemas": {"A": {"$ref": "../../etc/passwd"}}}),
            "External $ref is not supported (local #/ pointers only): '../../etc/passwd'",
        ),
        (alias_bomb(), f"OpenAPI document has more than {MAX_NODES} values once YAML aliases are expanded"),
        (b"openapi: 3.0.0\npaths: {}\nloop: &loop [*loop]\n", f"OpenAPI document nests deeper than {MAX_DEPTH} levels"),
    ],
)  # fmt: skip
def test_refused_with_one_line(source: bytes, reason: str) -> None:
    started = time.monotonic()
    with pytest.raises(SpecRefused) as refused:
        compile_spec(source)
    assert time.monotonic() - started < 2
    message = refused.value.message
    assert message.startswith(reason)
    assert "\n" not in message
    assert "Traceback" not in message
    assert len(message) < 400


def test_a_100_mb_document_is_refused_before_parsing() -> None:
    source = b'{"openapi": "3.0.0", "paths": {}, "x": "' + b"a" * (100 * MiB) + b'"}'
    started = time.monotonic()
    with pytest.raises(SpecRefused) as refused:
        compile_spec(source)
    assert time.monotonic() - started < 0.5
    assert refused.value.message == f"OpenAPI document is too large: {len(source)} bytes (at most {32 * MiB})"


def test_the_size_bound_is_a_parameter() -> None:
    with pytest.raises(SpecRefused, match="too large"):
        compile_spec(document(), max_bytes=10)


def test_a_refusal_quotes_hostile_strings_short_and_flat() -> None:
    ref = "https://evil.example/" + "x" * 5_000 + "\nInjected: line"
    with pytest.raises(SpecRefused) as refused:
        compile_spec(document(components={"schemas": {"A": {"$ref": ref}}}))
    assert len(refused.value.message) < 250
    assert "\n" not in refused.value.message


def test_deep_pointers_that_loop_through_schemas_are_cut_not_followed() -> None:
    schemas = {"A": {"type": "object", "properties": {"self": {"$ref": "#/components/schemas/A/properties"}}}}
    paths = {"/a": {"get": {"operationId": "a", "responses": {"200": {"description": "", "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/A/properties/self"}}}}}}}}  # fmt: skip
    spec = compile_spec(document(paths=paths, components={"schemas": schemas}))
    assert [tool.name for tool in spec.catalog.tools] == ["a.getOperation"]


def test_amplification_through_inlined_refs_is_bounded() -> None:
    # Each layer of deep pointers doubles what inlining writes: 2**40 values from a few kilobytes.
    shapes: dict[str, Any] = {"L0": {"type": "string"}}
    for level in range(1, 41):
        below = f"#/x-shapes/L{level - 1}"  # not a component schema, so inlined
        shapes[f"L{level}"] = {"type": "object", "properties": {"a": {"$ref": below}, "b": {"$ref": below}}}
    paths = {"/a": {"get": {"operationId": "a", "responses": {"200": {"description": "", "content": {
        "application/json": {"schema": {"$ref": "#/x-shapes/L40"}}}}}}}}  # fmt: skip
    started = time.monotonic()
    with pytest.raises(SpecRefused, match="compiles to more than"):
        compile_spec(document(paths=paths, **{"x-shapes": shapes}))
    assert time.monotonic() - started < 2


def test_non_json_yaml_scalars_become_text() -> None:
    spec = compile_spec(
        b"openapi: 3.0.0\ninfo: {title: t, version: 2024-01-01}\npaths:\n  /a:\n    get:\n"
        b"      operationId: a\n      responses: {200: {description: .inf}}\n"
    )
    assert spec.version == "2024-01-01"

"""The compact TypeScript `describe.tool` shows (upstream-integrations §3.4): the observed vectors, the
rendering rules, and bounds that hold against hostile schemas."""

from pathlib import Path
from typing import Any

import pytest

from executor_mcp.integrations.openapi.compile import compile_spec
from executor_mcp.tools.typescript import MAX_TEXT, TOOL_DEFINITIONS, describe_types, render, safe_name

ORDERS = Path(__file__).parent.parent / "fixtures" / "openapi" / "orders.yaml"


def described(name: str) -> dict[str, Any]:
    spec = compile_spec(ORDERS.read_bytes())
    tool = next(t for t in spec.catalog.tools if t.name == name)
    return describe_types(tool.input_schema, tool.output_schema, spec.catalog.defs)


def test_get_order_as_upstream_shows_it() -> None:
    assert described("orders.getOrder") == {
        "inputTypeScript": (
            '{ orderId: string; include?: ("items" | "customer")[]; "X-Trace"?: string; session?: string; }'
        ),
        "outputTypeScript": "{ ok: true; data: Order; http?: ToolHttpMeta } | { ok: false; error: ToolError }",
        "typeScriptDefinitions": {
            "Order": '{ id: string; status: "pending" | "shipped" | "delivered"; total?: number | null; }',
            **TOOL_DEFINITIONS,
        },
    }


def test_the_fixed_definitions() -> None:
    assert TOOL_DEFINITIONS == {
        "ToolError": "{ code: string; message: string; status?: number; details?: unknown; retryable?: boolean }",
        "ToolHttpMeta": "{ status: number; headers: { [k: string]: string; } }",
        "ToolFile": (
            '{ _tag: "ToolFile"; name?: string; mimeType: string; encoding: "base64"; data: string; '
            "byteLength: number; }"
        ),
    }


def test_create_order_and_two_media_types() -> None:
    assert described("orders.createOrder")["inputTypeScript"] == (
        "{ body: { items: { sku?: string; quantity?: number; }[]; note?: string; }; }"
    )
    assert described("orders.setNotes")["inputTypeScript"] == (
        '{ orderId: string; body?: { a?: string; tags?: string[]; }; contentType?: "application/x-www-form-urlencoded" '
        '| "application/json"; }'
    )


def test_no_parameters_no_input_type_and_no_response_unknown_data() -> None:
    boom = described("boom.getBoom")
    assert "inputTypeScript" not in boom
    assert (
        boom["outputTypeScript"] == "{ ok: true; data: unknown; http?: ToolHttpMeta } | { ok: false; error: ToolError }"
    )


def test_a_file_tool_renders_the_tool_file_shape() -> None:
    data = described("orders.getInvoice")["outputTypeScript"]
    assert data.startswith(
        '{ ok: true; data: { _tag: "ToolFile"; name?: string; mimeType: string; encoding: "base64"; '
    )


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({}, "unknown"),
        (True, "unknown"),
        ({"type": "string"}, "string"),
        ({"type": "integer"}, "number"),
        ({"type": "null"}, "null"),
        ({"type": "object"}, "{ [k: string]: unknown; }"),
        ({"type": "object", "additionalProperties": False}, "{}"),
        ({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "number"}},
         "{ a?: unknown; [k: string]: number; }"),
        ({"type": "object", "properties": {"a-b": {"type": "string"}, "$ok": {}}, "required": ["a-b"]},
         '{ "a-b": string; $ok?: unknown; }'),
        ({"enum": ["a", 1, True, None]}, '"a" | 1 | true | null'),
        ({"type": "string", "enum": ["x"], "nullable": True}, '"x" | null'),
        ({"const": "pet"}, '"pet"'),
        ({"type": "array", "items": {"enum": ["a", "b"]}}, '("a" | "b")[]'),
        ({"type": "array"}, "unknown[]"),
        ({"type": "array", "items": [{"type": "string"}, {"type": "number"}]}, "[string, number]"),
        ({"type": ["string", "null"]}, "string | null"),
        ({"type": "number", "nullable": True}, "number | null"),
        ({"anyOf": [{"type": "string"}, {"type": "number"}]}, "string | number"),
        ({"oneOf": [{"type": "string"}], "nullable": True}, "string | null"),
        ({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                    {"type": "object", "properties": {"b": {"type": "number"}}}]},
         "{ a?: string; } & { b?: number; }"),
        ({"type": "object", "properties": {"body": {}},
          "anyOf": [{"required": ["body"]}, {"required": ["bodyBase64"]}]},
         "{ body?: unknown; }"),
        ({"$ref": "https://elsewhere.test/schema.json"}, "unknown"),
        ({"type": "string", "description": "dropped /* not a comment */"}, "string"),
    ],
)  # fmt: skip
def test_rendering_rules(schema: Any, expected: str) -> None:
    assert render(schema) == (expected, {})


def test_definitions_are_pascal_cased_and_collected_transitively() -> None:
    defs = {
        "full-repository": {"type": "object", "properties": {"owner": {"$ref": "#/$defs/simple_user"}}},
        "simple_user": {"type": "object", "properties": {"login": {"type": "string"}}, "required": ["login"]},
        "unused": {"type": "string"},
    }
    assert render({"$ref": "#/$defs/full-repository"}, defs) == (
        "FullRepository",
        {"FullRepository": "{ owner?: SimpleUser; }", "SimpleUser": "{ login: string; }"},
    )
    assert safe_name("foo-bar") == "FooBar"
    assert safe_name("9lives") == "Lives"
    assert safe_name("---") == "Definition"


def test_recursive_definitions_end() -> None:
    defs = {
        "Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}
    }
    assert render({"$ref": "#/$defs/Node"}, defs) == ("Node", {"Node": "{ children?: Node[]; }"})


def test_clashing_definition_names_stay_distinct() -> None:
    defs = {"foo-bar": {"type": "string"}, "foo_bar": {"type": "number"}, "ToolError": {"type": "boolean"}}
    text, definitions = render(
        {"anyOf": [{"$ref": "#/$defs/foo-bar"}, {"$ref": "#/$defs/foo_bar"}, {"$ref": "#/$defs/ToolError"}]}, defs
    )
    assert text == "FooBar | FooBar1 | ToolError1"
    assert definitions == {"FooBar": "string", "FooBar1": "number", "ToolError1": "boolean"}


def test_deep_and_huge_schemas_are_bounded() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(500):
        deep = {"type": "object", "properties": {"a": deep}}
    text, _ = render(deep)
    assert text.count("{") <= 40
    assert "unknown" in text
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(100_000)}}
    text, _ = render(wide)
    assert len(text) < 2 * MAX_TEXT
    chain = {f"D{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/D{i + 1}"}}} for i in range(5_000)}
    _, definitions = render({"$ref": "#/$defs/D0"}, chain)
    assert len(definitions) <= 500

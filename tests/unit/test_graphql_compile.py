"""GraphQL schema → tools, and a call → its operation (sans-I/O): naming, schemas, `$defs`, the default
selection set, and `select` held to one selection set's body."""

import json
from typing import Any

import pytest

from executor_mcp.codec import converter, loads
from executor_mcp.integrations.graphql.compile import MAX_DEFAULT_FIELDS, compile_catalog
from executor_mcp.integrations.graphql.introspection import sdl_source
from executor_mcp.integrations.graphql.operation import (
    INVALID_SELECTION,
    Binding,
    SelectionRefused,
    build_operation,
    check_selection,
)
from executor_mcp.records.integration_errors import ArgumentsRefused
from executor_mcp.records.integrations import CompiledCatalog, ToolDef
from tests.graphql_upstream import SDL


def catalog(sdl: str = SDL) -> CompiledCatalog:
    return compile_catalog(sdl_source(sdl, 10_000_000))


def tool(name: str, sdl: str = SDL) -> ToolDef:
    return next(t for t in catalog(sdl).tools if t.name == name)


def binding(name: str, sdl: str = SDL) -> Binding:
    return converter.structure(tool(name, sdl).binding, Binding)


def test_one_tool_per_root_field_named_by_operation_kind_without_deprecated_fields() -> None:
    assert [t.name for t in catalog().tools] == [
        "mutation.cancelOrder",
        "query.failing",
        "query.order",
        "query.orders",
    ]


def test_descriptions_are_the_field_s_else_kind_field_and_return_type() -> None:
    assert tool("query.order").description == "Fetch one order by id."
    assert tool("query.orders").description == "GraphQL query: orders -> [Order!]!"
    assert tool("mutation.cancelOrder").description == "GraphQL mutation: cancelOrder -> Order"


def test_mutations_need_approval_with_upstream_s_text_and_queries_do_not() -> None:
    cancel, order = tool("mutation.cancelOrder"), tool("query.order")
    assert (cancel.requires_approval, cancel.approval_description) == (True, "mutation cancelOrder")
    assert (order.requires_approval, order.approval_description) == (False, None)


def test_arguments_are_properties_required_when_non_null_without_a_default() -> None:
    schema = tool("query.orders").input_schema
    assert schema is not None
    properties = schema["properties"]
    assert properties["status"] == {"$ref": "#/$defs/OrderStatus"}
    assert properties["filter"] == {"$ref": "#/$defs/OrderFilter"}
    assert properties["first"] == {"type": "integer"}
    assert "required" not in schema  # `first: Int = 10` has a default
    order = tool("query.order").input_schema
    assert order is not None
    assert order["required"] == ["id"]
    assert order["properties"]["id"] == {"type": "string"}


def test_scalars_map_and_a_custom_scalar_is_a_described_string() -> None:
    sdl = (
        "scalar DateTime\n"
        "type Query { f(a: String, b: ID, c: Int, d: Float, e: Boolean, g: DateTime, h: [[Int!]]): Int }"
    )
    properties = tool("query.f", sdl).input_schema["properties"]  # type: ignore[index]
    assert {name: properties[name] for name in "abcdeg"} == {
        "a": {"type": "string"},
        "b": {"type": "string"},
        "c": {"type": "integer"},
        "d": {"type": "number"},
        "e": {"type": "boolean"},
        "g": {"type": "string", "description": "Custom scalar: DateTime"},
    }
    assert properties["h"] == {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}


def test_defs_hold_every_input_object_and_enum_without_deprecated_values() -> None:
    defs = catalog().defs
    assert defs == {
        "OrderStatus": {"type": "string", "enum": ["PENDING", "SHIPPED", "CANCELLED"]},
        "OrderFilter": {
            "type": "object",
            "properties": {"customerId": {"type": "string"}, "minTotal": {"type": "number"}},
        },
    }


def test_select_and_variables_are_extra_properties_with_the_return_type_named() -> None:
    properties = tool("query.order").input_schema["properties"]  # type: ignore[index]
    assert properties["select"]["type"] == "string"
    assert properties["select"]["description"].startswith("Optional GraphQL selection set for the `Order` return type.")
    assert properties["variables"]["type"] == "object"


def test_an_argument_named_select_keeps_its_name_and_the_extra_is_not_offered() -> None:
    sdl = "type Query { pick(select: String!): String }"
    properties = tool("query.pick", sdl).input_schema["properties"]  # type: ignore[index]
    assert properties["select"] == {"type": "string"}
    assert binding("query.pick", sdl).extras == ("variables",)


def test_the_default_selection_is_leaves_then_one_level_of_object_leaves() -> None:
    # `note(lang: String!)` needs an argument: skipped; `customer` and `items` give their own leaves only
    # (Customer.orders is two levels down).
    assert binding("query.order").selection == "id status total customer { id name } items { sku quantity }"


def test_a_leaf_return_has_no_selection_and_a_union_selects_its_typename() -> None:
    assert binding("query.failing").selection is None
    sdl = "type A { a: Int }\ntype B { b: Int }\nunion U = A | B\ntype Query { u: U }"
    assert binding("query.u", sdl).selection == "__typename"


def test_a_type_with_nothing_to_select_selects_its_typename() -> None:
    sdl = "type Inner { deep(x: Int!): Int }\ntype Outer { inner: Inner }\ntype Query { o: Outer }"
    assert binding("query.o", sdl).selection == "__typename"


def test_the_default_selection_is_bounded_in_fields() -> None:
    leaves = " ".join(f"f{i}: Int" for i in range(200))
    nested = " ".join(f"n{i}: Wide" for i in range(50))
    sdl = f"type Wide {{ {leaves} }}\ntype Root {{ {leaves} {nested} }}\ntype Query {{ r: Root }}"
    selection = binding("query.r", sdl).selection
    assert selection is not None
    assert len(selection.replace("{", " ").replace("}", " ").split()) <= MAX_DEFAULT_FIELDS


def test_the_operation_declares_only_the_arguments_passed() -> None:
    operation = build_operation(binding("query.order"), {"id": "o-1"})
    assert operation.query == (
        "query Order($id: ID!) { order(id: $id) { id status total customer { id name } items { sku quantity } } }"
    )
    assert operation.variables == {"id": "o-1"}
    assert operation.operation_name == "Order"
    left_out = build_operation(binding("query.orders"), {"status": "SHIPPED"})
    assert left_out.query.startswith("query Orders($status: OrderStatus) { orders(status: $status) {")


def test_a_mutation_is_a_mutation_operation_and_extra_variables_ride_along() -> None:
    operation = build_operation(
        binding("mutation.cancelOrder"), {"id": "o-1", "reason": "late", "variables": {"id": "x", "extra": 1}}
    )
    assert operation.query.startswith("mutation CancelOrder($id: ID!, $reason: String) { cancelOrder(id: $id, reason:")
    assert operation.variables == {"id": "o-1", "extra": 1, "reason": "late"}


def test_select_replaces_the_default_selection() -> None:
    operation = build_operation(binding("query.order"), {"id": "o-1", "select": "id customer { name }"})
    assert operation.query == "query Order($id: ID!) { order(id: $id) { \nid customer { name }\n } }"


def test_a_comment_in_select_ends_with_its_line() -> None:
    operation = build_operation(binding("query.order"), {"id": "o-1", "select": "id # }"})
    assert operation.query.endswith("{ \nid # }\n } }")


@pytest.mark.parametrize(
    "select",
    [
        "",
        "   ",
        "{",
        "id }",
        "id } } mutation { cancelOrder(id: 1) { id",
        "id } } query Other { order(id: 1) { id",
        "id } ...on Query { failing",
        "id } x: order(id: 2) { id",
        "id } } fragment F on Order { id",
        "id } } #",
        'id(a: "unterminated',
        "id ∂",
        "{ id }",
        "{}",
        "a { }",
        "a" + "{a" * 40 + "}" * 40,
        "a " * 5000,
        "a" * 20_000,
    ],
)
def test_an_invalid_or_injecting_select_is_refused(select: str) -> None:
    with pytest.raises(SelectionRefused) as refused:
        build_operation(binding("query.order"), {"id": "o-1", "select": select})
    assert refused.value.code == "graphql_invalid_selection"
    assert str(refused.value) == INVALID_SELECTION


def test_select_on_a_scalar_field_or_of_another_type_is_refused() -> None:
    with pytest.raises(SelectionRefused):
        build_operation(binding("query.failing"), {"select": "id"})
    with pytest.raises(SelectionRefused):
        check_selection(42)


def test_nested_selections_inline_fragments_and_arguments_are_fine() -> None:
    select = 'id ... on Order { status } customer { name } note(lang: "}") items { sku }'
    assert check_selection(select) == select


def test_unknown_arguments_are_refused_with_what_the_operation_accepts() -> None:
    with pytest.raises(ArgumentsRefused) as refused:
        build_operation(binding("query.order"), {"id": "o-1", "doesNotExist": "nope"})
    assert refused.value.code == "invalid_tool_arguments"
    assert str(refused.value) == 'Unknown argument "doesNotExist". This operation accepts: id, select, variables.'


def test_arguments_and_variables_must_be_objects() -> None:
    with pytest.raises(ArgumentsRefused):
        build_operation(binding("query.order"), ["o-1"])
    with pytest.raises(ArgumentsRefused):
        build_operation(binding("query.order"), {"id": "o-1", "variables": "x"})


def introspected(types: list[dict[str, Any]], query: str = "Query") -> bytes:
    return json.dumps({"__schema": {"queryType": {"name": query}, "mutationType": None, "types": types}}).encode()


def test_the_per_connection_marker_compiles_to_no_tools() -> None:
    assert compile_catalog(b"{}") == CompiledCatalog(tools=())


def test_a_compiled_catalog_round_trips_through_its_stored_form() -> None:
    from executor_mcp.records.integrations import decode_catalog, encode_catalog

    compiled = catalog()
    assert decode_catalog(encode_catalog(compiled)) == compiled
    assert loads(encode_catalog(compiled))["tools"][0]["name"] == "mutation.cancelOrder"

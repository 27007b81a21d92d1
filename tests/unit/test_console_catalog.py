"""The pure parts of the console's integrations and connections pages: paging, the templates a page can
connect with, how a tool's types are shown (and bounded), and the shared admin rule."""

from executor_mcp.integrations.access import admin_refusal
from executor_mcp.records.integration_errors import NotAdmin
from executor_mcp.records.integrations import (
    NO_AUTH,
    AuthMethod,
    ConnectionRecord,
    IntegrationRecord,
    Placement,
    ToolDef,
)
from executor_mcp.storage.records import Owner
from executor_mcp.transport.integrations_api import tool_matches
from executor_mcp.web.catalog import (
    MAX_SHOWN_DEFINITIONS,
    MAX_SHOWN_TYPESCRIPT,
    connection_row,
    page_link,
    page_number,
    placement_lines,
    template_choices,
    tool_view,
    window,
)


def integration(*methods: AuthMethod) -> IntegrationRecord:
    return IntegrationRecord(
        org_id="acme",
        slug="shop",
        kind="openapi",
        name="Shop",
        description="",
        source_hash="h",
        config={},
        auth_methods=methods,
        created_at=0.0,
        updated_at=0.0,
    )


KEY = AuthMethod("apikey-0", "apikey", placements=(Placement("header", "x-api-key"),))
PAIR = AuthMethod(
    "pair",
    "apikey",
    label="Key and secret",
    placements=(
        Placement("header", "x-key", variable="key"),
        Placement("query", "secret", variable="secret"),
        Placement("header", "x-version", literal="2"),
    ),
)
OAUTH = AuthMethod("oauth", "oauth2", oauth={"flow": "authorizationCode"})


def test_a_window_is_one_page_of_the_items_and_a_page_past_the_end_is_the_last() -> None:
    items = list(range(120))
    first = window(items, 1, 50)
    assert (first.items[0], len(first.items), first.page, first.pages, first.total, first.first) == (
        0,
        50,
        1,
        3,
        120,
        1,
    )
    last = window(items, 9, 50)
    assert (last.items, last.page, last.first) == (tuple(range(100, 120)), 3, 101)
    empty = window([], 4, 50)
    assert (empty.items, empty.page, empty.pages, empty.first) == ((), 1, 1, 0)


def test_a_page_number_is_a_short_count_else_the_first_page() -> None:
    assert [page_number(raw) for raw in ("3", None, "", "-1", "x", "9" * 7)] == [3, 1, 1, 1, 1, 1]
    assert page_link("/integrations/shop", "", 1) == "/integrations/shop"


def test_a_page_number_in_other_digits_is_the_first_page() -> None:
    # `str.isdigit` holds for superscripts and other digits `int` refuses: `?page=²` must not be a 500.
    assert [page_number(raw) for raw in ("\u00b2", "\u0663", "1\u00b2")] == [1, 1, 1]
    assert page_link("/integrations/shop", "get order&x", 2) == "/integrations/shop?query=get+order%26x&page=2"


def test_a_page_connects_with_pasted_keys_no_auth_or_an_oauth_sign_in() -> None:
    choices = template_choices(integration(KEY, PAIR, OAUTH, AuthMethod(NO_AUTH, NO_AUTH)))
    assert [(choice.slug, choice.inputs, choice.oauth) for choice in choices] == [
        ("apikey-0", (("token", "header x-api-key"),), False),
        ("pair", (("key", "header x-key"), ("secret", "query secret")), False),
        (OAUTH.slug, (), True),
        (NO_AUTH, (), False),
    ]
    assert choices[1].label == "Key and secret"
    assert choices[2].json() == {"slug": OAUTH.slug, "label": choices[2].label, "inputs": [], "oauth": True}
    assert "oauth" not in choices[0].json()
    assert [choice.slug for choice in template_choices(integration())] == [NO_AUTH]


def test_a_template_shows_where_each_input_goes_and_never_a_fixed_value() -> None:
    assert placement_lines(PAIR) == ("header x-key: <key>", "query secret: <secret>", "header x-version: a fixed value")


def test_a_tool_shows_its_unwrapped_types_and_the_definitions_they_reach() -> None:
    tool = ToolDef(
        name="orders.get",
        description="One order",
        input_schema={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        output_schema={"$ref": "#/$defs/Order"},
        binding={},
    )
    defs = {"Order": {"type": "object", "properties": {"id": {"type": "string"}}}}
    shown = tool_view(tool, defs, "tools.shop.user.main.orders.get")
    assert shown.input == "{ id: string; }"
    assert shown.output == "Order"
    assert shown.definitions == (("Order", "{ id?: string; }"),)
    assert shown.address == "tools.shop.user.main.orders.get"
    assert tool_view(ToolDef("x", "", None, None, {}), {}).input is None


def test_a_hostile_tools_types_are_bounded_on_the_page() -> None:
    wide = {"type": "object", "properties": {f"field{index}": {"type": "string"} for index in range(2000)}}
    many = {f"D{index}": {"type": "object", "properties": {"x": {"type": "number"}}} for index in range(100)}
    output = {"type": "object", "properties": {f"d{index}": {"$ref": f"#/$defs/D{index}"} for index in range(100)}}
    shown = tool_view(ToolDef("big", "", wide, output, {}), many)
    assert shown.input is not None
    assert len(shown.input) == MAX_SHOWN_TYPESCRIPT + 1
    assert shown.input.endswith("\u2026")
    assert len(shown.definitions) == MAX_SHOWN_DEFINITIONS


def test_a_connection_row_holds_names_and_dates_never_values() -> None:
    record = ConnectionRecord(
        org_id="acme",
        owner="user",
        account_id="alice",
        integration="shop",
        name="main",
        template="apikey-0",
        provider="local",
        item_ids={"token": "item-1"},
        created_at=86400.0,
        updated_at=86400.0,
    )
    row = connection_row(record)
    assert (row.address, row.created) == ("tools.shop.user.main", "1970-01-02 00:00 UTC")
    assert "item-1" not in repr(row)


def test_the_admin_rule_is_the_services() -> None:
    assert admin_refusal(Owner(account_id="alice", org_id="acme", org_admin=True)) is None
    assert isinstance(admin_refusal(Owner(account_id="carol", org_id="acme", org_admin=False)), NotAdmin)
    assert admin_refusal(Owner(account_id="dave", org_id=None, org_admin=True)) is not None


def test_the_tool_filter_is_a_case_insensitive_substring_of_name_or_description() -> None:
    assert tool_matches("orders.getOrder", "", "GETORD")
    assert tool_matches("x", "Fetch one order", "one ord")
    assert tool_matches("x", "", None)
    assert not tool_matches("x", "y", "z")

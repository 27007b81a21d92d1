"""The pure parts of passthrough mode: which paths `invoke` accepts, the program it runs, and how a search
match is enriched and bounded."""

import json

import pytest

from executor_mcp.execution.results import truncate
from executor_mcp.toolserver.passthrough_tools import (
    MAX_ITEM_DESCRIPTION,
    MAX_ITEM_TYPES,
    MAX_SEARCH_LIMIT,
    SEARCH_LIMIT,
    InvalidPath,
    checked_path,
    input_definitions,
    invoke_program,
    search_arguments,
    search_match,
    shortened_page,
)

STATIC = {"executor.coreTools.integrations.list", "executor.coreTools.policies.create"}


def is_static(path: str) -> bool:
    return path in STATIC


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ("orders.org.main.getOrder", "orders.org.main.getOrder"),
        ("tools.orders.org.main.getOrder", "orders.org.main.getOrder"),
        ("orders.user.myMainKey.orders.getOrder", "orders.user.myMainKey.orders.getOrder"),
        ("my-api_2.org.$conn_1.repos.get-one", "my-api_2.org.$conn_1.repos.get-one"),
        ("orders.org.main.weird\"'`name", "orders.org.main.weird\"'`name"),  # the catalog answers tool_not_found
        ("executor.coreTools.integrations.list", "executor.coreTools.integrations.list"),
        ("tools.executor.coreTools.policies.create", "executor.coreTools.policies.create"),
    ],
)
def test_addresses_and_static_ids_are_accepted(raw: str, path: str) -> None:
    assert checked_path(raw, is_static) == path


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "tools.",
        "getOrder",
        "search",
        "describe.tool",
        "executor.integrations.list",  # a built-in: the search tool answers what it would
        "executor.coreTools.nope",
        'a"]);while(1);//',
        "orders.team.main.getOrder",
        "orders.org.main",
        "orders.org.main.",
        "orders.org.main..getOrder",
        "orders.org.main.get Order",
        "orders.org.main.get\u2028Order",
        "orders.org.main.get\x00Order",
        "or.ders.org.main.getOrder",
        "orders!.org.main.getOrder",
        "orders.org.my-key.getOrder",
        "orders.org.1st.getOrder",
        "orders.org." + "c" * 65 + ".getOrder",
        "o" * 65 + ".org.main.getOrder",
        "orders.org.main." + "x" * 500,
    ],
)
def test_anything_else_is_refused_saying_what_a_path_is(raw: str) -> None:
    with pytest.raises(InvalidPath) as refused:
        checked_path(raw, is_static)
    assert "`<integration>.<owner>.<connection>.<tool>`" in str(refused.value)


def test_a_refused_path_is_shown_quoted_and_shortened() -> None:
    with pytest.raises(InvalidPath) as refused:
        checked_path('x"\n' + "y" * 300, is_static)
    assert str(refused.value).startswith('Invalid tool path "x\\"\\n' + "y" * 97 + '...": ')


def test_the_program_holds_the_path_and_arguments_only_as_string_literals() -> None:
    program = invoke_program("orders.org.main.getOrder", {"orderId": "1"})
    assert program == 'return await tools["orders.org.main.getOrder"](JSON.parse("{\\"orderId\\":\\"1\\"}"));'
    assert invoke_program("executor.coreTools.integrations.list", None) == (
        'return await tools["executor.coreTools.integrations.list"]();'
    )


@pytest.mark.parametrize(
    "hostile",
    ['"]);while(1);//', "\u2028\u2029", "</script>", "\\", "`${x}`", "\ud800", "'\"\n\r\t"],
)
def test_a_program_is_one_ascii_line_whose_literals_decode_to_the_input(hostile: str) -> None:
    path = f"orders.org.main.{hostile}"
    args = {hostile: hostile, "__proto__": {"nested": [hostile]}}
    program = invoke_program(path, args)
    assert program.isascii()
    assert "\n" not in program
    head = "return await tools["
    assert program.startswith(head)
    assert program.endswith(");")
    path_literal, rest = program[len(head) :].split("](JSON.parse(", 1)
    assert json.loads(path_literal) == path
    assert json.loads(json.loads(rest.removesuffix("));"))) == args


def test_search_arguments_default_and_cap_the_limit_and_leave_refusals_to_the_builtin() -> None:
    assert search_arguments({"query": "order", "extra": 1}) == {"query": "order", "limit": SEARCH_LIMIT}
    assert search_arguments({"limit": 1000, "offset": 4})["limit"] == MAX_SEARCH_LIMIT
    assert search_arguments({"limit": 3})["limit"] == 3
    for wrong in ("5", True, -1, 0):
        assert search_arguments({"limit": wrong})["limit"] == wrong


def test_a_match_gets_its_input_type_and_the_named_types_it_reaches() -> None:
    item = {"path": "pets.org.main.pets.add", "name": "pets.add", "integration": "pets", "score": 3}
    described = {
        "inputTypeScript": "{ body: NewPet; }",
        "outputTypeScript": "{ ok: true; data: Pet; http?: ToolHttpMeta } | { ok: false; error: ToolError }",
        "typeScriptDefinitions": {
            "NewPet": "{ name: string; tag?: Tag; }",
            "Tag": "{ label: string; parent?: Tag; }",
            "Pet": "{ id: number; }",
            "ToolError": "{ code: string; message: string; }",
        },
    }
    match = search_match(item, described)
    assert match == {
        **item,
        "inputTypeScript": "{ body: NewPet; }",
        "inputDefinitions": {"NewPet": "{ name: string; tag?: Tag; }", "Tag": "{ label: string; parent?: Tag; }"},
    }


def test_a_tool_without_input_has_no_input_type() -> None:
    item = {"path": "executor.coreTools.integrations.list", "description": "List."}
    assert search_match(item, {"outputTypeScript": "x", "typeScriptDefinitions": {}}) == item


def test_oversize_descriptions_and_types_are_cut_with_the_truncation_marker() -> None:
    long_type = "{ " + "a: string; " * 400 + "}"
    item = {"path": "p.org.main.t", "description": "d" * (MAX_ITEM_DESCRIPTION + 5)}
    match = search_match(item, {"inputTypeScript": long_type, "typeScriptDefinitions": {}})
    assert match["description"] == truncate(item["description"], MAX_ITEM_DESCRIPTION)
    assert match["description"].endswith("\n... [truncated 5 chars]")
    assert match["inputTypeScript"] == truncate(long_type, MAX_ITEM_TYPES)
    assert "[truncated " in match["inputTypeScript"]


def test_named_types_that_do_not_fit_are_left_to_a_search_by_path() -> None:
    described = {"inputTypeScript": "{ body: Big; }", "typeScriptDefinitions": {"Big": "x" * MAX_ITEM_TYPES}}
    match = search_match({"path": "p.org.main.t"}, described)
    assert match == {"path": "p.org.main.t", "inputTypeScript": "{ body: Big; }"}


def test_input_definitions_end_on_cycles_and_ignore_what_is_not_a_type() -> None:
    definitions = {"A": "{ b: B; }", "B": "{ a: A; self: B; }", "C": "{}", "Odd": 7}
    assert input_definitions("{ x: A; y: Odd; z: string; }", definitions) == {
        "A": "{ b: B; }",
        "B": "{ a: A; self: B; }",
    }


def test_a_shortened_page_goes_on_right_after_its_last_match() -> None:
    found = {"items": [{"path": str(n)} for n in range(5)], "total": 12, "hasMore": True, "nextOffset": 10}
    kept = found["items"][:2]
    assert shortened_page(found, kept, start=5) == {"items": kept, "total": 12, "hasMore": True, "nextOffset": 7}
    assert shortened_page(found, found["items"], start=7.9) == {**found, "hasMore": False, "nextOffset": None}
    assert shortened_page({**found, "items": []}, [], start=40)["nextOffset"] is None

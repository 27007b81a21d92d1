"""The pure parts of the integrations API and CLI: body limits, definitions a schema reaches, the tool
filters, `--auth-header` templates and how values are read from standard input."""

import io

import pytest

from executor_mcp.integrations.commands import auth_template, read_values
from executor_mcp.integrations.openapi.auth import normalize_methods
from executor_mcp.integrations.views import ToolEntry
from executor_mcp.records.integrations import ConnectionRecord, IntegrationRecord, ToolDef
from executor_mcp.secrets.prompt import SecretInputRefused
from executor_mcp.transport.integrations_api import (
    MAX_BODY_BYTES,
    MAX_SPEC_BODY_BYTES,
    body_limit,
    referenced_definitions,
    select_tools,
)


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("/api/openapi/specs", MAX_SPEC_BODY_BYTES),
        ("/api/openapi/preview", MAX_SPEC_BODY_BYTES),
        ("/api/openapi/integrations/github/spec", MAX_SPEC_BODY_BYTES),
        ("/api/openapi/integrations/github/config", MAX_BODY_BYTES),
        ("/api/openapi/integrations/a/b/spec", MAX_BODY_BYTES),
        ("/api/openapi/specs/extra", MAX_BODY_BYTES),
        ("/api/connections", MAX_BODY_BYTES),
        ("/mcp", MAX_BODY_BYTES),
    ],
)
def test_only_the_spec_routes_take_large_bodies(path: str, limit: int) -> None:
    assert body_limit(path) == limit


def test_definitions_are_the_ones_reached_through_each_other_once() -> None:
    defs = {
        "Order": {"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Line"}}}},
        "Line": {
            "type": "object",
            "properties": {"parent": {"$ref": "#/$defs/Order"}, "sku": {"$ref": "#/$defs/a~1b"}},
        },
        "a/b": {"type": "string"},
        "Unused": {"type": "string"},
    }
    schemas = [{"type": "object", "properties": {"order": {"$ref": "#/$defs/Order"}}}, None, {"$ref": "#/$defs/Nope"}]
    assert referenced_definitions(schemas, defs) == {name: defs[name] for name in ("Order", "Line", "a/b")}
    assert referenced_definitions([{"$ref": "https://elsewhere/#/$defs/Order"}], defs) == {}


def test_a_deep_schema_is_walked_without_recursion() -> None:
    deep: dict = {"$ref": "#/$defs/Leaf"}
    for _ in range(50_000):
        deep = {"items": deep}
    assert referenced_definitions([deep], {"Leaf": {"type": "string"}}) == {"Leaf": {"type": "string"}}


def _entry(integration: str, owner: str, connection: str, name: str, description: str) -> ToolEntry:
    record = IntegrationRecord(
        org_id="acme",
        slug=integration,
        kind="openapi",
        name=integration,
        description="",
        source_hash="0" * 64,
        config={},
        auth_methods=(),
        created_at=0.0,
        updated_at=0.0,
    )
    bound = ConnectionRecord(
        org_id="acme",
        owner=owner,
        account_id="" if owner == "org" else "alice",
        integration=integration,
        name=connection,
        template="none",
        provider=None,
        item_ids={},
        created_at=0.0,
        updated_at=0.0,
    )
    return ToolEntry(record, bound, ToolDef(name, description, None, None, {}))


def test_tool_filters_combine_and_the_query_ignores_case() -> None:
    entries = [
        _entry("github", "org", "main", "repos.get", "Get a repository."),
        _entry("github", "user", "mine", "repos.get", "Get a repository."),
        _entry("github", "org", "main", "issues.list", "List ISSUES of a repository."),
        _entry("stripe", "org", "main", "charges.create", "Create a charge."),
    ]
    assert select_tools(entries) == entries
    assert select_tools(entries, integration="github", owner="org") == [entries[0], entries[2]]
    assert select_tools(entries, connection="mine") == [entries[1]]
    assert select_tools(entries, query="issues") == [entries[2]]
    assert select_tools(entries, query="REPOS.") == entries[:2]
    assert select_tools(entries, integration="stripe", query="repository") == []


def test_auth_headers_become_one_method_in_the_authoring_dialect() -> None:
    (method,) = normalize_methods(auth_template(["Authorization:Bearer ", "X-App-Key", "X-Team:team "]))
    assert method.slug == "apikey"
    assert method.inputs == ("token", "x_app_key", "x_team")
    assert [(p.name, p.prefix) for p in method.placements] == [
        ("Authorization", "Bearer "),
        ("X-App-Key", ""),
        ("X-Team", "team "),
    ]


def test_one_piped_value_is_all_of_stdin_and_several_are_one_line_each() -> None:
    assert read_values(["token"], io.BytesIO(b"-----BEGIN-----\nabc\n-----END-----\n"), False) == {
        "token": "-----BEGIN-----\nabc\n-----END-----"
    }
    assert read_values(["a", "b"], io.BytesIO(b"one\r\ntwo\n"), False) == {"a": "one", "b": "two"}
    with pytest.raises(SecretInputRefused):
        read_values(["a", "b"], io.BytesIO(b"only-one\n"), False)


def test_a_tty_asks_once_per_input_without_echo() -> None:
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return f"value-of-{prompt}"

    values = read_values(["token", "team"], io.BytesIO(b"unread"), True, ask)
    assert asked == ["token: ", "team: "]
    assert values == {"token": "value-of-token: ", "team": "value-of-team: "}

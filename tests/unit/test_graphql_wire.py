"""GraphQL introspection answers, hostile schemas, result mapping, the request on the wire and registration
(sans-I/O)."""

import json
from typing import Any

import pytest

from executor_mcp.codec import loads
from executor_mcp.integrations.graphql import introspection
from executor_mcp.integrations.graphql.compile import compile_catalog
from executor_mcp.integrations.graphql.introspection import (
    INTROSPECTION_QUERY,
    MAX_TYPES,
    SchemaRefused,
    read_answer,
    sdl_source,
    snapshot_source,
)
from executor_mcp.integrations.graphql.kind import credential_placements, http_request
from executor_mcp.integrations.graphql.registration import registration
from executor_mcp.integrations.graphql.response import classify
from executor_mcp.outbound.model import OutboundResponse
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import DISCOVERED_PER_CONNECTION, AuthMethod, Placement
from tests.graphql_upstream import SDL

SECRET = "sk-secret-value-42"


def answer(status: int, body: Any, headers: dict[str, str] | None = None) -> OutboundResponse:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return OutboundResponse(status=status, headers=headers or {}, body=raw)


def schema_answer() -> dict[str, Any]:
    return {"data": loads(sdl_source(SDL, 10_000_000))}


# -- introspection ------------------------------------------------------------------------------------------


def test_the_introspection_query_asks_for_non_deprecated_fields_and_type_refs_seven_deep() -> None:
    assert "fields(includeDeprecated: false)" in INTROSPECTION_QUERY
    assert "enumValues(includeDeprecated: false)" in INTROSPECTION_QUERY
    type_ref = INTROSPECTION_QUERY[INTROSPECTION_QUERY.index("fragment TypeRef") :]
    assert type_ref.count("ofType") == 7


def test_an_introspection_answer_becomes_the_stored_schema() -> None:
    stored = read_answer(answer(200, schema_answer()), [])
    assert [tool.name for tool in compile_catalog(stored).tools][:2] == ["mutation.cancelOrder", "query.failing"]
    assert read_answer(answer(200, {"data": loads(stored)}), []) == stored  # the form is a fixed point


def test_introspection_failures_carry_upstream_s_messages_without_the_credential() -> None:
    with pytest.raises(SchemaRefused) as failed:
        read_answer(answer(401, {"message": f"token {SECRET} is not valid"}), [SECRET])
    assert failed.value.message == "Introspection failed with status 401: token [redacted] is not valid"
    assert SECRET not in failed.value.message
    with pytest.raises(SchemaRefused) as failed:
        read_answer(answer(502, b"<html>" + b"x" * 5000), [])
    assert failed.value.message.startswith("Introspection failed with status 502: <html>xxx")
    assert len(failed.value.message) == len("Introspection failed with status 502: ") + 500


def test_introspection_errors_and_a_missing_schema_are_named() -> None:
    errors = {"errors": [{"message": "GraphQL introspection is not allowed"}, {"message": "second"}]}
    with pytest.raises(SchemaRefused) as failed:
        read_answer(answer(200, errors), [])
    assert failed.value.message == "Introspection returned 2 error(s): GraphQL introspection is not allowed; second"
    for body in ({"data": {}}, {"data": None}, b"not json", [1, 2]):
        with pytest.raises(SchemaRefused) as failed:
            read_answer(answer(200, body), [])
        assert failed.value.message == "Introspection response missing __schema"


def test_redaction_hides_bearer_looking_tokens_and_collapses_whitespace() -> None:
    assert introspection.redact("bad\n\n Bearer abc.def-123 here", []) == "bad Bearer [redacted] here"


@pytest.mark.parametrize(
    "schema",
    [
        {"queryType": {"name": "Query"}, "types": [{"kind": "OBJECT", "name": "bad name", "fields": []}]},
        {"queryType": {"name": "Query"}, "types": [{"kind": "NOPE", "name": "Query"}]},
        {"queryType": {"name": "Query"}, "types": "many"},
        {"queryType": {"name": "Query"}, "types": [{"kind": "SCALAR", "name": f"S{i}"} for i in range(MAX_TYPES + 1)]},
    ],
)
def test_a_malformed_or_oversized_schema_is_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaRefused):
        read_answer(answer(200, {"data": {"__schema": schema}}), [])


def test_a_type_reference_nested_past_seven_wrappers_is_refused_without_recursion() -> None:
    ref: dict[str, Any] = {"kind": "SCALAR", "name": "Int"}
    for _ in range(100_000):
        ref = {"kind": "LIST", "name": None, "ofType": ref}
    field = {"name": "f", "args": [], "type": ref}
    schema = {"queryType": {"name": "Query"}, "types": [{"kind": "OBJECT", "name": "Query", "fields": [field]}]}
    with pytest.raises(SchemaRefused, match="deeper than 7"):
        introspection.normalize(schema)


def test_a_deeply_nested_json_answer_is_refused_not_crashed() -> None:
    with pytest.raises(SchemaRefused):
        read_answer(answer(200, b"[" * 200_000), [])


def test_duplicate_fields_keep_the_first() -> None:
    field = {"name": "f", "description": "first", "args": [], "type": {"kind": "SCALAR", "name": "Int"}}
    twice = {**field, "description": "second"}
    schema = {"queryType": {"name": "Query"}, "types": [{"kind": "OBJECT", "name": "Query", "fields": [field, twice]}]}
    tools = compile_catalog(json.dumps({"__schema": schema}).encode()).tools
    assert [(t.name, t.description) for t in tools] == [("query.f", "first")]


def test_snapshots_are_accepted_wrapped_unwrapped_or_as_text() -> None:
    data = schema_answer()
    stored = snapshot_source(data, 10_000_000)
    assert snapshot_source(data["data"], 10_000_000) == stored
    assert snapshot_source(json.dumps(data), 10_000_000) == stored
    with pytest.raises(SchemaRefused):
        snapshot_source({"nope": 1}, 10_000_000)
    with pytest.raises(SchemaRefused):
        snapshot_source("{not json", 10_000_000)


def test_an_invalid_sdl_is_refused_with_the_reason() -> None:
    with pytest.raises(SchemaRefused, match="Unknown type 'Nope'"):
        sdl_source("type Query { a: Nope }", 10_000_000)
    with pytest.raises(SchemaRefused, match="larger than"):
        sdl_source(SDL, 100)


# -- results ------------------------------------------------------------------------------------------------

WHO = {"integration": "shop", "owner": "org", "connection": "main"}


def test_data_is_the_result_with_no_http_key() -> None:
    assert classify(answer(200, {"data": {"order": {"id": "o-1"}}}), **WHO) == {
        "ok": True,
        "data": {"order": {"id": "o-1"}},
    }


def test_graphql_errors_carry_the_first_message_and_every_error() -> None:
    errors = [{"message": "the warehouse is on fire", "path": ["failing"]}, {"message": "second"}]
    result = classify(answer(200, {"data": {"failing": None}, "errors": errors}), **WHO)
    assert result == {
        "ok": False,
        "error": {"code": "graphql_errors", "message": "the warehouse is on fire", "details": {"errors": errors}},
    }
    validation = classify(answer(400, {"errors": [{"message": "Cannot query field 'x'."}]}), **WHO)
    assert validation["error"]["code"] == "graphql_errors"


def test_401_and_403_are_the_credential_s_failure_before_graphql_errors() -> None:
    rejected = classify(answer(401, {"errors": [{"message": "no"}]}), **WHO)
    assert rejected["error"]["code"] == "connection_rejected"
    assert rejected["error"]["details"]["category"] == "authentication"
    scoped = classify(
        answer(403, {"errors": []}, {"www-authenticate": 'Bearer error="insufficient_scope", scope="orders:write"'}),
        **WHO,
    )
    assert scoped["error"]["code"] == "oauth_scope_insufficient"
    assert "orders:write" in scoped["error"]["message"]
    assert classify(answer(403, b""), **WHO)["error"]["code"] == "connection_rejected"


def test_other_non_2xx_and_non_json_answers() -> None:
    assert classify(answer(502, b"<html>bad gateway"), **WHO) == {
        "ok": False,
        "error": {"code": "graphql_http_error", "status": 502, "message": "GraphQL request failed with HTTP 502"},
    }
    assert classify(answer(200, b"<html>"), **WHO)["error"]["code"] == "graphql_invalid_response"


# -- the request --------------------------------------------------------------------------------------------


def test_the_request_is_a_json_post_with_static_values_under_the_credential() -> None:
    request = http_request(
        "https://api.example.com/graphql?v=1&api_key=old",
        {"query": "{ a }"},
        static_headers={"X-Team": "t", "authorization": "static", "Content-Type": "text/plain"},
        static_query={"team": "42", "api_key": "static"},
        credential_headers={"Authorization": "Bearer tok"},
        credential_query={"api_key": "tok"},
    )
    headers = dict(request.headers)
    assert request.method == "POST"
    assert request.body == b'{"query":"{ a }"}'
    assert headers == {
        "User-Agent": "executor-graphql",
        "X-Team": "t",
        "Authorization": "Bearer tok",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    assert request.url == "https://api.example.com/graphql?v=1&team=42&api_key=tok"
    assert request.credential_headers == frozenset({"authorization"})
    assert request.credential_query == frozenset({"api_key"})


def test_oauth2_renders_a_bearer_unless_the_method_names_a_header_and_prefix() -> None:
    plain = AuthMethod(slug="oauth", kind="oauth2", oauth={"tokenUrl": "https://as/token"})
    assert credential_placements(plain, {"token": "t"}) == ({"authorization": "Bearer t"}, {})
    custom = AuthMethod(slug="oauth", kind="oauth2", oauth={"tokenUrl": "u", "header": "X-Token", "prefix": ""})
    assert credential_placements(custom, {"token": "t"}) == ({"X-Token": "t"}, {})
    query = AuthMethod(slug="q", kind="apikey", placements=(Placement("query", "api_key"),))
    assert credential_placements(query, {"token": "t"}) == ({}, {"api_key": "t"})


# -- registration -------------------------------------------------------------------------------------------


def register(values: dict[str, Any], endpoint: str = "https://api.example.com/graphql") -> Any:
    return registration(
        values,
        endpoint=endpoint,
        static={},
        auth_methods=(),
        name=values.get("name"),
        description=values.get("description"),
        max_source_bytes=10_000_000,
    )


def test_without_a_schema_every_connection_introspects() -> None:
    made = register({"endpoint": "https://api.example.com/graphql"})
    assert made.source == DISCOVERED_PER_CONNECTION
    assert made.config == {"endpoint": "https://api.example.com/graphql", "introspection": "connection"}
    assert made.can_refresh
    assert (made.slug, made.slug_hint, made.name) == (None, "api.example.com", "api.example.com")
    assert made.description == "GraphQL API at api.example.com"


def test_an_sdl_or_a_snapshot_is_the_integration_s_schema() -> None:
    from_sdl = register({"sdl": SDL, "name": "Shop", "slug": "shop"})
    assert from_sdl.config["introspection"] == "snapshot"
    assert not from_sdl.can_refresh
    assert (from_sdl.slug, from_sdl.slug_hint, from_sdl.name) == ("shop", "Shop", "Shop")
    assert register({"introspectionJson": schema_answer()}).source == from_sdl.source


@pytest.mark.parametrize(
    "values",
    [{"sdl": SDL, "introspectionJson": {}}, {"sdl": 4}, {"sdl": "  "}, {"introspectionJson": 4}, {"slug": 3}],
)
def test_registration_refuses_what_cannot_be_one(values: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        register(values)

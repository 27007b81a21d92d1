"""OpenAPI → tools, as upstream compiles them (upstream-integrations §1.3, §1.5, §3.1): naming vectors,
schemas, descriptions, annotations, bindings, auth methods and the preview."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from executor_mcp.codec import converter
from executor_mcp.integrations.openapi import auth, naming
from executor_mcp.integrations.openapi.binding import Binding
from executor_mcp.integrations.openapi.compile import (
    FILE_OUTPUT_HINT,
    NDJSON_DESCRIPTION,
    TOOL_FILE_SCHEMA,
    CompiledSpec,
    compile_spec,
    decode_compiled,
    encode_compiled,
    integration_description,
    integration_name,
    preview,
)
from executor_mcp.integrations.openapi.document import parse
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import AuthMethod, Placement, ToolDef

TOKEN_PART = {"type": "variable", "name": "token"}
FIXTURES = Path(__file__).parent.parent / "fixtures" / "openapi"


def fixture(name: str) -> CompiledSpec:
    return compile_spec((FIXTURES / name).read_bytes())


def spec_of(paths: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps({"openapi": "3.0.0", "info": {"title": "T", "version": "1"}, "paths": paths, **extra}).encode()


def tool(spec: CompiledSpec, name: str) -> ToolDef:
    return next(t for t in spec.catalog.tools if t.name == name)


def binding(spec: CompiledSpec, name: str) -> Binding:
    return converter.structure(tool(spec, name).binding, Binding)


def names(paths: dict[str, Any]) -> list[str]:
    return [t.name for t in compile_spec(spec_of(paths)).catalog.tools]


def op(operation_id: str | None = None, tags: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    operation: dict[str, Any] = {"responses": {"200": {"description": "ok"}}, **extra}
    if operation_id is not None:
        operation["operationId"] = operation_id
    if tags is not None:
        operation["tags"] = tags
    return operation


# -- naming ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        ({"/pets/{id}": {"get": op("pets.getPet", ["pets"])}}, ["pets.getPet"]),
        ({"/orders/{id}": {"get": op("getOrder", ["orders"])}}, ["orders.getOrder"]),
        ({"/ping": {"get": op("ping", ["default"])}}, ["default.ping"]),
        ({"/ping": {"get": op("ping")}}, ["ping.getOperation"]),
        (
            {"/legacy": {"get": op("legacyOp")}, "/widgets": {"get": op("listWidgets")}},
            ["legacy.legacyOp", "widgets.listWidgets"],
        ),
        (
            {"/downloads/point/{period}/{package}": {"get": op("getPackageDownloads")}},
            ["downloads.getPackageDownloads"],
        ),
        (
            {"/items": {"get": op("listItems"), "delete": op("listItems")}},
            ["items.listItemsDelete", "items.listItemsGet"],
        ),
        ({"/u/{id}/m": {"get": op("x", **{"x-executor-toolPath": " users.messages.list "})}}, ["users.messages.list"]),
        ({"/zones": {"get": op("zones_listZones")}}, ["zones.zonesListZones"]),
    ],
)
def test_upstream_naming_vectors(paths: dict[str, Any], expected: list[str]) -> None:
    assert names(paths) == expected


def test_names_without_operation_ids_come_from_method_and_path() -> None:
    assert names({"/api/v1/users/{id}/keys": {"get": op(), "post": op()}}) == [
        "users.getApiV1UsersIdKeys",
        "users.postApiV1UsersIdKeys",
    ]
    assert names({"/": {"get": op()}}) == ["root.get"]
    assert (
        naming.operation_id("get", "/api/v1/users/{id}", None) == "get__api_v1_users_id"
    )  # as upstream: the path keeps its leading "_"
    assert naming.operation_id("get", "/", None) == "get"
    assert naming.operation_id("get", "", None) == "get"


def test_version_segments_split_collisions_first() -> None:
    paths = {"/v1/widgets": {"get": op("listWidgets")}, "/v2/widgets": {"get": op("listWidgets")}}
    assert names(paths) == ["widgets.v1.listWidgets", "widgets.v2.listWidgets"]


def test_the_last_round_adds_upstreams_string_hash() -> None:
    paths = {"/a/x": {"get": op("same", ["t"])}, "/b/x": {"get": op("same", ["t"])}}
    first = naming.string_hash(
        json.dumps({"method": "get", "operationId": "same", "path": "/a/x"}, separators=(",", ":"))
    )
    second = naming.string_hash(
        json.dumps({"method": "get", "operationId": "same", "path": "/b/x"}, separators=(",", ":"))
    )
    assert sorted(names(paths)) == sorted([f"t.sameGet_{first}", f"t.sameGet_{second}"])


def test_string_hash_matches_javascript() -> None:
    # Computed with node: the int32 `(h << 5) - h + c` hash, abs, base36, padded to 8.
    assert naming.string_hash("hello") == "001n1e4y"
    assert naming.string_hash("") == "00000000"
    assert len(naming.string_hash("x" * 10_000)) >= 8


def test_split_words_and_cases() -> None:
    assert naming.split_words("getHTTPResponse") == ["get", "HTTP", "Response"]
    assert naming.split_words("zones_listZones") == ["zones", "list", "Zones"]
    assert naming.camel("XMLHttpRequest") == "xmlHttpRequest"
    assert naming.camel("--") == "tool"
    assert naming.pascal("list users") == "ListUsers"
    assert naming.is_version_segment("v1")
    assert naming.is_version_segment("V2_1")
    assert not naming.is_version_segment("v")


def test_tools_are_sorted_by_code_point() -> None:
    assert names({"/b": {"get": op("b", ["Zeta"])}, "/a": {"get": op("a", ["alpha"])}}) == ["alpha.a", "zeta.b"]


# -- the orders fixture: §3.4's observed shapes -----------------------------------------------------------


def test_input_schema_uses_plain_names_and_upstreams_rules() -> None:
    spec = fixture("orders.yaml")
    get_order = tool(spec, "orders.getOrder")
    assert get_order.description == "Fetch one order by id."
    assert get_order.input_schema == {
        "type": "object",
        "properties": {
            "orderId": {"type": "string"},
            "include": {"type": "array", "items": {"type": "string", "enum": ["items", "customer"]}},
            "X-Trace": {"type": "string"},
            "session": {"type": "string"},
        },
        "required": ["orderId"],
        "additionalProperties": False,
    }
    assert get_order.output_schema == {"$ref": "#/$defs/Order"}
    assert spec.catalog.defs["Order"]["required"] == ["id", "status"]
    assert (get_order.requires_approval, get_order.approval_description) == (False, None)


def test_bindings_keep_locations_styles_and_servers() -> None:
    found = binding(fixture("orders.yaml"), "orders.getOrder")
    assert (found.method, found.path_template) == ("get", "/orders/{orderId}")
    assert [(p.name, p.location, p.required) for p in found.parameters] == [
        ("orderId", "path", True),
        ("include", "query", False),
        ("X-Trace", "header", False),
        ("session", "cookie", False),
    ]
    include = found.parameters[1]
    assert (include.style, include.explode) == ("form", False)
    assert [s.url for s in found.servers] == ["https://orders.example.test/v1"]
    assert found.response.media_type == "application/json"
    assert found.response.file is None


def test_a_required_body_from_a_component() -> None:
    spec = fixture("orders.yaml")
    create = tool(spec, "orders.createOrder")
    assert create.description == "POST /orders"
    assert create.input_schema is not None
    assert create.input_schema["required"] == ["body"]
    assert (create.requires_approval, create.approval_description) == (True, "POST /orders")
    body = binding(spec, "orders.createOrder").request_body
    assert body is not None
    assert body.required
    assert [c.media_type for c in body.contents] == ["application/json"]
    assert create.output_schema == {"$ref": "#/$defs/Order"}  # 201 through a components response


def test_two_media_types_add_content_type_and_keep_the_first_as_default() -> None:
    spec = fixture("orders.yaml")
    notes = tool(spec, "orders.setNotes")
    assert notes.input_schema is not None
    properties = notes.input_schema["properties"]
    assert properties["contentType"]["enum"] == ["application/x-www-form-urlencoded", "application/json"]
    assert properties["contentType"]["default"] == "application/x-www-form-urlencoded"
    assert properties["body"]["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert notes.input_schema["required"] == ["orderId"]  # the body is optional
    body = binding(spec, "orders.setNotes").request_body
    assert body is not None
    assert body.contents[0].encoding == {"tags": {"style": "form", "explode": True}}
    # The response is chosen JSON-first, though text/plain is declared first.
    assert notes.output_schema == {"type": "object", "properties": {"saved": {"type": "boolean"}}}
    assert binding(spec, "orders.setNotes").response.media_type == "application/json"


def test_an_octet_stream_body_is_body_base64() -> None:
    upload = tool(fixture("orders.yaml"), "orders.uploadAttachment")
    assert upload.input_schema is not None
    assert upload.input_schema["required"] == ["orderId", "bodyBase64"]
    assert "body" not in upload.input_schema["properties"]
    assert upload.input_schema["properties"]["bodyBase64"]["contentMediaType"] == "application/octet-stream"


def test_body_and_bytes_both_possible_make_an_any_of() -> None:
    content = {"application/json": {"schema": {"type": "object"}}, "application/octet-stream": {}}
    spec = compile_spec(spec_of({"/up": {"post": op("upload", requestBody={"required": True, "content": content})}}))
    schema = tool(spec, "up.upload").input_schema
    assert schema is not None
    assert schema["anyOf"] == [{"required": ["body"]}, {"required": ["bodyBase64"]}]
    assert "required" not in schema
    assert list(schema["properties"]) == ["body", "bodyBase64", "contentType"]


def test_files_return_a_tool_file_and_say_so() -> None:
    spec = fixture("orders.yaml")
    invoice = tool(spec, "orders.getInvoice")
    assert invoice.output_schema == TOOL_FILE_SCHEMA
    assert invoice.description == f"GET /orders/{{orderId}}/invoice.pdf\n\n{FILE_OUTPUT_HINT}"
    assert "emit(result.data)" in invoice.description
    found = binding(spec, "orders.getInvoice")
    assert found.path_template == "/orders/{orderId}/invoice.pdf"  # x-executor-pathTemplate
    assert (found.response.file, found.response.media_type) == ("binary", "application/pdf")
    attachment = binding(spec, "orders.uploadAttachment").response
    assert (attachment.file, attachment.byte_encoding) == ("byteField", "base64url")


def test_ndjson_is_wrapped_as_an_array() -> None:
    events = tool(fixture("orders.yaml"), "events.streamEvents")
    assert events.output_schema == {
        "type": "array",
        "items": {"type": "object", "properties": {"id": {"type": "string"}}},
        "description": NDJSON_DESCRIPTION,
    }
    assert events.description == "Stream events"


def test_no_parameters_no_input_schema_and_method_path_description() -> None:
    spec = fixture("orders.yaml")
    boom = tool(spec, "boom.getBoom")
    assert (boom.input_schema, boom.output_schema, boom.description) == (None, None, "GET /boom")


def test_deprecated_operations_content_parameters_and_deep_pointers() -> None:
    spec = fixture("orders.yaml")
    cancel = tool(spec, "orders.cancelOrder")
    assert (cancel.description, cancel.approval_description) == ("Cancel an order", "DELETE /orders/{orderId}")
    messages = tool(spec, "users.messages.list")
    assert messages.input_schema is not None
    assert messages.input_schema["properties"]["filter"] == {"type": "string"}
    assert messages.output_schema == {
        "type": "array",
        "items": {"type": "string", "enum": ["pending", "shipped", "delivered"]},
    }


def test_cyclic_schemas_stay_references() -> None:
    spec = fixture("cyclic.yaml")
    node = spec.catalog.defs["Node"]
    assert node["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert spec.catalog.defs["Meta"]["properties"]["owner"] == {"$ref": "#/$defs/Node"}
    assert tool(spec, "nodes.getNode").output_schema == {"$ref": "#/$defs/Node"}


def test_openapi_3_1_type_lists_and_null() -> None:
    spec = fixture("pets-3.1.json")
    assert [t.name for t in spec.catalog.tools] == ["pets.getPet", "pets.listPets"]
    assert spec.catalog.defs["Pet"]["properties"]["owner-info"] == {"$ref": "#/$defs/owner-info"}
    limit = tool(spec, "pets.listPets").input_schema
    assert limit is not None
    assert limit["properties"]["limit"] == {"type": ["integer", "null"]}


def test_several_servers_and_variables_make_a_server_input() -> None:
    spec = fixture("servers.yaml")
    widgets = tool(spec, "widgets.v2.listWidgets").input_schema
    assert widgets is not None
    server = widgets["properties"]["server"]
    assert server["additionalProperties"] is False
    assert server["properties"]["url"]["enum"] == [
        "https://{region}.api.example.test/{basePath}",
        "https://sandbox.example.test",
    ]
    assert server["properties"]["url"]["default"] == "https://{region}.api.example.test/{basePath}"
    assert server["properties"]["variables"]["properties"] == {
        "region": {"type": "string", "default": "eu", "enum": ["eu", "us"], "description": "Data residency"},
        "basePath": {"type": "string", "default": "v2"},
    }
    # An operation-level server replaces the document's: one server, no variables, no `server` input.
    assert tool(spec, "widgets.v3.listWidgets").input_schema is None
    assert [s.url for s in binding(spec, "widgets.v3.listWidgets").servers] == ["https://v3.example.test"]
    # A parameter called `server` wins over the host input.
    status = tool(spec, "status.getOperation").input_schema
    assert status is not None
    assert status["properties"]["server"] == {"type": "string"}


def test_path_item_parameters_merge_and_the_operation_wins() -> None:
    item = {
        "parameters": [{"name": "id", "in": "path", "schema": {"type": "string"}}, {"name": "q", "in": "query"}],
        "get": op("find", parameters=[{"name": "q", "in": "query", "required": True, "schema": {"type": "integer"}}]),
    }
    schema = tool(compile_spec(spec_of({"/things/{id}": item})), "things.find").input_schema
    assert schema is not None
    assert schema["properties"] == {"id": {"type": "string"}, "q": {"type": "integer"}}
    assert schema["required"] == ["id", "q"]


def test_response_selection_order() -> None:
    def output(responses: dict[str, Any]) -> Any:
        spec = compile_spec(spec_of({"/r": {"get": op("read", responses=responses)}}))
        return tool(spec, "r.read").output_schema

    def body(kind: str) -> dict[str, Any]:
        return {"description": "", "content": {"application/json": {"schema": {"type": kind}}}}

    assert output({"default": body("string"), "202": body("number"), "201": body("boolean")}) == {"type": "boolean"}
    assert output({"default": body("string"), "2XX": body("number")}) == {"type": "number"}
    assert output({"400": body("number"), "default": body("string")}) == {"type": "string"}
    assert output({"200": {"description": "no body"}, "204": body("integer")}) == {"type": "integer"}


def test_compiled_specs_round_trip_through_storage() -> None:
    spec = fixture("orders.yaml")
    assert decode_compiled(encode_compiled(spec)) == spec


def test_identity_defaults() -> None:
    spec = fixture("orders.yaml")
    assert integration_name(spec, None, "orders") == "Orders API"
    assert integration_name(spec, "Mine", "orders") == "Mine"
    assert integration_description(spec, None, "orders") == "Orders, carts and the files they print."
    untitled = compile_spec(b'{"openapi": "3.0.0", "paths": {}}')
    assert integration_name(untitled, None, "slug") == "slug"
    assert integration_description(untitled, None, "slug") == "slug"
    titled = compile_spec(b'{"openapi": "3.0.0", "info": {"title": "Only a title"}, "paths": {}}')
    assert integration_description(titled, None, "slug") == "Only a title"


# -- the preview -------------------------------------------------------------------------------------------


def test_preview_has_upstreams_keys_and_no_operations() -> None:
    summary = preview(fixture("orders.yaml"))
    assert set(summary) == {
        "title", "description", "version", "servers", "operationCount", "tags", "securitySchemes",
        "authStrategies", "headerPresets", "oauth2Presets",
    }  # fmt: skip
    assert "operations" not in summary
    assert summary["operationCount"] == 10
    assert summary["servers"] == [{"url": "https://orders.example.test/v1"}]
    assert summary["authStrategies"] == [
        {"schemes": ["bearerAuth"]},
        {"schemes": ["apiKeyHeader"]},
        {"schemes": ["apiKeyQuery"]},
    ]
    assert summary["headerPresets"][0] == {
        "label": "Bearer Token",
        "headers": {"Authorization": None},
        "secretHeaders": ["Authorization"],
    }
    assert summary["headerPresets"][2] == {"label": "apiKeyQuery (query)", "headers": {}, "secretHeaders": []}
    assert summary["oauth2Presets"][0]["flow"] == "authorizationCode"
    assert summary["oauth2Presets"][0]["identityScopes"] == "auto"
    json.dumps(summary)


def test_preview_lists_server_variables() -> None:
    servers = preview(fixture("servers.yaml"))["servers"]
    assert servers[0]["variables"]["region"] == {"default": "eu", "enum": ["eu", "us"], "description": "Data residency"}
    assert servers[0]["description"] == "regional"


# -- auth methods ------------------------------------------------------------------------------------------


def test_methods_derived_from_the_document_security() -> None:
    methods = fixture("orders.yaml").auth_methods
    assert [(m.slug, m.kind) for m in methods] == [
        ("apikey-0", "apikey"),
        ("apikey-1", "apikey"),
        ("apikey-2", "apikey"),
        ("oauth-oauth", "oauth2"),
    ]
    assert methods[0].placements == (Placement("header", "Authorization", "Bearer "),)
    assert methods[1].placements == (Placement("header", "X-Api-Key"),)
    assert methods[2].placements == (Placement("query", "api_key"),)  # deliberate fix: upstream drops it
    oauth = methods[3].oauth
    assert oauth is not None
    assert oauth["authorizationUrl"] == "https://orders.example.test/oauth/authorize"  # resolved against the server
    assert oauth["scopes"] == ["orders:read"]


def test_without_document_security_each_scheme_is_a_strategy() -> None:
    schemes = {
        "basic": {"type": "http", "scheme": "basic"},
        "cookie": {"type": "apiKey", "in": "cookie", "name": "sid"},
        "ref": {"$ref": "#/components/securitySchemes/basic"},
    }
    spec = compile_spec(spec_of({}, components={"securitySchemes": schemes}))
    assert [(m.slug, m.placements) for m in spec.auth_methods] == [
        ("apikey-0", (Placement("header", "Authorization", "Basic "),)),
        ("apikey-2", (Placement("header", "Authorization", "Basic "),)),
    ]  # the cookie key places nothing, so it makes no method


def test_a_strategy_of_several_schemes_names_each_input() -> None:
    schemes = {
        "key": {"type": "apiKey", "in": "header", "name": "DD-API-KEY"},
        "app": {"type": "apiKey", "in": "header", "name": "DD-APPLICATION-KEY"},
    }
    spec = compile_spec(spec_of({}, security=[{"key": [], "app": []}], components={"securitySchemes": schemes}))
    (method,) = spec.auth_methods
    assert method.placements == (
        Placement("header", "DD-API-KEY", variable="dd_api_key"),
        Placement("header", "DD-APPLICATION-KEY", variable="dd_application_key"),
    )
    assert method.inputs == ("dd_api_key", "dd_application_key")


def test_normalize_the_canonical_shape_and_the_authoring_dialect() -> None:
    methods = auth.normalize_methods(
        [
            {"slug": "bearer", "type": "apiKey", "headers": {"Authorization": ["Bearer ", TOKEN_PART]},
             "queryParams": {"team_id": [{"type": "variable", "name": "team_id"}], "v": "2"}},
            {"kind": "apikey", "placements": [{"carrier": "header", "name": "X-Api-Key", "variable": "token"}]},
            {"slug": "public", "kind": "none"},
        ]
    )  # fmt: skip
    assert methods == (
        AuthMethod("bearer", "apikey", placements=(
            Placement("header", "Authorization", "Bearer "),
            Placement("query", "team_id", variable="team_id"),
            Placement("query", "v", literal="2"),
        )),
        AuthMethod("apikey-1", "apikey", placements=(Placement("header", "X-Api-Key"),)),
        AuthMethod("public", "none"),
    )  # fmt: skip


@pytest.mark.parametrize(
    "value",
    [
        [{"type": "variable", "name": "a"}, {"type": "variable", "name": "b"}],
        [{"type": "variable", "name": "a"}, "suffix"],
        ["only literals"],
        [],
        5,
    ],
)
def test_a_template_renders_at_most_one_final_variable(value: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        auth.normalize_methods([{"slug": "x", "type": "apiKey", "headers": {"Authorization": value}}])
    assert refused.value.message == auth.ONE_VARIABLE
    assert auth.ONE_VARIABLE == (
        "a template value renders at most ONE variable, as the FINAL part — split extra variables/suffixes "
        "into separate header or query entries"
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "apikey"},
        [{"kind": "apikey", "placements": [{"carrier": "cookie", "name": "sid"}]}],
        [{"kind": "apikey", "placements": [{"carrier": "header", "name": ""}]}],
        [{"kind": "apikey", "placements": [{"carrier": "header", "name": "A\r\nB: c"}]}],
        [{"slug": "has.dot", "kind": "none"}],
        [{"slug": "a", "kind": "none"}, {"slug": "a", "kind": "none"}],
        [{"kind": "basic"}],
        ["apikey"],
        [{"kind": "none"}] * 33,
    ],
)
def test_bad_method_shapes_are_invalid_input(raw: Any) -> None:
    with pytest.raises(InvalidInput):
        auth.normalize_methods(raw)


def test_merge_replaces_same_slugs_and_appends_fresh_custom_slugs() -> None:
    existing = (AuthMethod("apikey-0", "apikey", placements=(Placement("header", "A"),)), AuthMethod("none", "none"))
    new = auth.normalize_methods(
        [{"slug": "apikey-0", "kind": "apikey", "placements": [{"carrier": "header", "name": "B"}]},
         {"kind": "apikey", "placements": [{"carrier": "query", "name": "k"}]}],
        backfill=False,
    )  # fmt: skip
    merged = auth.merge_methods(existing, new, "merge")
    assert [m.slug for m in merged[:2]] == ["apikey-0", "none"]
    assert merged[0].placements == (Placement("header", "B"),)
    assert re.fullmatch(r"custom_[0-9a-z]{6}", merged[2].slug)
    assert auth.merge_methods(existing, new, "replace") == new
    with pytest.raises(InvalidInput):
        auth.merge_methods(existing, new, "append")


def test_the_catalog_projection() -> None:
    methods = auth.normalize_methods(
        [{"slug": "key", "type": "apiKey", "headers": {"X-Api-Key": ["Bearer ", TOKEN_PART]}},
         {"slug": "two", "kind": "apikey", "label": "Datadog",
          "placements": [{"carrier": "header", "name": "A", "variable": "app"}]},
         {"slug": "none", "kind": "none"}]
    )  # fmt: skip
    assert auth.describe_methods(methods) == [
        {"id": "key", "label": "API key (X-Api-Key)", "kind": "apikey", "template": "key",
         "placements": [{"carrier": "header", "name": "X-Api-Key", "prefix": "Bearer "}]},
        {"id": "two", "label": "Datadog", "kind": "apikey", "template": "two",
         "placements": [{"carrier": "header", "name": "A", "prefix": "", "variable": "app"}]},
        {"id": "none", "label": "No authentication", "kind": "none", "template": "none"},
    ]  # fmt: skip
    oauth = auth.describe_methods(fixture("orders.yaml").auth_methods)[-1]
    assert (oauth["kind"], oauth["oauth"]["tokenUrl"]) == ("oauth", "https://auth.example.test/token")


def test_documents_parse_from_yaml_with_json_keys() -> None:
    document = parse(b"openapi: 3.0.0\npaths:\n  /a:\n    get:\n      responses:\n        200: {description: ok}\n")
    assert list(document.paths["/a"]["get"]["responses"]) == ["200"]

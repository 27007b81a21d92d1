"""Request building: every argument-mapping rule and pre-flight message of upstream's `buildRequest`."""

import base64
from typing import Any
from urllib.parse import unquote

import pytest

from executor_mcp.integrations.credentials import CredentialMissing
from executor_mcp.integrations.openapi.binding import (
    Binding,
    MediaType,
    Parameter,
    RequestBody,
    Server,
    ServerVariable,
)
from executor_mcp.integrations.openapi.request import (
    accepted_arguments,
    build_request,
    check_arguments,
    js_string,
)
from executor_mcp.outbound.model import OutboundFailure, OutboundRequest
from executor_mcp.outbound.useragent import DEFAULT_USER_AGENT
from executor_mcp.records.integration_errors import ArgumentsRefused
from executor_mcp.records.integrations import AuthMethod, Placement

BASE = "https://api.example.com"

GET_ORDER = Binding(
    method="get",
    path_template="/orders/{orderId}",
    parameters=(
        Parameter("orderId", "path", required=True),
        Parameter("include", "query", schema={"type": "array"}),
        Parameter("X-Trace", "header"),
        Parameter("session", "cookie"),
    ),
)


def body_binding(*media: MediaType, required: bool = False, method: str = "post") -> Binding:
    return Binding(method=method, path_template="/things", request_body=RequestBody(required=required, contents=media))


def build(
    binding: Binding,
    args: Any,
    *,
    base_url: str | None = BASE,
    static_headers: dict[str, str] | None = None,
    static_query: dict[str, str] | None = None,
    auth: AuthMethod | None = None,
    credentials: dict[str, str | None] | None = None,
) -> OutboundRequest:
    built = build_request(
        binding,
        args,
        base_url=base_url,
        static_headers=static_headers or {},
        static_query=static_query or {},
        auth_method=auth,
        credentials=credentials or {},
        boundary="BOUNDARY",
    )
    assert isinstance(built, OutboundRequest)
    return built


def header(request: OutboundRequest, name: str) -> str | None:
    return next((value for key, value in request.headers if key.lower() == name.lower()), None)


def refused(binding: Binding, args: Any) -> str:
    with pytest.raises(ArgumentsRefused) as caught:
        check_arguments(binding, args)
    with pytest.raises(ArgumentsRefused):
        build(binding, args)
    return str(caught.value)


# --- unknown arguments ---


def test_unknown_argument_lists_what_the_operation_accepts() -> None:
    assert refused(GET_ORDER, {"orderId": "1", "bogus": 1}) == (
        'Unknown argument "bogus". This operation accepts: orderId, path, pathParams, params, include, query, '
        "queryParams, X-Trace, headers, header, session, cookies, cookie."
    )


def test_the_upstream_e2e_unknown_argument_is_named() -> None:
    binding = Binding(
        method="get", path_template="/items/{itemId}", parameters=(Parameter("itemId", "path", required=True),)
    )
    message = refused(binding, {"itemId": "2", "doesNotExist": "nope"})
    assert message.startswith(
        'Unknown argument "doesNotExist". This operation accepts: itemId, path, pathParams, params.'
    )


def test_several_unknown_arguments_and_an_operation_without_any() -> None:
    assert refused(GET_ORDER, {"orderId": "1", "a": 1, "b": 2}).startswith('Unknown arguments "a", "b". ')
    bare = Binding(method="get", path_template="/ping")
    assert refused(bare, {"x": 1}) == 'Unknown argument "x". This operation accepts no arguments.'


def test_body_server_and_content_type_names_are_accepted_when_they_apply() -> None:
    binding = Binding(
        method="post",
        path_template="/up/{id}",
        servers=(Server("https://a.example.com"), Server("https://b.example.com")),
        request_body=RequestBody(
            required=False, contents=(MediaType("application/json"), MediaType("application/octet-stream"))
        ),
    )
    assert accepted_arguments(binding) == ["id", "body", "input", "bodyBase64", "contentType", "server"]
    templated = Binding(
        method="get", path_template="/", servers=(Server("https://{region}.x.com", (ServerVariable("region", "us"),)),)
    )
    assert accepted_arguments(templated) == ["server"]


def test_arguments_must_be_an_object() -> None:
    assert refused(GET_ORDER, ["orderId"]) == "Tool arguments must be an object."
    check_arguments(Binding(method="get", path_template="/ping"), None)


# --- path ---


def test_path_parameters_are_encoded_like_encode_uri_component() -> None:
    assert build(GET_ORDER, {"orderId": "a b/c"}).url == f"{BASE}/orders/a%20b%2Fc"
    assert build(GET_ORDER, {"orderId": "x!*'()~-_.é"}).url == f"{BASE}/orders/x!*'()~-_.%C3%A9"
    assert build(GET_ORDER, {"orderId": 42}).url == f"{BASE}/orders/42"
    assert build(GET_ORDER, {"orderId": 1.0}).url == f"{BASE}/orders/1"
    assert build(GET_ORDER, {"orderId": True}).url == f"{BASE}/orders/true"


def test_allow_reserved_leaves_reserved_characters() -> None:
    binding = Binding(
        method="get",
        path_template="/files/{+path}",
        parameters=(Parameter("path", "path", required=True, allow_reserved=True),),
    )
    assert build(binding, {"path": "a/b c?d=e%"}).url == f"{BASE}/files/a/b%20c?d=e%25"


def test_path_parameters_come_from_containers_too() -> None:
    for args in ({"path": {"orderId": "x"}}, {"pathParams": {"orderId": "x"}}, {"params": {"orderId": "x"}}):
        assert build(GET_ORDER, args).url == f"{BASE}/orders/x"
    assert build(GET_ORDER, {"orderId": "direct", "path": {"orderId": "nested"}}).url == f"{BASE}/orders/direct"


def test_a_missing_path_parameter_is_refused() -> None:
    assert refused(GET_ORDER, {}) == "Missing required path parameter: orderId"
    assert refused(GET_ORDER, {"orderId": None}) == "Missing required path parameter: orderId"


def test_undeclared_placeholders_fill_from_arguments_or_are_refused() -> None:
    binding = Binding(method="get", path_template="orgs/{org}/repos/{repo}/{repo}")
    assert build(binding, {"org": "o p", "repo": "r"}).url == f"{BASE}/orgs/o%20p/repos/r/r"
    assert refused(binding, {}) == "Unresolved path parameters: org, repo"


# --- query ---


def test_array_query_parameters_repeat_keys_by_default() -> None:
    built = build(GET_ORDER, {"orderId": "1", "include": ["items", "customer"]})
    assert built.url == f"{BASE}/orders/1?include=items&include=customer"


@pytest.mark.parametrize(
    ("style", "joined"), [("form", "a%2Cb"), ("spaceDelimited", "a+b"), ("pipeDelimited", "a%7Cb")]
)
def test_unexploded_arrays_are_joined_by_style(style: str, joined: str) -> None:
    binding = Binding(
        method="get", path_template="/q", parameters=(Parameter("tags", "query", style=style, explode=False),)
    )
    assert build(binding, {"tags": ["a", "b"]}).url == f"{BASE}/q?tags={joined}"


def test_delimited_styles_default_to_unexploded() -> None:
    binding = Binding(method="get", path_template="/q", parameters=(Parameter("tags", "query", style="pipeDelimited"),))
    assert build(binding, {"tags": ["a", "b"]}).url == f"{BASE}/q?tags=a%7Cb"


def test_object_query_parameters() -> None:
    form = Binding(method="get", path_template="/q", parameters=(Parameter("filter", "query"),))
    assert build(form, {"filter": {"region": "west", "tier": None, "n": 2}}).url == f"{BASE}/q?region=west&n=2"
    flat = Binding(method="get", path_template="/q", parameters=(Parameter("filter", "query", explode=False),))
    assert build(flat, {"filter": {"a": "x", "b": "y"}}).url == f"{BASE}/q?filter=a%2Cx%2Cb%2Cy"
    deep = Binding(method="get", path_template="/q", parameters=(Parameter("filter", "query", style="deepObject"),))
    assert build(deep, {"filter": {"a": "x"}}).url == f"{BASE}/q?filter%5Ba%5D=x"
    nested = Binding(method="get", path_template="/q", parameters=(Parameter("ids", "query"),))
    assert unquote(build(nested, {"ids": [{"a": 1}]}).url) == f'{BASE}/q?ids={{"a":1}}'


def test_null_query_values_are_skipped_and_values_are_form_encoded() -> None:
    binding = Binding(method="get", path_template="/q", parameters=(Parameter("a", "query"), Parameter("b", "query")))
    assert build(binding, {"a": None, "b": "x y&z~"}).url == f"{BASE}/q?b=x+y%26z%7E"
    assert build(binding, {"query": {"a": False}, "queryParams": {"b": 3}}).url == f"{BASE}/q?a=false&b=3"


def test_static_and_auth_query_params_come_first_and_are_credentials() -> None:
    binding = Binding(method="get", path_template="/q", parameters=(Parameter("team", "query"),))
    auth = AuthMethod(slug="key", kind="apikey", placements=(Placement("query", "api_key"),))
    built = build(
        binding, {"team": "t"}, static_query={"v": "2", "api_key": "static"}, auth=auth, credentials={"token": "K"}
    )
    assert built.url == f"{BASE}/q?v=2&api_key=K&team=t"
    assert built.credential_query == {"v", "api_key"}


# --- headers and cookies ---


def test_header_and_cookie_parameters() -> None:
    built = build(GET_ORDER, {"orderId": "1", "headers": {"X-Trace": "t2"}, "cookies": {"session": "s1"}})
    assert header(built, "X-Trace") == "t2"
    assert header(built, "Cookie") == "session=s1"
    assert build(GET_ORDER, {"orderId": "1", "X-Trace": 5}).headers.count(("X-Trace", "5")) == 1


def test_cookies_append_to_a_static_cookie() -> None:
    built = build(GET_ORDER, {"orderId": "1", "cookie": {"session": "s"}}, static_headers={"Cookie": "a=b"})
    assert header(built, "cookie") == "a=b; session=s"


def test_header_values_with_line_breaks_are_refused() -> None:
    assert refused(GET_ORDER, {"orderId": "1", "X-Trace": "a\r\nX-Evil: 1"}) == (
        'Header parameter "X-Trace" must not contain line breaks or NUL characters'
    )


def test_header_precedence_auth_beats_static_beats_content_type_beats_agent() -> None:
    binding = Binding(
        method="post",
        path_template="/things",
        parameters=(
            Parameter("Authorization", "header"),
            Parameter("Content-Type", "header"),
            Parameter("User-Agent", "header"),
            Parameter("X-Env", "header"),
        ),
        request_body=RequestBody(required=False, contents=(MediaType("application/json"),)),
    )
    auth = AuthMethod(
        slug="bearer", kind="apikey", placements=(Placement("header", "Authorization", prefix="Bearer "),)
    )
    built = build(
        binding,
        {
            "Authorization": "Bearer agent",
            "Content-Type": "text/plain",
            "User-Agent": "agent/1",
            "X-Env": "agent",
            "body": {},
        },
        static_headers={"x-env": "static"},
        auth=auth,
        credentials={"token": "SECRET"},
    )
    assert header(built, "authorization") == "Bearer SECRET"
    assert header(built, "content-type") == "application/json"
    assert header(built, "user-agent") == "agent/1"  # an operation header beats the default
    assert header(built, "x-env") == "static"
    assert len([name for name, _ in built.headers if name.lower() == "authorization"]) == 1
    assert built.credential_headers == {"x-env", "authorization"}


def test_the_default_user_agent_names_the_product_version() -> None:
    import executor_mcp

    assert f"executor-mcp/{executor_mcp.__version__}" == DEFAULT_USER_AGENT
    assert header(build(GET_ORDER, {"orderId": "1"}), "user-agent") == DEFAULT_USER_AGENT
    assert header(build(GET_ORDER, {"orderId": "1"}), "accept") is None


# --- credentials ---


def test_apikey_placements_render_prefix_and_value_and_literals() -> None:
    auth = AuthMethod(
        slug="dd",
        kind="apikey",
        placements=(
            Placement("header", "DD-API-KEY", variable="api_key"),
            Placement("header", "DD-APPLICATION-KEY", variable="app_key"),
            Placement("header", "X-Client", literal="executor"),
        ),
    )
    built = build(GET_ORDER, {"orderId": "1"}, auth=auth, credentials={"api_key": "A", "app_key": "B"})
    assert (header(built, "DD-API-KEY"), header(built, "DD-APPLICATION-KEY"), header(built, "X-Client")) == (
        "A",
        "B",
        "executor",
    )


@pytest.mark.parametrize("value", [None, ""])
def test_a_required_input_that_resolved_to_nothing_is_credential_missing(value: str | None) -> None:
    auth = AuthMethod(slug="k", kind="apikey", placements=(Placement("header", "X-Api-Key"),))
    outcome = build_request(
        GET_ORDER,
        {"orderId": "1"},
        base_url=BASE,
        static_headers={},
        static_query={},
        auth_method=auth,
        credentials={"token": value},
    )
    assert outcome == CredentialMissing(oauth=False, inputs=("token",))
    oauth = AuthMethod(slug="o", kind="oauth2")
    outcome = build_request(
        GET_ORDER,
        {"orderId": "1"},
        base_url=BASE,
        static_headers={},
        static_query={},
        auth_method=oauth,
        credentials={},
    )
    assert outcome == CredentialMissing(oauth=True, inputs=("token",))


def test_oauth_and_none_methods() -> None:
    built = build(GET_ORDER, {"orderId": "1"}, auth=AuthMethod(slug="o", kind="oauth2"), credentials={"token": "T"})
    assert header(built, "authorization") == "Bearer T"
    assert (
        header(build(GET_ORDER, {"orderId": "1"}, auth=AuthMethod(slug="none", kind="none")), "authorization") is None
    )


# --- request body ---


JSON_BODY = body_binding(MediaType("application/json"), required=True)


def test_json_bodies() -> None:
    built = build(JSON_BODY, {"body": {"items": [{"sku": "a", "quantity": 2}], "note": "é"}})
    assert built.body == '{"items":[{"sku":"a","quantity":2}],"note":"é"}'.encode()
    assert header(built, "content-type") == "application/json"
    assert build(JSON_BODY, {"input": [1, 2]}).body == b"[1,2]"
    vendor = body_binding(MediaType("application/vnd.api+json"))
    raw = build(vendor, {"body": '{"pre":"serialized"}'})
    assert (raw.body, header(raw, "content-type")) == (b'{"pre":"serialized"}', "application/vnd.api+json")
    assert header(build(vendor, {"body": {"a": 1}}), "content-type") == "application/json"


def test_a_missing_required_body_is_refused() -> None:
    assert refused(JSON_BODY, {}) == "Missing required request body"
    assert refused(JSON_BODY, {"body": None}) == "Missing required request body"
    octet = body_binding(MediaType("application/octet-stream"), required=True)
    assert refused(octet, {}) == "Missing required request body: provide `bodyBase64`"
    optional = build(body_binding(MediaType("application/json")), {})
    assert optional.body is None
    assert header(optional, "content-type") is None


def test_form_bodies_follow_oas_encoding() -> None:
    form = body_binding(MediaType("application/x-www-form-urlencoded"))
    built = build(form, {"body": {"a": "x y&z", "tags": ["p", "q"], "skip": None}})
    assert built.body == b"a=x%20y%26z&tags=p&tags=q"
    assert header(built, "content-type") == "application/x-www-form-urlencoded"
    encoded = body_binding(
        MediaType(
            "application/x-www-form-urlencoded",
            encoding={
                "filter": {"style": "deepObject"},
                "ids": {"explode": False},
                "pipes": {"style": "pipeDelimited"},
                "raw": {"allowReserved": True},
                "obj": {"explode": False},
            },
        )
    )
    body = {
        "filter": {"a": "1", "b": None},
        "ids": [1, 2],
        "pipes": ["x", "y"],
        "raw": "a/b?c",
        "obj": {"k": "v"},
        "n": {"x": [1]},
    }
    assert build(encoded, {"body": body}).body == (
        b"filter%5Ba%5D=1&ids=1%2C2&pipes=x%7Cy&raw=a/b?c&obj=k%2Cv&x=%5B1%5D"
    )
    assert build(form, {"body": "pre=encoded"}).body == b"pre=encoded"


def test_multipart_bodies() -> None:
    multipart = body_binding(MediaType("multipart/form-data", encoding={"meta": {"contentType": "application/json"}}))
    file = {
        "_tag": "ToolFile",
        "mimeType": "image/png",
        "encoding": "base64",
        "data": base64.b64encode(b"PNG").decode(),
        "name": "a.png",
    }
    built = build(
        multipart,
        {
            "body": {
                "title": "t",
                "n": 3,
                "tags": ["a", "b"],
                "meta": {"k": 1},
                "obj": {"x": True},
                "file": file,
                "none": None,
            }
        },
    )
    assert header(built, "content-type") == "multipart/form-data; boundary=BOUNDARY"
    assert built.body == (
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="title"\r\n\r\nt\r\n'
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="n"\r\n\r\n3\r\n'
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="tags"\r\n\r\na\r\n'
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="tags"\r\n\r\nb\r\n'
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="meta"; filename="blob"\r\n'
        b'Content-Type: application/json\r\n\r\n{"k":1}\r\n'
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="obj"\r\n\r\n{"x":true}\r\n'
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
        b"Content-Type: image/png\r\n\r\nPNG\r\n"
        b"--BOUNDARY--\r\n"
    )
    broken = {**file, "data": "%%%"}
    assert refused(multipart, {"body": {"file": broken}}) == (
        "Request body field `file` is not a valid file: `data` is not valid base64"
    )


def test_octet_stream_bodies() -> None:
    octet = body_binding(MediaType("application/octet-stream"))
    built = build(octet, {"bodyBase64": base64.b64encode(b"\x00\x01binary").decode().rstrip("=")})
    assert (built.body, header(built, "content-type")) == (b"\x00\x01binary", "application/octet-stream")
    assert build(octet, {"body": {"bodyBase64": " AAE= "}}).body == b"\x00\x01"
    assert build(octet, {"body": "text"}).body == b"text"
    assert build(octet, {"body": [1, 2, 255]}).body == b"\x01\x02\xff"
    assert (
        refused(octet, {"body": {"a": 1}})
        == "application/octet-stream request body must be bytes; provide `bodyBase64`"
    )


def test_body_base64_messages() -> None:
    octet = body_binding(MediaType("application/json"), MediaType("application/octet-stream"))
    assert refused(octet, {"bodyBase64": 5}) == "`bodyBase64` must be a base64 string"
    assert refused(octet, {"bodyBase64": "@@@"}) == "`bodyBase64` is not valid base64"
    assert refused(octet, {"bodyBase64": "AA==", "contentType": "application/json"}) == (
        "`bodyBase64` requires an application/octet-stream contentType"
    )
    assert refused(octet, {"body": {"bodyBase64": None}}) == "`body.bodyBase64` must be a base64 string"
    assert refused(octet, {"body": {"bodyBase64": "@"}}) == "`body.bodyBase64` is not valid base64"
    assert refused(octet, {"body": {"bodyBase64": "AA=="}, "contentType": "application/json"}) == (
        "`body.bodyBase64` requires an application/octet-stream contentType"
    )
    json_only = Binding(
        method="post",
        path_template="/x",
        parameters=(Parameter("bodyBase64", "query"),),
        request_body=RequestBody(required=False, contents=(MediaType("application/json"),)),
    )
    assert (
        refused(json_only, {"bodyBase64": "AA=="}) == "`bodyBase64` requires an application/octet-stream request body"
    )
    assert refused(json_only, {"body": {"bodyBase64": "AA=="}}) == (
        "`body.bodyBase64` requires an application/octet-stream request body"
    )
    # The binary body selects the octet-stream content even though JSON is the default.
    assert header(build(octet, {"bodyBase64": "AA=="}), "content-type") == "application/octet-stream"


def test_content_type_selects_a_declared_media_type_exactly() -> None:
    two = body_binding(MediaType("application/x-www-form-urlencoded"), MediaType("application/json"))
    assert build(two, {"body": {"a": "b"}}).body == b"a=b"
    chosen = build(two, {"body": {"a": "b"}, "contentType": "application/json"})
    assert (chosen.body, header(chosen, "content-type")) == (b'{"a":"b"}', "application/json")
    assert build(two, {"body": {"a": "b"}, "contentType": "text/plain"}).body == b"a=b"  # no exact match: the default


def test_text_xml_and_unknown_bodies() -> None:
    for media in ("text/plain", "application/xml", "application/x-custom"):
        binding = body_binding(MediaType(media))
        assert build(binding, {"body": "<a/>"}).body == b"<a/>"
        built = build(binding, {"body": {"a": 1}})
        assert (built.body, header(built, "content-type")) == (b'{"a":1}', media)


# --- host ---


def test_base_url_wins_and_servers_resolve_otherwise() -> None:
    binding = Binding(
        method="get",
        path_template="/ping",
        servers=(
            Server("https://api.example.com/v1"),
            Server("https://{region}.example.com", (ServerVariable("region", "us", enum=("us", "eu", "ap")),)),
        ),
    )
    assert (
        build(binding, {"server": {"url": "https://{region}.example.com"}}, base_url="http://override/").url
        == "http://override/ping"
    )
    assert build(binding, {}, base_url=None).url == "https://api.example.com/v1/ping"
    assert (
        build(binding, {"server": {"url": "https://{region}.example.com"}}, base_url=None).url
        == "https://us.example.com/ping"
    )
    chosen = {"server": {"url": "https://{region}.example.com", "variables": {"region": "eu"}}}
    assert build(binding, chosen, base_url=None).url == "https://eu.example.com/ping"
    empty = {"server": {"url": "https://{region}.example.com", "variables": {"region": ""}}}
    assert build(binding, empty, base_url=None).url == "https://us.example.com/ping"
    assert (
        build(binding, {"server": {"url": "https://unknown"}}, base_url=None).url == "https://api.example.com/v1/ping"
    )


@pytest.mark.parametrize(
    ("template", "variable", "value"),
    [
        ("https://{tenant}.example.com", "tenant", "evil.com/#"),
        ("https://api.example.com{basePath}", "basePath", ".evil.com"),
        ("https://{host}/v1", "host", "evil.com"),
        ("{scheme}://api.example.com", "scheme", "http"),
        ("https://api.example.com:{port}", "port", "8443"),
    ],
)
def test_a_free_server_variable_cannot_move_the_origin(template: str, variable: str, value: str) -> None:
    default = "https" if variable == "scheme" else "443" if variable == "port" else "v"
    binding = Binding(
        method="get", path_template="/p", servers=(Server(template, (ServerVariable(variable, default),)),)
    )
    arguments = {"server": {"variables": {variable: value}}}
    with pytest.raises(ArgumentsRefused, match="not the scheme, host or port"):
        check_arguments(binding, arguments)


def test_a_free_server_variable_may_change_the_path() -> None:
    binding = Binding(
        method="get",
        path_template="/p",
        servers=(Server("https://api.example.com/{version}", (ServerVariable("version", "v1"),)),),
    )
    url = build(binding, {"server": {"variables": {"version": "v2/../x"}}}, base_url=None).url
    assert url == "https://api.example.com/v2%2F..%2Fx/p"
    enum = Binding(
        method="get",
        path_template="/p",
        servers=(Server("https://{r}.x.com", (ServerVariable("r", "us", enum=("us", "eu")),)),),
    )
    attack = {"server": {"variables": {"r": "attacker.com"}}}
    with pytest.raises(ArgumentsRefused, match=r'^Server variable "r" must be one of: us, eu$'):
        check_arguments(enum, attack)
    with pytest.raises(ArgumentsRefused):
        build(enum, attack, base_url=None)
    assert build(enum, attack).url == f"{BASE}/p"  # a baseUrl ignores the server argument


def test_no_absolute_server_url_is_a_failure_not_a_relative_request() -> None:
    with pytest.raises(OutboundFailure) as caught:
        build(GET_ORDER, {"orderId": "1"}, base_url=None)
    assert caught.value.code == "upstream_unreachable"


def test_js_string_matches_javascript() -> None:
    assert [js_string(v) for v in (1e21, 1.5, -0.0, 1e-7, [1, None, "a"], None)] == [
        "1e+21",
        "1.5",
        "0",
        "1e-7",
        "1,,a",
        "null",
    ]

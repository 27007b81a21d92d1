"""JSON-RPC parsing is strict: no coercion, no partial acceptance."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_mcp.codec import MAX_DEPTH, deeper_than
from executor_mcp.protocol.errors import RpcError
from executor_mcp.protocol.jsonrpc import (
    ErrorResponse,
    InvalidJson,
    InvalidMessage,
    Notification,
    Request,
    Response,
    Unencodable,
    encode_message,
    error_response,
    parse_body,
    serialize,
)
from executor_mcp.protocol.mcp import (
    MAX_CAPABILITIES_DEPTH,
    CallToolParams,
    Implementation,
    InitializeParams,
    initialize_problems,
    negotiate_version,
    structure_params,
)


def _parse(value: object) -> tuple[list, bool]:
    return parse_body(json.dumps(value).encode())


def test_classifies_each_kind_of_message() -> None:
    batch = [
        {"jsonrpc": "2.0", "id": 0, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "x", "result": {}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -1, "message": "no"}},
    ]
    messages, is_batch = _parse(batch)
    assert is_batch
    assert [type(m) for m in messages] == [Request, Notification, Response, ErrorResponse]
    assert messages[0].id == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"jsonrpc": "2.0", "id": True, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 7},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1, 2]},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"},
        {"jsonrpc": 2.0, "id": 1, "method": "ping"},
        {"id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}},
        [],
        "ping",
    ],
)
def test_refuses_what_is_not_a_message(bad: object) -> None:
    with pytest.raises(InvalidMessage):
        _parse(bad)


@pytest.mark.parametrize(
    "raw", [b"", b"{", b"\xff", b"[" * 50_000, b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"a": NaN}}']
)
def test_refuses_what_is_not_json(raw: bytes) -> None:
    with pytest.raises(InvalidJson):
        parse_body(raw)


def test_encoding_omits_absent_fields() -> None:
    assert encode_message(Request(id=1, method="ping")) == {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert encode_message(error_response(None, -32001, "Session not found")) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32001, "message": "Session not found"},
    }
    assert encode_message(error_response(3, -32602, "Invalid params", ["x"]))["error"]["data"] == ["x"]


@given(
    request_id=st.one_of(st.integers(min_value=-(2**53), max_value=2**53), st.text(max_size=20)),
    method=st.text(max_size=30),
    params=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
)
def test_requests_round_trip(request_id: int | str, method: str, params: dict | None) -> None:
    request = Request(id=request_id, method=method, params=params)
    (parsed,), _ = parse_body(json.dumps(encode_message(request)).encode())
    assert parsed == request


def test_params_are_not_coerced() -> None:
    with pytest.raises(RpcError) as caught:
        structure_params({"name": 5, "arguments": {}}, CallToolParams)
    assert caught.value.code == -32602
    assert caught.value.data == ["invalid value for type, expected str @ $.params.name"]
    with pytest.raises(RpcError):
        structure_params({"name": "x", "arguments": [1]}, CallToolParams)


def test_initialize_params_need_client_info() -> None:
    with pytest.raises(RpcError) as caught:
        structure_params({"protocolVersion": "2025-06-18", "capabilities": {}}, InitializeParams)
    assert caught.value.data == ["required field missing @ $.params.clientInfo"]


def test_problems_name_the_fields_as_sent() -> None:
    with pytest.raises(RpcError) as caught:
        structure_params({"protocolVersion": 1, "capabilities": {}, "clientInfo": {"name": "c"}}, InitializeParams)
    assert sorted(caught.value.data) == [
        "invalid value for type, expected str @ $.params.protocolVersion",
        "required field missing @ $.params.clientInfo.version",
    ]


def test_version_negotiation() -> None:
    assert negotiate_version("2025-03-26") == "2025-03-26"
    assert negotiate_version("2024-11-05") == "2025-11-25"


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_deep_but_valid_result_serializes() -> None:
    """Encoding does not walk payloads recursively: what JSON carries, the wire carries."""
    raw = serialize(Response(id=1, result={"value": _nested(350)}))
    assert json.loads(raw)["result"]["value"] == _nested(350)


@pytest.mark.parametrize(
    "result",
    [{"value": float("nan")}, {"value": float("inf")}, {"value": _nested(5000)}, {"value": {1, 2}}, {"value": b"x"}],
    ids=["nan", "infinity", "too-deep", "set", "bytes"],
)
def test_what_is_not_json_is_unencodable(result: dict) -> None:
    with pytest.raises(Unencodable):
        serialize(Response(id=1, result=result))


def test_lone_surrogates_become_replacement_characters() -> None:
    raw = serialize(Request(id="\ud800", method="tools/call", params={"name": "a\udc00b", "ok": "\U0001f600"}))
    assert json.loads(raw) == {
        "jsonrpc": "2.0",
        "id": "\ufffd",
        "method": "tools/call",
        "params": {"name": "a\ufffdb", "ok": "\U0001f600"},
    }


def _initialize(name: str = "c", version: str = "1", capabilities: dict | None = None) -> InitializeParams:
    return InitializeParams("2025-06-18", capabilities or {}, Implementation(name, version))


def test_storable_initialize_params_have_no_problems() -> None:
    assert initialize_problems(_initialize(capabilities={"roots": {"listChanged": True}, "x": [1, "a"]})) == []


def test_unstorable_initialize_params_are_named() -> None:
    assert initialize_problems(_initialize(name="\ud800")) == [
        "Text is not valid Unicode (a lone surrogate) @ $.params.clientInfo.name"
    ]
    assert initialize_problems(_initialize(capabilities={"a": {"\udfff": 1}})) == [
        "Key is not valid Unicode (a lone surrogate) @ $.params.capabilities.a"
    ]
    deep = initialize_problems(_initialize(capabilities={"a": _nested(MAX_CAPABILITIES_DEPTH + 5)}))
    assert len(deep) == 1
    assert deep[0].startswith(f"Nested deeper than {MAX_CAPABILITIES_DEPTH} levels @ $.params.capabilities.a")


def test_nesting_depth_is_measured_without_recursion() -> None:
    nested: object = 1
    for _ in range(MAX_DEPTH):
        nested = [nested]
    assert not deeper_than(nested)
    assert deeper_than({"wrapped": nested})
    for _ in range(100_000):
        nested = [nested]
    assert deeper_than(nested)
    assert not deeper_than([list(range(10_000)), {"a": {"b": []}}, "text"])

"""The sans-I/O parts of MCP sources: naming, schema bounds, SSE and JSON framing, registration, results,
and the session pool's bookkeeping."""

import json
from pathlib import Path
from typing import Any

import pytest

from executor_mcp.auth.principal import LOCAL_PRINCIPAL
from executor_mcp.config import Settings
from executor_mcp.integrations.handoff import Handoff, choose_method, connection_request
from executor_mcp.integrations.mcp import protocol, results
from executor_mcp.integrations.mcp.compile import (
    MAX_SCHEMA_DEPTH,
    PERMISSIVE_INPUT,
    bounded_schema,
    compile_tools,
    real_name,
    tool_name,
    unique_names,
)
from executor_mcp.integrations.mcp.pool import SessionPool, identity_key
from executor_mcp.integrations.mcp.protocol import ProtocolError, SseDecoder
from executor_mcp.integrations.mcp.registration import (
    OAUTH_IN_TEMPLATE,
    STDIO_DISABLED,
    reconfigured,
    registration,
)
from executor_mcp.integrations.mcp.transports import resolve_program
from executor_mcp.outbound.client import Outbound, OutboundSettings
from executor_mcp.outbound.model import BLOCKED, OutboundFailure, OutboundRequest
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import DISCOVERED_PER_CONNECTION, MCP, IntegrationRecord, Placement


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("simple-echo", "simple_echo"),
        ("Simple Echo", "simple_echo"),
        ("__get.User__", "get_user"),
        ("!!!", "tool"),
        ("", "tool"),
        ("CamelCase123", "camelcase123"),
        ("a--b  c", "a_b_c"),
    ],
)
def test_tool_names_follow_upstream(raw: str, name: str) -> None:
    assert tool_name(raw) == name


def test_duplicate_names_get_suffixes_past_taken_ones() -> None:
    assert unique_names(["echo", "Echo", "echo_2", "ECHO"]) == ["echo", "echo_2", "echo_2_2", "echo_3"]


def deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def test_hostile_schemas_are_replaced_by_the_permissive_one() -> None:
    assert bounded_schema(deep(5)) == deep(5)
    assert bounded_schema(deep(MAX_SCHEMA_DEPTH)) is None
    assert bounded_schema({"enum": list(range(100_000))}) is None
    assert bounded_schema(["not", "an", "object"]) is None
    listing = {
        "tools": [{"name": "deep", "inputSchema": deep(MAX_SCHEMA_DEPTH), "outputSchema": deep(MAX_SCHEMA_DEPTH)}]
    }
    (tool,) = compile_tools(json.dumps(listing).encode()).tools
    assert tool.input_schema == PERMISSIVE_INPUT
    assert tool.output_schema["properties"]["structuredContent"] == {"type": "object"}


def test_a_listing_compiles_names_descriptions_schemas_and_gates() -> None:
    listing = {
        "tools": [
            {"name": "Wipe Disk", "annotations": {"destructiveHint": True, "title": "Wipe the disk"}},
            {"name": "look", "description": "Look.", "annotations": {"destructiveHint": True, "readOnlyHint": True}},
            {"name": "shape", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object", "x": 1}},
            {"name": 7},
            "garbage",
        ]
    }
    tools = {tool.name: tool for tool in compile_tools(json.dumps(listing).encode()).tools}
    assert sorted(tools) == ["look", "shape", "wipe_disk"]
    wipe = tools["wipe_disk"]
    assert wipe.requires_approval is True
    assert wipe.approval_description == "Wipe the disk"
    assert wipe.description == "MCP tool: Wipe Disk"
    assert real_name(wipe) == "Wipe Disk"
    assert wipe.binding["mcp"]["annotations"] == {"destructiveHint": True, "title": "Wipe the disk"}
    assert tools["look"].requires_approval is False
    assert tools["shape"].output_schema["properties"]["structuredContent"] == {"type": "object", "x": 1}
    assert compile_tools(DISCOVERED_PER_CONNECTION).tools == ()
    with pytest.raises(InvalidInput):
        compile_tools(b"not json")


def test_sse_events_in_any_chunking() -> None:
    stream = b'event: endpoint\r\ndata: /messages?x=1\r\n\r\n: comment\n\ndata: {"a":\ndata: 1}\n\n'
    for size in (1, 2, 7, len(stream)):
        decoder = SseDecoder(max_event_bytes=1000)
        events = [
            event for start in range(0, len(stream), size) for event in decoder.feed(stream[start : start + size])
        ]
        assert [(event.event, event.data) for event in events] == [
            ("endpoint", "/messages?x=1"),
            ("message", '{"a":\n1}'),
        ]


def test_sse_events_and_lines_are_bounded() -> None:
    with pytest.raises(ProtocolError):
        SseDecoder(max_event_bytes=100).feed(b"data: " + b"x" * 200)
    decoder = SseDecoder(max_event_bytes=100)
    for _ in range(4):
        decoder.feed(b"data: " + b"y" * 20 + b"\n")
    with pytest.raises(ProtocolError):
        decoder.feed(b"data: " + b"y" * 20 + b"\n")


def test_messages_are_classified_and_server_requests_answered() -> None:
    assert protocol.classify({"jsonrpc": "2.0", "id": 1, "result": {"x": 1}}) == protocol.Response(1, {"x": 1})
    error = protocol.classify({"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "bad"}})
    assert isinstance(error, protocol.Response)
    assert error.error is not None
    assert error.error.code == -32602
    assert protocol.classify({"method": protocol.LIST_CHANGED}) == protocol.Notification(protocol.LIST_CHANGED)
    assert protocol.classify("nonsense") is None
    ping = protocol.classify({"jsonrpc": "2.0", "id": "p", "method": "ping"})
    assert isinstance(ping, protocol.ServerRequest)
    assert json.loads(protocol.answer(ping)) == {"jsonrpc": "2.0", "id": "p", "result": {}}
    sampling = protocol.ServerRequest(3, "sampling/createMessage")
    assert json.loads(protocol.answer(sampling))["error"]["code"] == -32601
    with pytest.raises(ProtocolError):
        protocol.parse_messages(b"<html>")
    assert protocol.parse_messages(b'[{"id":1},{"id":2}]') == [{"id": 1}, {"id": 2}]


def test_version_negotiation_accepts_only_known_versions() -> None:
    assert protocol.initialize_params()["protocolVersion"] == "2025-11-25"
    for version in ("2025-03-26", "2025-06-18", "2025-11-25"):
        assert protocol.read_initialize({"protocolVersion": version}).protocol_version == version
    with pytest.raises(ProtocolError):
        protocol.read_initialize({"protocolVersion": "2024-11-05"})


def test_registration_defaults_and_refusals() -> None:
    remote = registration({"name": "My Server!", "endpoint": "https://mcp.example.com/mcp"}, stdio_allowed=False)
    assert remote.slug == "my_server"
    assert remote.config == {
        "transport": "remote",
        "endpoint": "https://mcp.example.com/mcp",
        "remoteTransport": "auto",
    }
    assert [method.slug for method in remote.auth_methods] == ["none"]
    assert remote.source == DISCOVERED_PER_CONNECTION
    assert (
        registration({"name": "!!", "endpoint": "https://mcp.example.com/"}, stdio_allowed=False).slug
        == "mcp_example_com"
    )
    # A slug that starts with a digit is no `tools.<slug>` path in the sandbox.
    assert registration({"name": "1Password", "endpoint": "https://x/"}, stdio_allowed=False).slug == "mcp_1password"
    assert registration({"name": "-", "endpoint": "http://10.0.0.7/"}, stdio_allowed=False).slug == "mcp_10_0_0_7"
    header = registration(
        {
            "name": "h",
            "endpoint": "http://h/",
            "auth": {"kind": "header", "headerName": "Authorization", "prefix": "Bearer "},
        },
        stdio_allowed=False,
    )
    (method,) = header.auth_methods
    assert (method.slug, method.kind, method.inputs) == ("header", "apikey", ("token",))
    assert method.placements == (Placement("header", "Authorization", "Bearer "),)
    stdio = {
        "transport": "stdio",
        "name": "!",
        "command": "/usr/bin/my-server",
        "authenticationTemplate": [{"slug": "env", "kind": "stdio_env", "vars": ["A", "B"]}],
    }
    signs_in = registration({"name": "x", "endpoint": "https://h/mcp", "auth": {"kind": "oauth2"}}, stdio_allowed=False)
    (method,) = signs_in.auth_methods
    assert (method.slug, method.kind) == ("oauth2", "oauth2")
    assert method.oauth == {"discoveryUrl": "https://h/mcp", "supportsDynamicRegistration": True}
    local = registration(stdio, stdio_allowed=True)
    assert local.slug == "my_server"
    assert local.auth_methods[0].inputs == ("A", "B")
    for body, message in (
        (stdio, STDIO_DISABLED),
        (
            {
                "name": "x",
                "endpoint": "http://h/",
                "authenticationTemplate": [{"slug": "o", "kind": "oauth2", "tokenUrl": "https://a/t"}],
            },
            OAUTH_IN_TEMPLATE,
        ),
        ({"name": "x", "endpoint": "http://h/", "auth": {"kind": "oauth2", "scopes": []}}, "Unknown field: scopes"),
        ({"name": "x", "endpoint": "ftp://h/"}, "endpoint must be an http(s) URL of at most 2048 characters"),
        (
            {"name": "x", "endpoint": "http://h/", "remoteTransport": "ws"},
            'remoteTransport must be "auto", "streamable-http" or "sse"',
        ),
        (
            {"name": "x", "endpoint": "http://h/", "headers": {"Bad Name": "v"}},
            "headers.Bad Name is not a valid header",
        ),
        ({"name": "x", "endpoint": "http://h/", "bogus": 1}, "Unknown field: bogus"),
        ({"endpoint": "http://h/"}, "name is required"),
    ):
        with pytest.raises(InvalidInput) as refused:
            registration(body, stdio_allowed=False)
        assert refused.value.message == message


def test_reconfiguring_keeps_auth_unless_named() -> None:
    added = registration(
        {"name": "h", "endpoint": "http://h/", "auth": {"kind": "header", "headerName": "X-Key"}}, stdio_allowed=False
    )
    config, methods = reconfigured(
        added.config, {"endpoint": "http://other/mcp"}, added.auth_methods, stdio_allowed=False
    )
    assert config["endpoint"] == "http://other/mcp"
    assert methods == added.auth_methods
    _, methods = reconfigured(added.config, {"auth": {"kind": "none"}}, added.auth_methods, stdio_allowed=False)
    assert [method.slug for method in methods] == ["none"]


def test_results_map_to_envelopes() -> None:
    ok = {"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}}
    assert results.call_result(ok) == {"ok": True, "data": ok}
    failed = results.call_result(
        {"content": [{"type": "image", "data": ""}, {"type": "text", "text": "no"}], "isError": True}
    )
    assert failed["error"]["code"] == "mcp_tool_error"
    assert failed["error"]["message"] == "no"
    assert results.says_unknown_tool({"content": [{"type": "text", "text": "Unknown tool: gone"}], "isError": True})
    assert results.says_unknown_tool({"content": [{"type": "text", "text": "Tool gone not found"}], "isError": True})
    assert not results.says_unknown_tool({"content": [{"type": "text", "text": "file not found"}], "isError": True})
    assert results.unknown_tool("gone")["error"] == {
        "code": "mcp_tool_unknown",
        "message": 'The MCP server no longer provides tool "gone". Its tool catalog changed; list tools again for the '
        "current set.",
    }
    assert results.call_result("garbage")["error"]["code"] == "mcp_protocol_error"


def test_the_pool_keeps_one_idle_session_per_identity_expiring_and_bounded() -> None:
    now = [0.0]
    pool = SessionPool(lambda: now[0], idle_ttl=10.0, max_idle=2)
    a, b, c, d = (object() for _ in range(4))
    assert pool.give("k1", a) == []  # type: ignore[arg-type]
    assert pool.give("k1", b) == [a]  # type: ignore[arg-type]
    assert pool.take("k1") == (b, [])
    assert pool.take("k1") == (None, [])
    pool.give("k1", a)  # type: ignore[arg-type]
    pool.give("k2", b)  # type: ignore[arg-type]
    assert pool.give("k3", c) == [a]  # type: ignore[arg-type]
    now[0] = 11.0
    assert pool.take("k3") == (None, [b, c])
    pool.give("k4", d)  # type: ignore[arg-type]
    assert pool.drain() == [d]
    one = identity_key(endpoint="e", transport="auto", headers={}, query={}, template="t", credentials={"token": "1"})
    two = identity_key(endpoint="e", transport="auto", headers={}, query={}, template="t", credentials={"token": "2"})
    assert one != two
    assert len(one) == 64  # a digest: the credential is not in it


async def test_streams_go_through_the_guard() -> None:
    async with Outbound(OutboundSettings.of(Settings(allow_local_network=False))) as outbound:
        with pytest.raises(OutboundFailure) as refused:
            async with outbound.stream(OutboundRequest(method="GET", url="http://127.0.0.1:9/sse")):
                pass
    assert refused.value.code == BLOCKED


@pytest.mark.parametrize(
    ("body", "template", "inputs"),
    [
        (
            {"name": "h", "endpoint": "http://h/", "auth": {"kind": "header", "headerName": "X-Key"}},
            "header",
            ("token",),
        ),
        (
            {
                "transport": "stdio",
                "name": "s",
                "command": "srv",
                "authenticationTemplate": [{"slug": "env", "kind": "stdio_env", "vars": ["TOKEN_A", "TOKEN_B"]}],
            },
            "env",
            ("TOKEN_A", "TOKEN_B"),
        ),
    ],
)
def test_header_and_env_templates_are_handed_off_like_api_keys(
    body: dict[str, Any], template: str, inputs: tuple[str, ...]
) -> None:
    added = registration(body, stdio_allowed=True)
    record = IntegrationRecord(
        org_id="o",
        slug=added.slug or "x",
        kind=MCP,
        name=added.name,
        description="",
        source_hash="",
        config=added.config,
        auth_methods=added.auth_methods,
        created_at=0.0,
        updated_at=0.0,
    )
    method = choose_method(record, None)
    assert (method.slug, method.inputs) == (template, inputs)
    values = {name: f"value-{name}" for name in inputs}
    request = connection_request(
        Handoff(
            principal=LOCAL_PRINCIPAL,
            owner="org",
            integration=record.slug,
            template=template,
            label=None,
            expires_at=0.0,
        ),
        {"values": values},
        method,
        "main",
    )
    assert request["values"] == values


def test_a_stdio_command_is_looked_up_in_the_static_path_then_the_servers(tmp_path: Path) -> None:
    static, server = tmp_path / "static", tmp_path / "server"
    for folder in (static, server):
        folder.mkdir()
    for program in (static / "both", server / "both", server / "only-server"):
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    assert resolve_program("both", {"PATH": str(static)}, str(server)) == str(static / "both")
    assert resolve_program("only-server", {}, str(server)) == str(server / "only-server")
    assert resolve_program("missing", {}, str(server)) == "missing"
    assert resolve_program("./relative/tool", {}, str(server)) == "./relative/tool"

"""`OpenApiKind` end to end against a recording upstream: what is sent, what comes back, what is refused."""

import json
from typing import Any

import trio

from executor_mcp.codec import converter
from executor_mcp.config import DEFAULT_MAX_SPEC_BYTES, Settings
from executor_mcp.integrations.compiling import Compiler
from executor_mcp.integrations.kinds import Invocation
from executor_mcp.integrations.openapi.binding import Binding, MediaType, Parameter, RequestBody
from executor_mcp.integrations.openapi.kind import OpenApiKind
from executor_mcp.integrations.openapi.sources import SpecSources
from executor_mcp.outbound.client import Outbound, OutboundSettings
from executor_mcp.records.integrations import AuthMethod, ConnectionRecord, IntegrationRecord, Placement, ToolDef
from tests.recording_upstream import Received, Reply, start_upstream

BEARER = AuthMethod(slug="bearer", kind="apikey", placements=(Placement("header", "Authorization", prefix="Bearer "),))
GET_ITEM = Binding(
    method="get",
    path_template="/items/{itemId}",
    parameters=(Parameter("itemId", "path", required=True), Parameter("Authorization", "header")),
)
CREATE = Binding(
    method="post",
    path_template="/items",
    request_body=RequestBody(required=True, contents=(MediaType("application/x-www-form-urlencoded"),)),
)


def tool(binding: Binding) -> ToolDef:
    return ToolDef(
        name="items.op", description="", input_schema=None, output_schema=None, binding=converter.unstructure(binding)
    )


def integration(origin: str) -> IntegrationRecord:
    return IntegrationRecord(
        org_id="o",
        slug="items",
        kind="openapi",
        name="Items",
        description="",
        source_hash="h",
        config={"baseUrl": origin, "headers": {"X-Static": "s"}, "queryParams": {"v": "2"}},
        auth_methods=(BEARER,),
        created_at=0.0,
        updated_at=0.0,
    )


def connection(template: str = "bearer") -> ConnectionRecord:
    return ConnectionRecord(
        org_id="o",
        owner="org",
        account_id="",
        integration="items",
        name="main",
        template=template,
        provider="encrypted",
        item_ids={"token": "id"},
        created_at=0.0,
        updated_at=0.0,
    )


async def invoke(
    kind: OpenApiKind,
    origin: str,
    binding: Binding,
    args: Any,
    *,
    template: str = "bearer",
    token: str | None = "SECRET",
) -> dict[str, Any]:
    return await kind.invoke(
        Invocation(
            integration=integration(origin),
            connection=connection(template),
            tool=tool(binding),
            args=args,
            credentials={"token": token},
        )
    )


def openapi_kind(outbound: Outbound) -> OpenApiKind:
    sources = SpecSources(outbound, Compiler(), max_source_bytes=DEFAULT_MAX_SPEC_BYTES, max_operations=10_000)
    return OpenApiKind(outbound, sources)


async def echo(received: Received, reply: Reply) -> None:
    body = json.dumps({"path": received.target, "auth": received.header("authorization")}).encode()
    await reply.send(200, [("content-type", "application/json")], body)


async def test_a_call_reaches_the_upstream_with_auth_that_agents_cannot_override(nursery: trio.Nursery) -> None:
    upstream = await start_upstream(nursery, echo)
    async with Outbound(OutboundSettings.of(Settings(allow_local_network=True))) as outbound:
        kind = openapi_kind(outbound)
        result = await invoke(kind, upstream.origin, GET_ITEM, {"itemId": "a b/c", "Authorization": "Bearer agent"})
    [received] = upstream.received
    assert received.target == "/items/a%20b%2Fc?v=2"
    assert received.header("authorization") == "Bearer SECRET"
    assert received.header("x-static") == "s"
    assert result["ok"] is True
    assert result["data"] == {"path": "/items/a%20b%2Fc?v=2", "auth": "Bearer SECRET"}
    assert result["http"]["status"] == 200


async def test_unknown_arguments_are_refused_and_nothing_is_sent(nursery: trio.Nursery) -> None:
    upstream = await start_upstream(nursery, echo)
    async with Outbound(OutboundSettings.of(Settings(allow_local_network=True))) as outbound:
        kind = openapi_kind(outbound)
        result = await invoke(kind, upstream.origin, GET_ITEM, {"itemId": "2", "doesNotExist": "nope"})
        try:
            kind.check_arguments(tool(GET_ITEM), {"itemId": "2", "doesNotExist": "nope"})
        except ValueError as refused:
            checked = str(refused)
    assert result["ok"] is False
    assert result["error"]["code"] == "invalid_tool_arguments"
    assert "doesNotExist" in result["error"]["message"]
    assert checked == result["error"]["message"]
    assert upstream.received == []


async def test_a_missing_credential_sends_nothing(nursery: trio.Nursery) -> None:
    upstream = await start_upstream(nursery, echo)
    async with Outbound(OutboundSettings.of(Settings(allow_local_network=True))) as outbound:
        result = await invoke(openapi_kind(outbound), upstream.origin, GET_ITEM, {"itemId": "1"}, token=None)
    assert result["error"]["code"] == "connection_value_missing"
    assert result["error"]["details"]["category"] == "authentication"
    assert upstream.received == []


async def test_an_unknown_template_goes_out_unauthenticated(nursery: trio.Nursery) -> None:
    upstream = await start_upstream(nursery, echo)
    async with Outbound(OutboundSettings.of(Settings(allow_local_network=True))) as outbound:
        result = await invoke(openapi_kind(outbound), upstream.origin, GET_ITEM, {"itemId": "1"}, template="apiKey")
    assert result["ok"] is True
    assert upstream.received[0].header("authorization") is None


async def test_a_form_body_and_an_upstream_rejection(nursery: trio.Nursery) -> None:
    async def reject(received: Received, reply: Reply) -> None:
        await reply.send(401, [("content-type", "application/json")], b'{"error":{"message":"invalid token"}}')

    upstream = await start_upstream(nursery, reject)
    async with Outbound(OutboundSettings.of(Settings(allow_local_network=True))) as outbound:
        result = await invoke(
            openapi_kind(outbound), upstream.origin, CREATE, {"body": {"a": "x y&z", "tags": ["p", "q"]}}
        )
    assert upstream.received[0].body == b"a=x%20y%26z&tags=p&tags=q"
    assert upstream.received[0].header("content-type") == "application/x-www-form-urlencoded"
    assert result["error"]["code"] == "connection_rejected"
    assert result["error"]["details"]["upstream"]["details"] == {"error": {"message": "invalid token"}}


async def test_transport_failures_are_values_and_the_guard_applies(nursery: trio.Nursery) -> None:
    upstream = await start_upstream(nursery, echo)
    async with Outbound(OutboundSettings.of(Settings())) as outbound:
        result = await invoke(openapi_kind(outbound), upstream.origin, GET_ITEM, {"itemId": "1"})
    assert result == {
        "ok": False,
        "error": {
            "code": "upstream_blocked",
            "message": "Local and private network addresses are not allowed: 127.0.0.1; "
            "the server allows local addresses with --allow-local-network",
        },
    }
    assert upstream.received == []


async def test_bindings_are_structured_once_per_tool(nursery: trio.Nursery) -> None:
    async with Outbound(OutboundSettings.of(Settings(allow_local_network=True))) as outbound:
        kind = openapi_kind(outbound)
        definition = tool(GET_ITEM)
        assert kind.binding(definition) is kind.binding(definition)
        assert kind.binding(definition) == GET_ITEM

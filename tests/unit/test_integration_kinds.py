"""The kinds registry and what each kind refuses of an add or configure request before any I/O."""

from collections.abc import AsyncIterator

import pytest

from executor_mcp.config import Settings
from executor_mcp.integrations.compiling import Compiler
from executor_mcp.integrations.graphql.kind import GraphqlKind
from executor_mcp.integrations.kinds import Kind, Kinds
from executor_mcp.integrations.mcp.kind import McpKind
from executor_mcp.integrations.mcp.registration import STDIO_DISABLED
from executor_mcp.integrations.openapi.kind import OpenApiKind
from executor_mcp.integrations.openapi.sources import SpecSources
from executor_mcp.outbound.client import Outbound, OutboundSettings
from executor_mcp.records.integration_errors import IntegrationNotFound, InvalidInput
from executor_mcp.records.integrations import GRAPHQL, MCP, OPENAPI, IntegrationRecord


@pytest.fixture
async def kinds() -> AsyncIterator[Kinds]:
    async with Outbound(OutboundSettings.of(Settings())) as outbound:
        compiler = Compiler()
        sources = SpecSources(outbound, compiler, max_source_bytes=1_000_000, max_operations=100)
        yield Kinds(
            (
                OpenApiKind(outbound, sources),
                GraphqlKind(outbound, compiler, max_source_bytes=1_000_000),
                McpKind(outbound, max_source_bytes=1_000_000),
            )
        )


def kind(kinds: Kinds, name: str) -> Kind:
    found = kinds.named(name)
    assert found is not None
    return found


def record(kind_name: str, config: dict[str, object]) -> IntegrationRecord:
    return IntegrationRecord(
        org_id="o",
        slug="api",
        kind=kind_name,
        name="API",
        description="",
        source_hash="0" * 64,
        config=dict(config),
        auth_methods=(),
        created_at=0.0,
        updated_at=0.0,
    )


async def test_each_kind_is_registered_once_under_its_name(kinds: Kinds) -> None:
    assert [each.name for each in kinds] == [OPENAPI, GRAPHQL, MCP]
    assert MCP in kinds
    assert "soap" not in kinds
    assert kinds.named("soap") is None
    assert kinds.of(record(GRAPHQL, {})) is kind(kinds, GRAPHQL)
    assert not kinds.serves(record("soap", {}))


async def test_an_add_is_refused_before_any_io_by_its_kind(kinds: Kinds) -> None:
    with pytest.raises(InvalidInput, match="spec is required"):
        kind(kinds, OPENAPI).check_addable({})
    with pytest.raises(InvalidInput, match="endpoint must be an http"):
        kind(kinds, GRAPHQL).check_addable({"endpoint": "ftp://x"})
    with pytest.raises(InvalidInput, match="MCP stdio transport is disabled") as refused:
        kind(kinds, MCP).check_addable({"transport": "stdio", "name": "local", "command": "/bin/true"})
    assert refused.value.message == STDIO_DISABLED
    kind(kinds, OPENAPI).check_addable({"spec": "https://example.com/openapi.json"})
    kind(kinds, GRAPHQL).check_addable({"endpoint": "https://example.com/graphql"})


async def test_a_configure_request_is_read_by_the_integrations_kind(kinds: Kinds) -> None:
    config, _ = kind(kinds, OPENAPI).reconfigure(record(OPENAPI, {"baseUrl": "https://a.example"}), {"baseUrl": None})
    assert config == {}
    config, _ = kind(kinds, GRAPHQL).reconfigure(
        record(GRAPHQL, {"endpoint": "https://a.example/graphql", "headers": {"x": "1"}}), {"headers": None}
    )
    assert config == {"endpoint": "https://a.example/graphql"}
    with pytest.raises(InvalidInput, match="Unknown field: endpoint"):
        kind(kinds, OPENAPI).reconfigure(record(OPENAPI, {}), {"endpoint": "https://a.example"})


async def test_a_slug_of_another_kind_is_refused_in_each_kinds_words(kinds: Kinds) -> None:
    assert isinstance(kind(kinds, OPENAPI).not_found("x"), IntegrationNotFound)
    assert kind(kinds, GRAPHQL).not_found("x").message == "GraphQL integration not found: x"
    assert kind(kinds, MCP).not_found("x").message == "Integration x is not an MCP server"

"""The MCP surface every entry point shares (HTTP `/api/mcp/*`, `executor.mcp.*` core tools, the CLI):
add, show, reconfigure and remove MCP servers, and probe an endpoint before adding it.

Adding never dials (a dead endpoint registers fine); each connection lists the server's tools when it is
made. Probing dials without any connection's credential, through `Outbound`'s guard, bounded in time.
"""

from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.mcp import registration as reg
from executor_mcp.integrations.mcp.kind import McpKind
from executor_mcp.integrations.openapi.auth import describe_methods
from executor_mcp.integrations.service import Integrations
from executor_mcp.records.integration_errors import InvalidInput, NotAdmin
from executor_mcp.records.integrations import MCP, IntegrationRecord
from executor_mcp.storage.records import Owner as Principal


class McpServers:
    def __init__(self, integrations: Integrations) -> None:
        self._integrations = integrations
        kind = integrations.kind_named(MCP)
        assert isinstance(kind, McpKind), "the MCP kind is assembled with the integrations service"
        self._kind = kind

    def check_may_add(self, principal: Principal, body: Any) -> None:
        """Everything of an add but storage, before an approval is asked for it."""
        if not principal.org_id:
            raise InvalidInput("Integrations need an organization: this bearer has none")
        if not principal.org_admin:
            raise NotAdmin("Only an organization admin can add, change or remove org integrations and connections")
        reg.registration(body, stdio_allowed=self._kind.allow_stdio)

    async def add(self, principal: Principal, body: Any) -> tuple[IntegrationRecord, int]:
        record = await self._integrations.add(
            principal, MCP, reg.registration(body, stdio_allowed=self._kind.allow_stdio)
        )
        return record, 0  # tools are listed per connection, when one is made

    async def get(self, principal: Principal, slug: str) -> IntegrationRecord | None:
        record = await self._integrations.integration(principal, slug)
        return record if record.kind == MCP else None

    async def configure(self, principal: Principal, slug: str, body: Any) -> IntegrationRecord:
        record = await self._require(principal, slug)
        config, methods = reg.reconfigured(
            record.config, body, record.auth_methods, stdio_allowed=self._kind.allow_stdio
        )
        return await self._integrations.reconfigure(principal, slug, kind_name=MCP, config=config, auth_methods=methods)

    async def remove(self, principal: Principal, slug: str) -> None:
        await self._require(principal, slug)
        await self._integrations.remove(principal, slug)

    async def probe(self, principal: Principal, body: Any) -> JsonObject:
        if not principal.org_id:
            raise InvalidInput("Integrations need an organization: this bearer has none")
        if not isinstance(body, dict):
            raise InvalidInput("Expected a JSON object")
        reg_known = {"endpoint", "headers", "remoteTransport"}
        unknown = sorted(set(body) - reg_known)
        if unknown:
            raise InvalidInput(f"Unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown[:10])}")
        config, _ = reg.connection_config(
            {key: value for key, value in body.items() if key in reg_known}, stdio_allowed=False
        )
        return await self._kind.probe(config["endpoint"], config.get("headers", {}), config["remoteTransport"])

    async def _require(self, principal: Principal, slug: str) -> IntegrationRecord:
        record = await self.get(principal, slug)
        if record is None:
            raise InvalidInput(f"Integration {slug} is not an MCP server")
        return record


def server_json(record: IntegrationRecord, *, admin: bool) -> JsonObject:
    """An MCP server as the API shows it. Static header and env values are shown to admins only (they may be
    what the operator keeps out of members' sight); members see their names."""
    config = dict(record.config)
    if not admin:
        for field in ("headers", "queryParams", "env"):
            if isinstance(config.get(field), dict):
                config[field] = {name: "***" for name in config[field]}
    return {
        "slug": record.slug,
        "name": record.name,
        "description": record.description,
        "kind": record.kind,
        "canRemove": True,
        "canRefresh": record.can_refresh,
        "config": config,
        "authenticationTemplate": describe_methods(record.auth_methods),
    }

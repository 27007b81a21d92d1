"""The OpenAPI surface every entry point shares beside the generic add and configure (HTTP `/api/openapi/*`,
the `integrations.*` core tools, the CLI): preview a document before adding it, update an integration from a
new document or its URL, and detect whether a URL serves one."""

import logging
import urllib.parse
from typing import Any

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.access import org_of, require_admin
from executor_mcp.integrations.addresses import default_slug
from executor_mcp.integrations.openapi.auth import declares_oauth, discovered_preset
from executor_mcp.integrations.openapi.compile import preview
from executor_mcp.integrations.openapi.kind import OpenApiKind
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.validation import MAX_NAME_LENGTH, check_known, object_of, url
from executor_mcp.outbound.model import OutboundFailure
from executor_mcp.records.integration_errors import InvalidInput, SpecRefused
from executor_mcp.records.integrations import OPENAPI
from executor_mcp.storage.records import Owner as Principal

log = logging.getLogger(__name__)

# `toolNames` a preview answers at most, when asked for some.
MAX_PREVIEW_TOOL_NAMES = 20


class OpenApiSpecs:
    def __init__(self, integrations: Integrations) -> None:
        self._integrations = integrations
        kind = integrations.kind_named(OPENAPI)
        assert isinstance(kind, OpenApiKind), "the OpenAPI kind is assembled with the integrations service"
        self._kind = kind
        self._sources = kind.sources

    async def preview(self, principal: Principal, body: Any, *, tool_names: int = 0) -> JsonObject:
        """Upstream's summary of a spec; with `tool_names`, also `toolNames`: that many of its tools' names
        (at most `MAX_PREVIEW_TOOL_NAMES`), so a person sees what adding it gives before it is added. A spec
        that declares no oauth2 is probed as an add would be: a server found is one more `oauth2Presets` entry."""
        org_of(principal)  # compiling is shared work: only members of an organization ask for it
        values = object_of(body)
        check_known(values, {"spec", "specFormat"})
        source, address = await self._sources.read(values.get("spec"))
        compiled = await self._sources.compile(principal, source)
        summary = preview(compiled.head, operation_count=len(compiled.tool_names))
        if not declares_oauth(compiled.head.auth_methods):
            discovered = await self._kind.discovered_oauth(compiled.head, None, address)
            if discovered is not None:
                summary["oauth2Presets"] = [*summary["oauth2Presets"], discovered_preset(discovered)]
        if tool_names > 0:
            summary["toolNames"] = list(compiled.tool_names[: min(tool_names, MAX_PREVIEW_TOOL_NAMES)])
        return summary

    async def update(self, principal: Principal, slug: str, body: Any) -> JsonObject:
        """Recompile from a new `spec`, or re-fetch the stored URL; connections, policies, auth and the
        description are kept. Answers the added and removed tool names."""
        require_admin(principal)
        values = object_of(body)
        check_known(values, {"spec", "specOverrides"})
        record = await self._integrations.integration(principal, slug, OPENAPI)
        before = await self._integrations.own_catalog(record)
        if values.get("spec") is not None:
            source, address = await self._sources.read(values["spec"])
        elif record.config.get("specUrl"):
            source, address = await self._sources.read({"kind": "url", "url": record.config["specUrl"]})
        else:
            raise InvalidInput(
                "This integration's spec was pasted inline and has no source URL to re-fetch. "
                "Provide the updated spec content."
            )
        compiled = await self._sources.compile(principal, source)
        config = dict(record.config)
        if address is not None:
            config["specUrl"] = address
        updated = attrs.evolve(record, config=config, can_refresh=bool(config.get("specUrl")))
        await self._integrations.replace_source(principal, updated, source, compiled.encoded)
        old = {tool.name for tool in before.tools} if before is not None else set()
        new = set(compiled.tool_names)
        return {
            "slug": slug,
            "toolCount": len(new),
            "addedTools": sorted(new - old),
            "removedTools": sorted(old - new),
        }

    async def detect(self, principal: Principal, address: Any) -> list[JsonObject]:
        """What kind of integration `address` serves: `[{kind: "openapi", confidence: "high", endpoint, name,
        slug}]` when it answers an OpenAPI 3.x document, else `[]`. An unreachable, blocked or failing URL is
        "nothing detected" too (upstream's plugins answer no candidate); only a malformed URL is an error."""
        org_of(principal)
        endpoint = url(address, "url")
        try:
            source = await self._sources.glance(endpoint)
        except OutboundFailure as failure:
            log.info("detect: nothing at the URL (%s)", failure.code)
            return []
        try:
            document = await self._sources.parse(principal, source)
        except SpecRefused:
            return []
        info = document.root.get("info")
        title = info.get("title") if isinstance(info, dict) else None
        name = title.strip()[:MAX_NAME_LENGTH] if isinstance(title, str) and title.strip() else None
        name = name or (urllib.parse.urlsplit(endpoint).hostname or "api")
        return [
            {
                "kind": OPENAPI,
                "confidence": "high",
                "endpoint": endpoint,
                "name": name,
                "slug": default_slug(name, OPENAPI) or "api",
            }
        ]

"""The interface every kind of integration implements, so the catalog, search, policies and envelopes
treat OpenAPI, GraphQL and MCP sources alike.

A kind says whether a call's arguments can make a request at all (before any approval is asked), and
invokes a tool for one connection with that connection's resolved credential values.
"""

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.model import ConnectionRecord, IntegrationRecord, ToolDef


@attrs.frozen
class Invocation:
    integration: IntegrationRecord
    connection: ConnectionRecord
    tool: ToolDef
    args: Any
    # The template's inputs (None when the provider holds no value); secret values, so never in a repr.
    credentials: Mapping[str, str | None] = attrs.field(repr=False)


class Kind(Protocol):
    name: str

    def check_arguments(self, tool: ToolDef, args: Any) -> None:
        """Raise `ArgumentsRefused` when these arguments cannot make a request (nothing is sent)."""

    async def invoke(self, invocation: Invocation) -> JsonObject:
        """The call's result value: `{ok: true, data, ...}` or `{ok: false, error: {code, message, ...}}`."""

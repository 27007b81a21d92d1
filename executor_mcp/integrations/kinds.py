"""The interface every kind of integration implements, so the catalog, search, policies and envelopes
treat OpenAPI, GraphQL and MCP sources alike.

A kind compiles a source into tools (sans-I/O, in a worker thread), says whether a call's arguments can make
a request at all (before any approval is asked), and invokes a tool for one connection with that
connection's resolved credential values. Kinds whose tools depend on the connection (an MCP server lists its
tools to whoever dials it; a GraphQL endpoint is introspected with the connection's credential) also
discover: they fetch the connection's own source, which the service stores and compiles like any other.
"""

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import attrs

from executor_mcp.codec import JsonObject, converter
from executor_mcp.records.integrations import AuthMethod, CompiledCatalog, ConnectionRecord, IntegrationRecord, ToolDef


def _nothing_to_mark() -> None:
    return None


@attrs.frozen
class Invocation:
    integration: IntegrationRecord
    connection: ConnectionRecord
    tool: ToolDef
    args: Any
    # The template's inputs (None when the provider holds no value); secret values, so never in a repr.
    credentials: Mapping[str, str | None] = attrs.field(repr=False)
    # Called when the call learns the connection's tools changed (a list-changed notification, a tool the
    # server no longer has): the service re-discovers them once the call settles.
    mark_stale: Callable[[], None] = attrs.field(default=_nothing_to_mark, eq=False, repr=False)


@attrs.frozen
class Discovery:
    """What discovery needs: the integration, the connection and its credential values."""

    integration: IntegrationRecord
    connection: ConnectionRecord
    credentials: Mapping[str, str | None] = attrs.field(repr=False)


@attrs.frozen
class Registration:
    """A validated request to add an integration of some kind, before anything is stored.

    `source` is the integration-level source (`DISCOVERED_PER_CONNECTION` when every connection discovers
    its own tools); `slug_hint` is what the default slug is made from when the request names none.
    """

    slug: str | None
    slug_hint: str
    name: str
    description: str
    config: JsonObject
    auth_methods: tuple[AuthMethod, ...]
    source: bytes = attrs.field(repr=False)
    can_refresh: bool = False


class Kind(Protocol):
    name: str

    def compile(self, source: bytes) -> tuple[CompiledCatalog, bytes]:
        """The source's tools and their stored form; raises an `IntegrationError` for a source that cannot be
        one. Pure CPU work: the service runs it in a worker thread, one compile at a time."""

    def decode(self, raw: bytes) -> CompiledCatalog:
        """A stored form back into the catalog (raises on a form from another version: it is recompiled)."""

    def discovers(self, integration: IntegrationRecord) -> bool:
        """Whether this integration's tools come from each connection's own discovery."""

    async def discover(self, discovery: Discovery) -> bytes:
        """The connection's source as the upstream answers it now; raises `DiscoveryFailed`. Only called
        when `discovers` is true; the service bounds it in time."""

    def check_arguments(self, tool: ToolDef, args: Any) -> None:
        """Raise `ArgumentsRefused` when these arguments cannot make a request (nothing is sent)."""

    async def invoke(self, invocation: Invocation) -> JsonObject:
        """The call's result value: `{ok: true, data, ...}` or `{ok: false, error: {code, message, ...}}`."""


B = TypeVar("B")
BINDING_CACHE_SIZE = 4096


class Bindings(Generic[B]):
    """A kind's structured bindings of the hottest tools. The binding a compiled tool carries is unstructured
    JSON (the catalog never reads it); it is structured once per `ToolDef`, since a hot tool is called many
    times. Keyed by identity, each entry holding the `ToolDef` itself, so its id cannot be reused while cached."""

    def __init__(self, shape: type[B], size: int = BINDING_CACHE_SIZE) -> None:
        self._shape = shape
        self._size = size
        self._cached: OrderedDict[int, tuple[ToolDef, B]] = OrderedDict()

    def of(self, tool: ToolDef) -> B:
        cached = self._cached.get(id(tool))
        if cached is not None and cached[0] is tool:
            self._cached.move_to_end(id(tool))
            return cached[1]
        structured = converter.structure(tool.binding, self._shape)
        self._cached[id(tool)] = (tool, structured)
        if len(self._cached) > self._size:
            self._cached.popitem(last=False)
        return structured

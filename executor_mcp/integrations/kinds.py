"""The interface every kind of integration implements, so the service, the catalog, search, policies and
envelopes treat OpenAPI, GraphQL and MCP sources alike, and the one registry of the kinds a server serves.

A spec or an endpoint goes in: a kind validates an add request into a `Registration` (fetching and compiling
its source where it must read it to name the integration) and a configure request into a new config. Tools
and a request function come out: a kind compiles a source into tools (sans-I/O, in a worker thread), says
whether a call's arguments can make a request at all (before any approval is asked), and invokes a tool for
one connection with that connection's resolved credential values. Kinds whose tools depend on the connection
(an MCP server lists its tools to whoever dials it; a GraphQL endpoint is introspected with the connection's
credential) also discover: they fetch the connection's own source, which the service stores and compiles like
any other.
"""

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

import attrs

from executor_mcp.codec import JsonObject, converter
from executor_mcp.records.integration_errors import IntegrationError
from executor_mcp.records.integrations import AuthMethod, CompiledCatalog, ConnectionRecord, IntegrationRecord, ToolDef
from executor_mcp.storage.records import Owner as Principal


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
class Precompiled:
    """A source a kind compiled while validating its add request: its stored form and its tools' names (the
    catalog itself is decoded only when it is used)."""

    encoded: bytes = attrs.field(repr=False)
    tool_names: tuple[str, ...]


@attrs.frozen
class Registration:
    """A validated request to add an integration of some kind, before anything is stored.

    `source` is the integration-level source (`DISCOVERED_PER_CONNECTION` when every connection discovers
    its own tools); `slug_hint` is what the default slug is made from when the request names none;
    `compiled` is set when the kind compiled `source` already, else the service compiles it.
    """

    slug: str | None
    slug_hint: str
    name: str
    description: str
    config: JsonObject
    auth_methods: tuple[AuthMethod, ...]
    source: bytes = attrs.field(repr=False)
    can_refresh: bool = False
    compiled: Precompiled | None = None


class Kind(Protocol):
    name: str

    def check_addable(self, body: Any) -> None:
        """Everything of an add request that needs no I/O, before an approval is asked for it (the service
        checked the caller administers the org)."""

    async def register(self, body: Any, caller: Principal) -> Registration:
        """An add request validated into a registration; `InvalidInput` (or the source's own refusal) with the
        first problem found. Nothing is stored."""

    def reconfigure(self, record: IntegrationRecord, body: Any) -> tuple[JsonObject, tuple[AuthMethod, ...]]:
        """A configure request applied to `record`: its new config and auth methods."""

    def not_found(self, slug: str) -> IntegrationError:
        """What a request for this kind answers when `slug` is an integration of another kind."""

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

    def read_only(self, tool: ToolDef) -> bool:
        """Whether calling the tool has no side effect, as its source declares it: what a toolkit's `read` level
        shows. When in doubt, False."""

    async def invoke(self, invocation: Invocation) -> JsonObject:
        """The call's result value: `{ok: true, data, ...}` or `{ok: false, error: {code, message, ...}}`."""


class Kinds:
    """The kinds of integration a server serves, by name: the one place they are registered (`assembly.py`
    builds it)."""

    def __init__(self, kinds: Iterable[Kind]) -> None:
        self._by_name = {kind.name: kind for kind in kinds}

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Kind]:
        return iter(self._by_name.values())

    def named(self, name: str) -> Kind | None:
        return self._by_name.get(name)

    def of(self, integration: IntegrationRecord) -> Kind:
        """The kind of a stored integration (one whose kind this server serves: see `serves`)."""
        return self._by_name[integration.kind]

    def serves(self, integration: IntegrationRecord) -> bool:
        return integration.kind in self._by_name


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

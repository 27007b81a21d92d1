"""Integrations, connections and compiled tools as plain records (no I/O).

Stored records go through the shared strict converter (`storage.records.encode/decode`). A compiled
catalog is what one source compiles into, once per content hash; every connection holding that source shares
it. The source is the integration's (an OpenAPI document, a GraphQL schema snapshot) or, for kinds whose
tools depend on who asks (an MCP server, a GraphQL endpoint introspected with the connection's credential),
the connection's own: what discovery answered for it.
"""

import attrs

from executor_mcp.codec import JsonObject, converter, dumps, loads

# Kinds of integration. `executor` is the built-in one, whose tools the server provides itself.
OPENAPI = "openapi"
MCP = "mcp"
GRAPHQL = "graphql"
BUILT_IN = "built-in"
# The built-in integration, whose tools the server provides: its slug is reserved.
BUILT_IN_SLUG = "executor"
BUILT_IN_NAME = "Executor"
BUILT_IN_DESCRIPTION = "The executor's own tools: its integrations and, with policies, its governance."

NO_AUTH = "none"  # the template of a connection that sends no credential
TOKEN = "token"  # the input a placement renders when it names none


@attrs.frozen
class Placement:
    """Where an API-key style credential goes: a header or a query parameter, `prefix + value`.

    A placement renders either one of the connection's inputs (`variable`, `token` when unnamed) or a
    fixed `literal`. Two placements naming one variable share that input.
    """

    carrier: str  # "header" | "query"
    name: str
    prefix: str = ""
    variable: str | None = None
    literal: str | None = None

    @property
    def input(self) -> str | None:
        """The connection input this placement renders, or None for a literal."""
        return None if self.literal is not None else (self.variable or TOKEN)


@attrs.frozen
class AuthMethod:
    """One way an integration accepts credentials; a connection names it by `slug` (its template)."""

    slug: str
    kind: str  # "apikey" | "oauth2" | "none"
    label: str | None = None
    placements: tuple[Placement, ...] = ()
    oauth: JsonObject | None = None  # an oauth2 method's endpoints and scopes: kept, not yet usable

    @property
    def inputs(self) -> tuple[str, ...]:
        """The distinct inputs a connection on this method supplies, in placement order."""
        seen: dict[str, None] = {}
        for placement in self.placements:
            if placement.input is not None:
                seen.setdefault(placement.input, None)
        return tuple(seen)

    def input_places(self, variable: str) -> str:
        """Where an input goes, for the person pasting it: `header x-api-key`, `query api_key`."""
        places = [f"{place.carrier} {place.name}" for place in self.placements if place.input == variable]
        return ", ".join(places)


@attrs.frozen
class ToolDef:
    """One tool of a compiled catalog, the same for every connection that reaches it.

    `binding` is the kind's own invocation data (for OpenAPI, an unstructured `openapi.binding.Binding`);
    nothing above the kind reads it.
    """

    name: str
    description: str
    input_schema: JsonObject | None
    output_schema: JsonObject | None
    binding: JsonObject
    requires_approval: bool = False
    approval_description: str | None = None


@attrs.frozen
class CompiledCatalog:
    """The tools of one source, sorted by name, with the shared schema definitions they reference as
    `#/$defs/<name>`."""

    tools: tuple[ToolDef, ...]
    defs: JsonObject = attrs.Factory(dict)


def config_strings(value: object) -> dict[str, str]:
    """A config map of static values (headers, query parameters, an environment); anything that is not a string
    pair is not sendable and is left out."""
    if not isinstance(value, dict):
        return {}
    return {name: text for name, text in value.items() if isinstance(name, str) and isinstance(text, str)}


def encode_catalog(catalog: CompiledCatalog) -> bytes:
    """The stored form of a catalog no kind adds anything to (OpenAPI stores its whole compiled spec)."""
    return dumps(converter.unstructure(catalog))


def decode_catalog(raw: bytes) -> CompiledCatalog:
    return converter.structure(loads(raw), CompiledCatalog)


# Far above any real server's tool list; discovery answering more is refused rather than stored (the kinds stop
# reading there, the service checks what compiled).
MAX_DISCOVERED_TOOLS = 10_000

# The integration-level source of a kind whose every connection discovers its own tools: no tools until then.
DISCOVERED_PER_CONNECTION = b"{}"


@attrs.frozen
class IntegrationRecord:
    """An integration of one organization, keyed by (org, slug).

    `source_hash` names the stored source text and its compiled catalog. `config` is the kind's own
    (for OpenAPI: `specUrl`, `baseUrl`, static non-secret `headers` and `queryParams`).
    """

    org_id: str
    slug: str
    kind: str
    name: str
    description: str
    source_hash: str
    config: JsonObject
    auth_methods: tuple[AuthMethod, ...]
    created_at: float
    updated_at: float
    can_refresh: bool = False

    def auth_method(self, template: str) -> AuthMethod | None:
        """A connection's method, by its template's slug. A new connection must name one of `templates`; an
        older one whose method a `configure` replaced since is no method, so its call goes out without a
        credential (upstream's lax matching) and the upstream's refusal says to re-authenticate."""
        return next((method for method in self.auth_methods if method.slug == template), None)

    @property
    def templates(self) -> tuple[str, ...]:
        """What a new connection's template may be: a declared method's slug, or `none`."""
        return tuple(dict.fromkeys([*(method.slug for method in self.auth_methods), NO_AUTH]))


@attrs.frozen
class ConnectionRecord:
    """A credential bound to one integration, owned by the org (`account_id` "") or by one account.

    Values are never here: `item_ids` maps each input of the template to an item of `provider`.
    """

    org_id: str
    owner: str  # "org" | "user"
    account_id: str
    integration: str
    name: str
    template: str
    provider: str | None
    item_ids: dict[str, str]
    created_at: float
    updated_at: float
    identity_label: str | None = None
    description: str | None = None
    # Set for kinds that discover tools per connection: the hash of what discovery last answered, when it
    # last ran (success or not), and why it last failed (None once it succeeds; never a secret).
    source_hash: str | None = None
    tools_synced_at: float | None = None
    sync_error: str | None = None
    # Set for an OAuth connection: the client its tokens were issued to (whose owner may differ from the
    # connection's: an org's client serves its members' own connections), when the access token expires
    # (epoch seconds; None: never said), what was granted, what was asked and not granted, and when it was
    # last refreshed. Its `item_ids` hold `token` and, when one was issued, `refresh`.
    oauth_client: str | None = None
    oauth_client_owner: str | None = None
    oauth_token_url: str | None = None  # where its tokens came from: a refresh goes nowhere else
    expires_at: float | None = None
    oauth_scope: str | None = None
    missing_scopes: tuple[str, ...] = ()
    refreshed_at: float | None = None

    @property
    def address(self) -> str:
        return f"tools.{self.integration}.{self.owner}.{self.name}"

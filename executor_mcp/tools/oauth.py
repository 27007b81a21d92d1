"""The executor's OAuth tools: `tools.executor.coreTools.oauth.clients.list|create|createHandoff|registerDynamic|
remove`, `oauth.probe`, `oauth.start` and `oauth.cancel` (upstream `upstream-oauth-toolkits.md` §A.2), over the same
`OAuthClients` and `OAuthSignIns` as `/api/oauth/*`.

What registers or removes a client, or starts a sign-in, is approval-gated, and checks what it can before the
approval is asked (the same checks, and the same words, as the service's), so a doomed call costs no human.
No tool takes or answers a secret: `oauth.clients.create` registers a public client (its secret is always
empty), a client's listing never holds one, and `oauth.start` answers the URL where the user signs in, never
a token; the sign-in completes through the callback (or `POST /api/oauth/complete`), not through the agent.

`oauth.clients.createHandoff` answers a console link where a person registers a confidential client, its
secret typed there: ungated, since the link grants nothing (the person's own console session registers it).
"""

from typing import Any

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.access import require_admin
from executor_mcp.integrations.addresses import valid_slug
from executor_mcp.integrations.oauth_clients import DYNAMIC_FIELDS, OWNERS, OAuthClients
from executor_mcp.integrations.oauth_signins import START_FIELDS, OAuthSignIns
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.validation import check_known, object_of, optional_text, text
from executor_mcp.integrations.wire import connection_json, probe_json
from executor_mcp.oauth.metadata import endpoint_problem
from executor_mcp.records.integration_errors import InvalidInput, OAuthStartFailed
from executor_mcp.records.integrations import ConnectionRecord
from executor_mcp.records.oauth import AUTHORIZATION_CODE, CLIENT_CREDENTIALS, GRANTS
from executor_mcp.tools.catalog import StaticTool, core_tool
from executor_mcp.tools.connected import CONNECTION
from executor_mcp.tools.context import CallContext

# Upstream's inputs, field for field (§A.1 `CreateClient` less its secret, `RegisterDynamic`, `Start`).
CREATE_FIELDS = frozenset(
    {"owner", "slug", "authorizationUrl", "tokenUrl", "grant", "clientId", "resource", "originIntegration"}
)
MAX_SCOPES = 100
NO_SECRET = (
    "oauth.clients.create registers a public client and takes no clientSecret: a secret never passes through "
    "the agent. Register a confidential client in the Executor API (POST /api/oauth/clients) instead."
)

_OWNER = {"type": "string", "enum": list(OWNERS)}
_NULLABLE_TEXT = {"type": ["string", "null"]}
_CLIENT = {
    "type": "object",
    "properties": {
        "owner": _OWNER,
        "slug": {"type": "string"},
        "grant": {"type": "string", "enum": list(GRANTS)},
        "authorizationUrl": {"type": "string"},
        "tokenUrl": {"type": "string"},
        "resource": _NULLABLE_TEXT,
        "clientId": {"type": "string"},
        "origin": {
            "type": "object",
            "properties": {
                "kind": {
                    "type": "string",
                    "enum": ["manual", "dynamic_client_registration", "client_id_metadata_document"],
                },
                "integration": _NULLABLE_TEXT,
            },
            "required": ["kind"],
        },
    },
    "required": ["owner", "slug", "grant", "authorizationUrl", "tokenUrl", "resource", "clientId"],
}
_CLIENT_SLUG = {"type": "object", "properties": {"client": {"type": "string"}}, "required": ["client"]}
# A connection as `start` answers it (upstream's ConnectionOutput): the sandbox's connection, with its OAuth facts.
_CONNECTION = {
    **CONNECTION,
    "properties": {
        **CONNECTION["properties"],
        "expiresAt": {"type": ["number", "null"]},
        "oauthClient": _NULLABLE_TEXT,
        "oauthClientOwner": {"type": ["string", "null"], "enum": ["org", "user", None]},
        "oauthScope": _NULLABLE_TEXT,
    },
    "required": [*CONNECTION["required"], "provider", "expiresAt", "oauthClient", "oauthClientOwner", "oauthScope"],
}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_PROBE = {
    "type": "object",
    "properties": {
        "issuer": _NULLABLE_TEXT,
        "authorizationUrl": _NULLABLE_TEXT,
        "tokenUrl": {"type": "string"},
        "resource": _NULLABLE_TEXT,
        "scopesSupported": _STRINGS,
        "registrationEndpoint": _NULLABLE_TEXT,
        "tokenEndpointAuthMethodsSupported": _STRINGS,
        "clientIdMetadataDocumentSupported": {"type": "boolean"},
    },
    "required": ["authorizationUrl", "tokenUrl"],
}


# -- the checks asked before an approval (the service asks them again, with the same words) ----------------


def _owner(values: JsonObject, context: CallContext, field: str = "owner") -> str:
    owner = values.get(field, "user")
    if owner not in OWNERS:
        raise InvalidInput(f'{field} must be "org" or "user"')
    if owner == "org":
        require_admin(context.principal)
    return str(owner)


def _slug(values: JsonObject, field: str = "slug") -> str:
    slug = values.get(field)
    if not valid_slug(slug):
        raise InvalidInput(f"{field} must be 1-64 letters, digits, '-' or '_'")
    return str(slug)


def _endpoint(values: JsonObject, field: str, *, required: bool = True) -> None:
    value = values.get(field)
    if value is None and not required:
        return
    problem = endpoint_problem(text(value, field))
    if problem is not None:
        raise InvalidInput(f"{field} {problem}")


def check_create(args: Any, context: CallContext) -> None:
    values = object_of(args)
    if "clientSecret" in values:
        raise InvalidInput(NO_SECRET)
    check_known(values, CREATE_FIELDS)
    _owner(values, context)
    _slug(values)
    grant = values.get("grant", AUTHORIZATION_CODE)
    if grant not in GRANTS:
        raise InvalidInput(f"grant must be one of: {', '.join(GRANTS)}")
    if grant == CLIENT_CREDENTIALS:
        raise InvalidInput(f"A client_credentials client needs a secret. {NO_SECRET}")
    _endpoint(values, "tokenUrl")
    _endpoint(values, "authorizationUrl")
    if values["authorizationUrl"] == values["tokenUrl"] or "/.well-known/" in values["authorizationUrl"]:
        raise InvalidInput("authorizationUrl must be the authorization endpoint, not the token endpoint or metadata")
    text(values.get("clientId"), "clientId")
    _endpoint(values, "resource", required=False)
    optional_text(values, "originIntegration", 64)


def check_register_dynamic(args: Any, context: CallContext) -> None:
    values = object_of(args)
    check_known(values, DYNAMIC_FIELDS)
    _owner(values, context)
    by_document = values.get("clientIdMetadataDocumentSupported") is True
    _endpoint(values, "registrationEndpoint", required=not by_document)
    for field in ("authorizationUrl", "tokenUrl"):
        _endpoint(values, field)
    for field in ("resource", "issuer", "redirectUri"):
        _endpoint(values, field, required=False)
    scopes = values.get("scopes", [])
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes) or len(scopes) > MAX_SCOPES:
        raise InvalidInput(f"scopes must be a list of at most {MAX_SCOPES} strings")


def check_remove(args: Any, context: CallContext) -> None:
    values = object_of(args)
    check_known(values, {"owner", "slug"})
    if values.get("owner") not in OWNERS:
        raise InvalidInput('owner must be "org" or "user"')
    _owner(values, context)
    text(values.get("slug"), "slug")


def check_start(args: Any, context: CallContext) -> None:
    values = object_of(args)
    check_known(values, START_FIELDS)
    owner = values.get("owner", "user")
    client_owner = values.get("clientOwner", owner)
    if owner not in OWNERS or client_owner not in OWNERS:
        raise InvalidInput('owner and clientOwner must be "org" or "user"')
    if owner == "org":
        require_admin(context.principal)
    if owner == "org" and client_owner == "user":
        raise OAuthStartFailed("An org connection must use an org OAuth client.")
    for field in ("client", "integration", "template"):
        text(values.get(field), field)
    name = text(values.get("name"), "name")
    if len(name) > 64 or not all(char.isalnum() or char in "-_" for char in name):
        raise InvalidInput("name must be 1-64 letters, digits, '-' or '_'")
    redirect = optional_text(values, "redirectUri", 2048)
    if redirect and endpoint_problem(redirect) is not None:
        raise OAuthStartFailed("The redirect URI must be https (or http on a loopback host): set --public-url")


# -- the tools ------------------------------------------------------------------------------------------


@attrs.frozen
class OAuthTools:
    """The handlers, each a method, and `tools()` the static tools that hold them."""

    clients: OAuthClients
    signins: OAuthSignIns

    async def list_clients(self, args: Any, context: CallContext) -> JsonObject:
        object_of(args)
        return {"clients": await self.clients.summaries(context.principal)}

    async def create_client(self, args: Any, context: CallContext) -> JsonObject:
        record = await self.clients.create(context.principal, {**object_of(args), "clientSecret": ""})
        return {"client": record.slug}

    async def register_dynamic(self, args: Any, context: CallContext) -> JsonObject:
        record = await self.clients.register_dynamic(
            context.principal, args, self.signins.callback_url(), self.signins.metadata_document_url()
        )
        return {"client": record.slug}

    async def create_handoff(self, args: Any, context: CallContext) -> JsonObject:
        return await self.signins.client_handoff(context.principal, args)

    async def remove_client(self, args: Any, context: CallContext) -> JsonObject:
        values = object_of(args)
        await self.clients.remove(context.principal, str(values["owner"]), str(values["slug"]))
        return {"removed": True}

    async def probe(self, args: Any, context: CallContext) -> JsonObject:
        values = object_of(args)
        check_known(values, {"url"})
        return probe_json(*await self.clients.probe(text(values.get("url"), "url")))

    async def start(self, args: Any, context: CallContext) -> JsonObject:
        started = await self.signins.start(context.principal, args)
        connection = started.get("connection")
        if isinstance(connection, ConnectionRecord):
            return {"status": "connected", "connection": connection_json(connection, full=False)}
        return started

    async def cancel(self, args: Any, context: CallContext) -> JsonObject:
        values = object_of(args)
        check_known(values, {"state"})
        await self.signins.cancel(context.principal, text(values.get("state"), "state"))
        return {"cancelled": True}

    def tools(self) -> tuple[StaticTool, ...]:
        return (
            core_tool(
                "oauth",
                "clients.list",
                "List the OAuth clients you can sign in with: the organization's and your own. Never a secret.",
                {},
                [],
                {
                    "type": "object",
                    "properties": {"clients": {"type": "array", "items": _CLIENT}},
                    "required": ["clients"],
                },
                self.list_clients,
                read_only=True,
            ),
            core_tool(
                "oauth",
                "clients.create",
                "Register a public OAuth client (PKCE, no secret) by hand: its authorization and token endpoints "
                "and client id. It never takes a secret. owner org needs an organization admin.",
                {
                    "owner": _OWNER,
                    "slug": {"type": "string"},
                    "authorizationUrl": {"type": "string"},
                    "tokenUrl": {"type": "string"},
                    "grant": {"type": "string", "enum": [AUTHORIZATION_CODE]},
                    "clientId": {"type": "string"},
                    "resource": _NULLABLE_TEXT,
                    "originIntegration": _NULLABLE_TEXT,
                },
                ["owner", "slug", "authorizationUrl", "tokenUrl", "grant", "clientId"],
                _CLIENT_SLUG,
                self.create_client,
                check_create,
                gated=True,
            ),
            core_tool(
                "oauth",
                "clients.registerDynamic",
                "Register this executor as an OAuth client with an authorization server that allows it (the "
                "endpoints come from oauth.probe): by this executor's client ID metadata document where the server "
                "takes one (clientIdMetadataDocumentSupported) and this executor is served over https, else by "
                "dynamic registration (RFC 7591). A client already registered for the same server, resource and "
                "redirect URI is reused. The redirect URI defaults to this executor's OAuth callback.",
                {
                    "owner": _OWNER,
                    "slug": {"type": "string"},
                    "issuer": _NULLABLE_TEXT,
                    "registrationEndpoint": _NULLABLE_TEXT,
                    "authorizationUrl": {"type": "string"},
                    "tokenUrl": {"type": "string"},
                    "resource": _NULLABLE_TEXT,
                    "scopes": _STRINGS,
                    "tokenEndpointAuthMethodsSupported": _STRINGS,
                    "clientName": {"type": "string"},
                    "redirectUri": _NULLABLE_TEXT,
                    "originIntegration": _NULLABLE_TEXT,
                    "clientIdMetadataDocumentSupported": {"type": "boolean"},
                },
                ["owner", "authorizationUrl", "tokenUrl", "scopes"],
                _CLIENT_SLUG,
                self.register_dynamic,
                check_register_dynamic,
                gated=True,
            ),
            core_tool(
                "oauth",
                "clients.createHandoff",
                "A console link where a person registers a confidential OAuth client for an integration (its "
                "client id and secret from the provider, typed there: a secret never passes through the agent). "
                "The given fields, else the integration's OAuth endpoints, come prefilled. Give the url and the "
                "instructions to the user; then call oauth.start with the client's slug.",
                {
                    "integration": {"type": "string"},
                    "owner": _OWNER,
                    "slug": {"type": "string"},
                    "grant": {"type": "string", "enum": list(GRANTS)},
                    "clientId": {"type": "string"},
                    "authorizationUrl": {"type": "string"},
                    "tokenUrl": {"type": "string"},
                    "resource": {"type": "string"},
                    "label": {"type": "string"},
                },
                ["integration"],
                {
                    "type": "object",
                    "properties": {"url": {"type": "string"}, "instructions": {"type": "string"}},
                    "required": ["url", "instructions"],
                },
                self.create_handoff,
            ),
            core_tool(
                "oauth",
                "clients.remove",
                "Remove an OAuth client. Connections made with it keep working until their token must be refreshed.",
                {"owner": _OWNER, "slug": {"type": "string"}},
                ["owner", "slug"],
                {"type": "object", "properties": {"removed": {"type": "boolean"}}, "required": ["removed"]},
                self.remove_client,
                check_remove,
                gated=True,
            ),
            core_tool(
                "oauth",
                "probe",
                "Find where an API (or an authorization server's issuer URL) signs in: its authorization and token "
                "endpoints, scopes, and whether it registers clients dynamically (RFC 9728, RFC 8414, OIDC).",
                {"url": {"type": "string", "maxLength": 2048}},
                ["url"],
                _PROBE,
                self.probe,
                read_only=True,
            ),
            core_tool(
                "oauth",
                "start",
                "Start an OAuth sign-in that creates the connection `name` to an integration with an OAuth template. "
                "A redirect answer holds the authorizationUrl: give it to the user to open (never ask for a token); "
                "the connection is made when they finish, then find it with connections.list. A client-credentials "
                'client answers status "connected" at once.',
                {
                    "client": {"type": "string"},
                    "clientOwner": _OWNER,
                    "owner": _OWNER,
                    "name": {"type": "string"},
                    "integration": {"type": "string"},
                    "template": {"type": "string"},
                    "identityLabel": _NULLABLE_TEXT,
                    "redirectUri": _NULLABLE_TEXT,
                },
                ["client", "clientOwner", "owner", "name", "integration", "template"],
                {
                    "anyOf": [
                        {
                            "type": "object",
                            "properties": {
                                "status": {"type": "string", "enum": ["connected"]},
                                "connection": _CONNECTION,
                            },
                            "required": ["status", "connection"],
                        },
                        {
                            "type": "object",
                            "properties": {
                                "status": {"type": "string", "enum": ["redirect"]},
                                "authorizationUrl": {"type": "string"},
                                "state": {"type": "string"},
                            },
                            "required": ["status", "authorizationUrl", "state"],
                        },
                    ]
                },
                self.start,
                check_start,
                gated=True,
            ),
            core_tool(
                "oauth",
                "cancel",
                "Cancel an OAuth sign-in you started, by the state oauth.start answered.",
                {"state": {"type": "string"}},
                ["state"],
                {"type": "object", "properties": {"cancelled": {"type": "boolean"}}, "required": ["cancelled"]},
                self.cancel,
            ),
        )


def oauth_tools(integrations: Integrations) -> tuple[StaticTool, ...]:
    """The OAuth core tools, where the server serves OAuth (none where it cannot hold an OAuth connection)."""
    if integrations.oauth_clients is None or integrations.oauth is None:
        return ()
    return OAuthTools(integrations.oauth_clients, integrations.oauth).tools()

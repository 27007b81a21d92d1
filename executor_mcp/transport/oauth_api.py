"""`/api/oauth/*`: OAuth clients, sign-ins and discovery over plain JSON HTTP (upstream's routes and shapes,
`upstream-oauth-toolkits.md` §A.1), answered through the integrations API's dispatch (its authentication, body
limits and `_tag` errors).

    GET    /api/oauth/clients                      the caller's clients (the org's and its own), never a secret
    POST   /api/oauth/clients                      {owner, slug, authorizationUrl, tokenUrl, grant, clientId,
                                                    clientSecret?, resource?}            -> {client}
    POST   /api/oauth/clients/register-dynamic     {owner, registrationEndpoint, authorizationUrl, tokenUrl,
                                                    issuer?, resource?, scopes, ...}     -> {client}
    DELETE /api/oauth/clients/<slug>               {owner}                              -> {removed: true}
    POST   /api/oauth/start                        {client, clientOwner, owner, name, integration, template}
                                                    -> {status: "redirect", authorizationUrl, state}
                                                     | {status: "connected", connection}
    POST   /api/oauth/complete                     {state, code, iss?}                  -> the connection
    POST   /api/oauth/cancel                       {state}                              -> {cancelled: true}
    POST   /api/oauth/probe                        {url}                                -> where it signs in
    GET    /api/oauth/client-id-metadata.json      (public) this server's client ID metadata document, also
    GET    /api/oauth/client-id-metadata/<t>.json   under upstream's per-target paths, naming its own URL

`complete` is refused (404, as for an unknown state) to anyone but the caller who started the sign-in.
"""

from quart import Quart, Response

from executor_mcp.auth.principal import Principal
from executor_mcp.codec import JsonObject, dumps
from executor_mcp.integrations.addresses import valid_slug
from executor_mcp.integrations.oauth_clients import OAuthClients
from executor_mcp.integrations.oauth_signins import CLIENT_METADATA_PATH, CLIENT_METADATA_TARGETS, OAuthSignIns
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.validation import text
from executor_mcp.integrations.wire import connection_json, probe_json
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import ConnectionRecord

_CALLBACK_PARAMS = ("code", "iss", "error", "error_description")


class OAuthHandlers:
    """The routes' handlers: `(principal, body, **path parameters)`, as the integrations API calls them."""

    def __init__(self, integrations: Integrations) -> None:
        self._integrations = integrations

    def _clients(self) -> OAuthClients:
        if self._integrations.oauth_clients is None:
            raise InvalidInput("This server does not serve OAuth")
        return self._integrations.oauth_clients

    def _signins(self) -> OAuthSignIns:
        if self._integrations.oauth is None:
            raise InvalidInput("This server does not serve OAuth")
        return self._integrations.oauth

    async def clients(self, principal: Principal, body: JsonObject) -> list[JsonObject]:
        return await self._clients().summaries(principal)

    async def create_client(self, principal: Principal, body: JsonObject) -> JsonObject:
        return {"client": (await self._clients().create(principal, body)).slug}

    async def register_dynamic(self, principal: Principal, body: JsonObject) -> JsonObject:
        signins = self._signins()
        record = await self._clients().register_dynamic(
            principal, body, signins.callback_url(), signins.metadata_document_url()
        )
        return {"client": record.slug}

    async def remove_client(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        await self._clients().remove(principal, str(body.get("owner", "user")), slug)
        return {"removed": True}

    async def start(self, principal: Principal, body: JsonObject) -> JsonObject:
        started = await self._signins().start(principal, body)
        connection = started.get("connection")
        if isinstance(connection, ConnectionRecord):
            return {"status": "connected", "connection": connection_json(connection)}
        return started

    async def complete(self, principal: Principal, body: JsonObject) -> JsonObject:
        state = text(body.get("state"), "state")
        params = {name: value for name in _CALLBACK_PARAMS if isinstance(value := body.get(name), str)}
        return connection_json(await self._signins().complete(principal, state, params))

    async def cancel(self, principal: Principal, body: JsonObject) -> JsonObject:
        await self._signins().cancel(principal, text(body.get("state"), "state"))
        return {"cancelled": True}

    async def probe(self, principal: Principal, body: JsonObject) -> JsonObject:
        return probe_json(*await self._clients().probe(text(body.get("url"), "url")))


class ClientMetadataDocument:
    """Where an authorization server reads who we are when our client id is a URL (a client ID metadata
    document): public, as it must be, cacheable for five minutes; it holds no secret."""

    def __init__(self, signins: OAuthSignIns) -> None:
        self._signins = signins

    def register(self, app: Quart) -> None:
        app.add_url_rule(CLIENT_METADATA_PATH, "oauth_client_metadata", self._document, methods=["GET"])
        app.add_url_rule(
            CLIENT_METADATA_TARGETS + "<target>.json", "oauth_client_metadata_target", self._document, methods=["GET"]
        )

    async def _document(self, target: str | None = None) -> Response:
        if target is not None and not valid_slug(target):
            return Response(b'{"error":"not_found"}', status=404, content_type="application/json")
        return Response(
            dumps(self._signins.metadata_document(target)),
            content_type="application/json",
            headers={"Cache-Control": "public, max-age=300"},
        )

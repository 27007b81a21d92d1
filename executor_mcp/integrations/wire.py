"""The JSON shapes of integrations, connections and tools, shared by the HTTP API, the sandbox's core tools
and the CLI (upstream §3.1). A connection's JSON never holds a value, only where its values live."""

import urllib.parse

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.openapi.auth import describe_methods
from executor_mcp.integrations.views import ToolEntry
from executor_mcp.oauth.metadata import AuthorizationServer, ProtectedResource, advertised_scopes
from executor_mcp.records.integrations import (
    BUILT_IN,
    BUILT_IN_DESCRIPTION,
    BUILT_IN_NAME,
    BUILT_IN_SLUG,
    ConnectionRecord,
    IntegrationRecord,
)


def display_url(url: str) -> str:
    """A URL as every member may see it: no user, password, query or fragment, where a token may hide."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def integration_json(record: IntegrationRecord) -> JsonObject:
    body: JsonObject = {
        "slug": record.slug,
        "name": record.name,
        "description": record.description,
        "kind": record.kind,
        "canRemove": True,
        "canRefresh": record.can_refresh,
        "authMethods": describe_methods(record.auth_methods),
    }
    display = record.config.get("baseUrl") or record.config.get("specUrl") or record.config.get("endpoint")
    if display:
        body["displayUrl"] = display_url(display)
    return body


BUILT_IN_JSON: JsonObject = {
    "slug": BUILT_IN_SLUG,
    "name": BUILT_IN_NAME,
    "description": BUILT_IN_DESCRIPTION,
    "kind": BUILT_IN,
    "canRemove": False,
    "canRefresh": False,
    "authMethods": [],
}


def connection_json(record: ConnectionRecord, *, full: bool = True) -> JsonObject:
    """`full` adds the fields the HTTP API answers and the sandbox's `create` leaves out."""
    body: JsonObject = {
        "owner": record.owner,
        "name": record.name,
        "integration": record.integration,
        "template": record.template,
        "provider": record.provider,
        "address": record.address,
        "identityLabel": record.identity_label,
        "description": record.description,
        "expiresAt": None if record.expires_at is None else round(record.expires_at * 1000),
        "oauthClient": record.oauth_client,
        "oauthClientOwner": record.oauth_client_owner,
        "oauthScope": record.oauth_scope,
    }
    if full:
        body["missingOAuthScopes"] = list(record.missing_scopes)
        body["lastHealth"] = _last_health(record)
    return body


def _last_health(record: ConnectionRecord) -> JsonObject | None:
    """Upstream's shape for a connection whose last tool listing failed (the reason holds no secret); None
    while it is healthy or its tools come from its integration."""
    if record.sync_error is None:
        return None
    return {"status": "degraded", "detail": f"Tool sync failing: {record.sync_error}"}


def tool_row(entry: ToolEntry, *, annotations: bool = False) -> JsonObject:
    row: JsonObject = {
        "address": "tools." + entry.tool_id,
        "owner": entry.connection.owner,
        "integration": entry.integration.slug,
        "connection": entry.connection.name,
        "name": entry.tool.name,
        "pluginId": entry.integration.kind,
        "description": entry.tool.description,
    }
    if annotations and entry.tool.requires_approval:
        row["requiresApproval"] = True
        if entry.tool.approval_description:
            row["approvalDescription"] = entry.tool.approval_description
    return row


def probe_json(resource: ProtectedResource | None, server: AuthorizationServer) -> JsonObject:
    """Where an API signs in (upstream's `ProbeResult`), as `POST /api/oauth/probe` and `oauth.probe` answer it:
    the protected resource's scopes when it names them (even none), else its authorization server's."""
    return {
        "issuer": server.issuer,
        "authorizationUrl": server.authorization_endpoint,
        "tokenUrl": server.token_endpoint,
        "resource": resource.resource if resource is not None else None,
        "scopesSupported": list(advertised_scopes(resource, server)),
        "registrationEndpoint": server.registration_endpoint,
        "tokenEndpointAuthMethodsSupported": list(server.token_auth_methods or ()),
        "clientIdMetadataDocumentSupported": server.metadata_documents,
    }

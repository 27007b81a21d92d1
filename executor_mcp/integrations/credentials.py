"""Credentials on the wire and their failures, the same for every kind (sans-I/O).

A connection's method renders its values into headers and query parameters; a value that resolved to
nothing, an upstream that refuses the credential, and a grant too narrow for the call are the
authentication failures every kind answers with one envelope (`details.category: "authentication"` and the
`recovery` block agents act on).
"""

import re
from collections.abc import Mapping
from typing import Any

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.records.integrations import TOKEN, AuthMethod

CREATE_CONNECTION_TOOL = "executor.coreTools.connections.createHandoff"
START_OAUTH_TOOL = "executor.coreTools.oauth.start"
LIST_CONNECTIONS_TOOL = "executor.coreTools.connections.list"
CONNECTION_INSTRUCTIONS = (
    "For API keys and tokens, call createConnectionTool for this integration: it returns a URL where the user "
    "enters the credential in the browser, which creates the connection. Never ask the user to paste a secret "
    "into the chat. Then call listConnectionsTool to confirm the connection exists before retrying this tool."
)
OAUTH_INSTRUCTIONS = (
    "For OAuth credentials, call startOAuthTool and give the user the authorizationUrl it returns; once they "
    "have signed in, the connection is created and bound, then retry the tool."
)
SCOPE_INSTRUCTIONS = (
    "The connection's grant does not include the scope this operation needs, and signing in again with the "
    "same grant gives the same answer. Tell the user which operation was refused and ask them to reconnect the "
    "integration with broader access, or to use a connection that has it. Call listConnectionsTool to see the "
    "connections available."
)


@attrs.frozen
class CredentialMissing:
    """The connection's template needs inputs that resolved to nothing: no request is made."""

    oauth: bool
    inputs: tuple[str, ...]


def render_credentials(
    method: AuthMethod | None, credentials: Mapping[str, str | None]
) -> tuple[dict[str, str], dict[str, str]] | CredentialMissing:
    """The headers and query parameters a connection's method renders from its values, or what is missing."""
    headers: dict[str, str] = {}
    query: dict[str, str] = {}
    if method is None or method.kind == "none":
        return headers, query
    if method.kind == "oauth2":
        token = credentials.get(TOKEN)
        if not token:
            return CredentialMissing(oauth=True, inputs=(TOKEN,))
        headers["authorization"] = f"Bearer {token}"
        return headers, query
    missing = tuple(name for name in method.inputs if not credentials.get(name))
    if missing:
        return CredentialMissing(oauth=False, inputs=missing)
    for placement in method.placements:
        value = placement.literal if placement.literal is not None else credentials.get(placement.input or TOKEN)
        if not value:
            continue
        target = headers if placement.carrier == "header" else query if placement.carrier == "query" else None
        if target is not None:
            target[placement.name] = placement.prefix + value
    return headers, query


def _challenge_param(challenge: str, name: str) -> str | None:
    match = re.search(rf'(?:^|[\s,]){name}\s*=\s*(?:"([^"]*)"|([^\s,]+))', challenge, re.IGNORECASE)
    return None if match is None else (match.group(1) if match.group(1) is not None else match.group(2))


def insufficient_scope(headers: dict[str, str], body: Any) -> tuple[bool, str | None]:
    """Whether a 403 says the grant lacks a scope (RFC 6750 challenge, Google's ErrorInfo, an OAuth error
    body), and the scope the challenge names, if it names one."""
    challenge = headers.get("www-authenticate", "")
    if (_challenge_param(challenge, "error") or "").lower() == "insufficient_scope":
        return True, _challenge_param(challenge, "scope")
    if isinstance(body, dict):
        if body.get("error") == "insufficient_scope":
            scope = body.get("scope")
            return True, scope if isinstance(scope, str) and scope else None
        error = body.get("error")
        details = error.get("details") if isinstance(error, dict) else None
        if isinstance(details, list) and any(
            isinstance(entry, dict) and entry.get("reason") == "ACCESS_TOKEN_SCOPE_INSUFFICIENT" for entry in details
        ):
            return True, None
    return False, None


def recovery() -> JsonObject:
    return {
        "createConnectionTool": CREATE_CONNECTION_TOOL,
        "startOAuthTool": START_OAUTH_TOOL,
        "listConnectionsTool": LIST_CONNECTIONS_TOOL,
        "connectionInstructions": CONNECTION_INSTRUCTIONS,
        "oauthInstructions": OAUTH_INSTRUCTIONS,
    }


def auth_failure(
    code: str,
    message: str,
    *,
    integration: str,
    owner: str,
    credential: JsonObject,
    recovery: JsonObject,
    status: int | None = None,
    upstream_body: Any = None,
) -> JsonObject:
    details: JsonObject = {
        "category": "authentication",
        "integration": {"id": integration, "scope": owner},
        "credential": credential,
    }
    if status is not None:
        details["upstream"] = {"status": status, "details": upstream_body}
    details["recovery"] = recovery
    error: JsonObject = {"code": code, "message": message, "retryable": False}
    if status is not None:
        error["status"] = status
    error["details"] = details
    return {"ok": False, "error": error}


def credential_missing_result(*, integration: str, owner: str, connection: str, oauth: bool) -> JsonObject:
    """`connection_value_missing` (or `oauth_connection_missing`): the template's input resolved to nothing."""
    return auth_failure(
        "oauth_connection_missing" if oauth else "connection_value_missing",
        f'Connection "{connection}" for "{integration}" has no resolvable credential value. '
        "Re-authenticate or update the connection.",
        integration=integration,
        owner=owner,
        credential={"kind": "oauth" if oauth else "secret"},
        recovery=recovery(),
    )


def rejected_result(status: int, body: Any, *, integration: str, owner: str, connection: str) -> JsonObject:
    """`connection_rejected`: the upstream answered 401/403 to the connection's credential."""
    return auth_failure(
        "connection_rejected",
        f'Upstream rejected credentials for "{integration}" with HTTP {status}. '
        f'Re-authenticate or update the connection "{connection}" before retrying this tool.',
        integration=integration,
        owner=owner,
        credential={"kind": "upstream", "label": "Upstream authorization"},
        recovery=recovery(),
        status=status,
        upstream_body=body,
    )


def scope_failure(
    status: int,
    body: Any,
    *,
    integration: str,
    owner: str,
    connection: str,
    required: str | None,
    granted: str | None,
) -> JsonObject:
    needs = f" (required: {required}; granted: {granted or 'unknown'})" if required else ""
    return auth_failure(
        "oauth_scope_insufficient",
        f'The connection "{connection}" for "{integration}" is authorized, but its grant does not cover the scope '
        f"this operation requires{needs}. Re-authenticating with the same grant will return the same error; "
        "reconnect with broader access.",
        integration=integration,
        owner=owner,
        credential={"kind": "oauth", "label": "Upstream authorization"},
        recovery={"listConnectionsTool": LIST_CONNECTIONS_TOOL, "scopeInstructions": SCOPE_INSTRUCTIONS},
        status=status,
        upstream_body=body,
    )

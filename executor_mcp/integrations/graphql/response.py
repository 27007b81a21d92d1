"""A GraphQL answer → the call's result (upstream-integrations §5). Sans-I/O.

In this order: 401/403 are the credential's failure (`oauth_scope_insufficient` when a 403 says a scope is
missing, else `connection_rejected`), checked before the GraphQL errors an upstream may also send with
them; then `errors[]` (`graphql_errors`, whatever the status, since GraphQL over HTTP answers a 400 with
them); then any other non-2xx (`graphql_http_error`); then `{ok: true, data}`, with no `http` key.
"""

import json
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.credentials import insufficient_scope, rejected_result, scope_failure
from executor_mcp.integrations.graphql.introspection import error_messages
from executor_mcp.outbound.model import OutboundResponse

MESSAGE_LIMIT = 1024
MAX_ERRORS = 100  # of `details.errors`: an upstream may answer one per list item


def _body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def classify(answer: OutboundResponse, *, integration: str, owner: str, connection: str) -> JsonObject:
    body = _body(answer.body)
    status = answer.status
    if status == 403:
        scoped, required = insufficient_scope(answer.headers, body)
        if scoped:
            return scope_failure(
                status,
                body,
                integration=integration,
                owner=owner,
                connection=connection,
                required=required,
                granted=None,
            )
    if status in (401, 403):
        return rejected_result(status, body, integration=integration, owner=owner, connection=connection)
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors:
        return {
            "ok": False,
            "error": {
                "code": "graphql_errors",
                "message": error_messages(errors[:1])[0][:MESSAGE_LIMIT],
                "details": {"errors": errors[:MAX_ERRORS]},
            },
        }
    if not 200 <= status < 300:
        return {
            "ok": False,
            "error": {
                "code": "graphql_http_error",
                "status": status,
                "message": f"GraphQL request failed with HTTP {status}",
            },
        }
    if not isinstance(body, dict):
        return {
            "ok": False,
            "error": {
                "code": "graphql_invalid_response",
                "status": status,
                "message": f"GraphQL endpoint answered HTTP {status} with a body that is not a GraphQL response",
            },
        }
    return {"ok": True, "data": body.get("data")}

"""The answers of the small JSON APIs (`/api/policies`, `/api/sessions`, `/api/approvals`) and of the console's
own posts: a JSON body, or `{"error": message}` with its status; never cached, since each is one caller's."""

from typing import Any

from quart import Response, request

from executor_mcp.auth.principal import Authenticator, Principal
from executor_mcp.codec import dumps
from executor_mcp.protocol.errors import BODY_TIMEOUT_SECONDS, Refused, envelope_headers
from executor_mcp.transport import headers as rules
from executor_mcp.transport.bodies import BodyRefused, read_json_object

NO_STORE = {"Cache-Control": "no-store"}


def json_ok(body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(body), status=200, content_type=rules.JSON, headers={**NO_STORE, **(headers or {})})


def json_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        dumps({"error": message}), status=status, content_type=rules.JSON, headers={**NO_STORE, **(headers or {})}
    )


async def authenticated(authenticator: Authenticator) -> Principal | Response:
    """The request's principal, or its refusal as `{"error"}` with the challenge and `Retry-After` of `/mcp`."""
    try:
        return await authenticator.authenticate(request.headers)
    except Refused as refused:
        return json_error(refused.envelope.status, refused.message, envelope_headers(refused))


async def json_body(limit: int) -> dict[str, Any] | Response:
    """The JSON object of a change (bounded in size and time, JSON only), or its refusal to answer instead."""
    body = await read_json_object(limit, BODY_TIMEOUT_SECONDS)
    return json_error(body.status, body.message, body.headers) if isinstance(body, BodyRefused) else body


async def admitted(authenticator: Authenticator, methods: tuple[str, ...]) -> Principal | Response:
    """The principal of a request to a route that serves `methods`; or what to answer instead: the preflight
    for OPTIONS, 405 with `Allow` for another method, or the authentication refusal."""
    if request.method == "OPTIONS":
        return Response(b"", status=204, headers=rules.PREFLIGHT)
    if request.method not in methods:
        return json_error(405, "Method not allowed", {"Allow": ", ".join([*methods, "OPTIONS"])})
    return await authenticated(authenticator)

"""`/api/limits`: the bearer's org's rate limits on tool calls, per minute.

    GET /api/limits   {operator, org, effective}: each {toolCallsPerMinute: {org, account, connection}}
    PUT /api/limits   {toolCallsPerMinute: {org?, account?, connection?}}   (org admins) -> the same answer

`operator` is the server's ceilings (`--tool-calls-per-minute-per-*`), `org` the org admin's own, `effective` the
stricter of the two, which is what a call is counted against; null is no limit. A limit is a whole number from 1
to `MAX_PER_MINUTE`. An org admin may set the org's own limits (a member gets 403); setting them can only make the
effective limits stricter. Errors are `{"error": ...}` as elsewhere under `/api`.
"""

from typing import Any

from quart import Quart, Response, request

from executor_mcp.auth.principal import Authenticator
from executor_mcp.storage.records import OrgLimits
from executor_mcp.tools.rates import Rates, stricter
from executor_mcp.transport.discovery import API_PREFIX
from executor_mcp.transport.json_answers import admitted, json_body, json_error, json_ok

MAX_PER_MINUTE = 1_000_000
MAX_LIMITS_BODY_BYTES = 4 * 1024
_SCOPES = ("org", "account", "connection")


class LimitsApi:
    def __init__(self, rates: Rates, authenticator: Authenticator) -> None:
        self._rates = rates
        self._auth = authenticator

    def register(self, app: Quart) -> None:
        app.add_url_rule(
            API_PREFIX + "/limits",
            "limits",
            self.limits,
            methods=["GET", "HEAD", "PUT", "POST", "PATCH", "DELETE", "OPTIONS"],
            provide_automatic_options=False,
        )

    async def limits(self) -> Response:
        principal = await admitted(self._auth, ("GET", "HEAD", "PUT"))
        if isinstance(principal, Response):
            return principal
        if not principal.org_id:
            return json_error(400, "limits need an organization")
        if request.method != "PUT":
            return json_ok(self._answer(await self._rates.own_limits(principal.org_id)))
        if not principal.org_admin:
            return json_error(403, "Only an organization admin can change the org's limits")
        body = await json_body(MAX_LIMITS_BODY_BYTES)
        if isinstance(body, Response):
            return body
        own = _parse(body)
        if isinstance(own, str):
            return json_error(400, own)
        await self._rates.set_own_limits(principal.org_id, own)
        return json_ok(self._answer(own))

    def _answer(self, own: OrgLimits | None) -> dict[str, Any]:
        operator = {scope: getattr(self._rates.operator, scope) for scope in _SCOPES}
        mine = {scope: getattr(own, scope) if own is not None else None for scope in _SCOPES}
        effective = {scope: stricter(operator[scope], mine[scope]) for scope in _SCOPES}
        return {
            "operator": {"toolCallsPerMinute": operator},
            "org": {"toolCallsPerMinute": mine},
            "effective": {"toolCallsPerMinute": effective},
        }


def _parse(body: dict[str, Any]) -> OrgLimits | str | None:
    """The org's own limits from a PUT body (all null: none), or what is wrong with it."""
    per_minute = body.get("toolCallsPerMinute")
    if set(body) - {"toolCallsPerMinute"} or not isinstance(per_minute, dict) or set(per_minute) - set(_SCOPES):
        return 'the body is {"toolCallsPerMinute": {"org"?, "account"?, "connection"?}}'
    for scope, value in per_minute.items():
        if value is not None and (type(value) is not int or not 1 <= value <= MAX_PER_MINUTE):
            return f"toolCallsPerMinute.{scope} must be null or a whole number from 1 to {MAX_PER_MINUTE}"
    limits = OrgLimits(**{scope: per_minute.get(scope) for scope in _SCOPES})
    return None if limits == OrgLimits() else limits

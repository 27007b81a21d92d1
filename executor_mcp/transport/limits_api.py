"""`/api/limits`: the bearer's org's limits: tool calls per minute, and executions in progress at once.

    GET /api/limits   {operator, org, effective}: each {toolCallsPerMinute: {org, account, connection},
                                                         executionsInFlight: {org, account}}
    PUT /api/limits   {toolCallsPerMinute?: {org?, account?, connection?}, executionsInFlight?: {org?, account?}}
                      (org admins) -> the same answer

`operator` is the server's ceilings (`--tool-calls-per-minute-per-*`, `--max-executions-per-*`), `org` the org
admin's own, `effective` the stricter of the two, which is what a call or an execution is counted against; null
is no limit. A limit is a whole number from 1 to `MAX_LIMIT`. A PUT replaces each section it names whole (a scope
left out is null) and keeps the others. An org admin may set them (a member gets 403); setting them can only make
the effective limits stricter. Errors are `{"error": ...}` as elsewhere under `/api`.
"""

from typing import Any

from quart import Quart, Response, request

from executor_mcp.auth.principal import Authenticator
from executor_mcp.storage.records import UsageLimits
from executor_mcp.tools.rates import Rates, effective
from executor_mcp.transport.discovery import API_PREFIX
from executor_mcp.transport.json_answers import admitted, json_body, json_error, json_ok

MAX_LIMIT = 1_000_000
MAX_LIMITS_BODY_BYTES = 4 * 1024
# Each section of the answer and of a PUT: its scopes, each with the field of `UsageLimits` that holds it.
_SECTIONS: dict[str, dict[str, str]] = {
    "toolCallsPerMinute": {"org": "org", "account": "account", "connection": "connection"},
    "executionsInFlight": {"org": "executions_org", "account": "executions_account"},
}


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
        updates = _parse(body)
        if isinstance(updates, str):
            return json_error(400, updates)
        return json_ok(self._answer(await self._rates.change_own_limits(principal.org_id, updates)))

    def _answer(self, own: UsageLimits | None) -> dict[str, Any]:
        mine = own or UsageLimits()
        now = effective(self._rates.operator, own)
        return {
            name: {section: _section(limits, fields) for section, fields in _SECTIONS.items()}
            for name, limits in (("operator", self._rates.operator), ("org", mine), ("effective", now))
        }


def _section(limits: UsageLimits, fields: dict[str, str]) -> dict[str, int | None]:
    return {scope: getattr(limits, field) for scope, field in fields.items()}


def _parse(body: dict[str, Any]) -> dict[str, int | None] | str:
    """The `UsageLimits` fields a PUT body sets, or what is wrong with it. A section the body names is replaced
    whole (a scope it leaves out is null); a section it leaves out is kept as stored."""
    shape = (
        'the body is {"toolCallsPerMinute"?: {"org"?, "account"?, "connection"?},'
        ' "executionsInFlight"?: {"org"?, "account"?}}, naming at least one'
    )
    if not body or set(body) - set(_SECTIONS):
        return shape
    updates: dict[str, int | None] = {}
    for section, fields in _SECTIONS.items():
        if section not in body:
            continue
        given = body[section]
        if not isinstance(given, dict) or set(given) - set(fields):
            return shape
        for scope, field in fields.items():
            value = given.get(scope)
            if value is not None and (type(value) is not int or not 1 <= value <= MAX_LIMIT):
                return f"{section}.{scope} must be null or a whole number from 1 to {MAX_LIMIT}"
            updates[field] = value
    return updates

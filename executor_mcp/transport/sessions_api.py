"""`/api/sessions`: the caller's own MCP sessions over plain JSON HTTP (what the console's sessions page shows).

    GET    /api/sessions          the caller's sessions (its account in its org), most recently active first
    DELETE /api/sessions/<id>     end that session, as `DELETE /mcp` would          -> {"terminated": true}

Authenticated exactly like `/mcp` (and, from a console page, by the visitor's cookie with its CSRF token).
Only the caller's own sessions exist here: another account's, or the same account's in another org, is 404
like an unknown id, never 403, which would confirm it exists. A session is `live` (its runtime runs in this
process), `restoring`, `disposed` (stored, no runtime here), `condemned` (terminated, being wiped) or
`restarting` (this process is shutting down). Errors are `{"error": "<message>"}`.
"""

from typing import Any

from quart import Quart, Response

from executor_mcp.auth.principal import Authenticator
from executor_mcp.sessions.manager import Listed, SessionManager
from executor_mcp.transport.discovery import API_PREFIX
from executor_mcp.transport.json_answers import admitted, json_error, json_ok

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def listed_json(listed: Listed) -> dict[str, Any]:
    """A session as the API shows it (times in milliseconds). The client's name and version are what it said
    in `initialize`: its own words, shown as text."""
    meta = listed.meta
    return {
        "id": listed.record.session_id,
        "state": listed.state.value,
        "client": None if meta is None else {k: meta.client_info.get(k) for k in ("name", "version")},
        "protocolVersion": None if meta is None else meta.protocol_version,
        "elicitationMode": None if meta is None else meta.elicitation_mode,
        "mode": None if meta is None else meta.mode,
        "createdAt": int(listed.record.created_at * 1000),
        "lastActivityAt": int(listed.last_activity * 1000),
    }


class SessionsApi:
    def __init__(self, manager: SessionManager, authenticator: Authenticator) -> None:
        self._manager = manager
        self._auth = authenticator

    def register(self, app: Quart) -> None:
        """Every method reaches each route, which answers the ones it lacks with its own 405 and `Allow`."""
        routes = (("/sessions", "sessions", self.collection), ("/sessions/<session_id>", "session", self.item))
        for rule, name, view in routes:
            app.add_url_rule(API_PREFIX + rule, name, view, methods=_METHODS, provide_automatic_options=False)

    async def collection(self) -> Response:
        principal = await admitted(self._auth, ("GET", "HEAD"))
        if isinstance(principal, Response):
            return principal
        return json_ok([listed_json(listed) for listed in await self._manager.owner_listing(principal)])

    async def item(self, session_id: str) -> Response:
        principal = await admitted(self._auth, ("DELETE",))
        if isinstance(principal, Response):
            return principal
        if not await self._manager.end_owned(session_id, principal):
            return json_error(404, "Session not found")
        return json_ok({"terminated": True})

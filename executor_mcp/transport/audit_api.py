"""`/api/audit`: the caller's org's audit log over plain JSON HTTP.

    GET /api/audit?since=&session=&tool=&limit=&before=   -> {"items": [...], "next": "<cursor>" | null}

Authenticated exactly like `/mcp`. Scoped to the caller's org; a member who is not an org admin (with
`--org-admin-claim`) sees only its own account's calls. Newest first, at most `limit` (default 100, at most
1000) per page; `next` is the `before` of the next (older) page. Errors are `{"error": "<message>"}`.
"""

import time

from quart import Quart, Response, request

from executor_mcp.audit.model import MAX_LISTED, AuditQuery, parse_since, record_json
from executor_mcp.audit.trail import AuditTrail
from executor_mcp.auth.principal import Authenticator
from executor_mcp.transport.discovery import API_PREFIX
from executor_mcp.transport.json_answers import admitted, json_error, json_ok

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_MAX_PARAM = 512


class AuditApi:
    def __init__(self, trail: AuditTrail, authenticator: Authenticator) -> None:
        self._trail = trail
        self._auth = authenticator

    def register(self, app: Quart) -> None:
        app.add_url_rule(
            API_PREFIX + "/audit", "audit", self.listing, methods=_METHODS, provide_automatic_options=False
        )

    async def listing(self) -> Response:
        principal = await admitted(self._auth, ("GET", "HEAD"))
        if isinstance(principal, Response):
            return principal
        args = request.args
        if any(len(value) > _MAX_PARAM for value in args.values()):
            return json_error(400, "A query parameter is too long")
        try:
            since = parse_since(args["since"], time.time()) if "since" in args else None
            limit = int(args.get("limit", "100"))
            before = bytes.fromhex(args["before"]) if "before" in args else None
        except ValueError as exc:
            return json_error(400, f"Invalid audit query: {exc}")
        if not 1 <= limit <= MAX_LISTED:
            return json_error(400, f"Invalid audit query: limit must be between 1 and {MAX_LISTED}")
        query = AuditQuery.seen_by(
            principal.org_id or "",  # as the console page: an admitted principal always has its org
            principal.account_id,
            org_admin=principal.org_admin,
            since=since,
            before=before,
            session_id=args.get("session"),
            tool=args.get("tool"),
            limit=limit,
        )
        page = await self._trail.page(query)
        cursor = page.next_before.hex() if page.next_before is not None else None
        return json_ok({"items": [record_json(record) for record in page.records], "next": cursor})

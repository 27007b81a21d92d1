"""`/api/policies`: the bearer's policies over plain JSON HTTP (upstream §5).

    GET    /api/policies          the bearer's org rules and own user rules, in evaluation order
    POST   /api/policies          {owner, pattern, action, position?}            -> the policy
    PATCH  /api/policies/<id>     {owner, pattern?, action?, position?}          -> the policy
    PATCH  /api/policies/<id>     {owner, move: "up" | "down"}                   -> the policy, one place moved
    DELETE /api/policies/<id>     {owner}                                         -> {"removed": true}
    GET    /api/policies/evaluate?path=<tool path>   -> {path, action, rule: {id, owner, pattern, action} | null,
                                                         reason}: what a call of that tool would get, and why

Authenticated exactly like `/mcp`. Errors are `{"error": "<message>"}` with 400 (bad request), 401/403/
503 (authentication, with the same challenge and `Retry-After` as `/mcp`), 403 (an org rule changed by a
non-admin), 404 (no such policy for this bearer), 405 (another method), 413 (a body over 64 KiB) or 415
(a change whose body is not `application/json`: a page in a browser can send a `text/plain` POST without
a preflight, never a JSON one). Nothing is written unless the whole request is valid.
"""

from quart import Response, request

from executor_mcp.auth.principal import Authenticator
from executor_mcp.policies.service import (
    Policies,
    PolicyError,
    PolicyForbidden,
    PolicyNotFound,
    describe,
    explanation_json,
    parse_change,
    parse_move,
    parse_new,
    parse_owner,
    parse_tool_path,
)
from executor_mcp.tools.catalog import Catalog
from executor_mcp.transport.json_answers import admitted, json_body, json_error, json_ok

# A policy request is a few short fields; anything much bigger is not one.
MAX_POLICY_BODY_BYTES = 64 * 1024


class PoliciesApi:
    """`catalog`, when given, tells `evaluate` each tool's approval annotation, as a real call would see it."""

    def __init__(self, policies: Policies, authenticator: Authenticator, catalog: Catalog | None = None) -> None:
        self._policies = policies
        self._auth = authenticator
        self._catalog = catalog

    async def collection(self) -> Response:
        principal = await admitted(self._auth, ("GET", "HEAD", "POST"))
        if isinstance(principal, Response):
            return principal
        if request.method != "POST":
            return json_ok([describe(record) for record in await self._policies.list(principal)])
        body = await json_body(MAX_POLICY_BODY_BYTES)
        if isinstance(body, Response):
            return body
        try:
            record = await self._policies.create(principal, *parse_new(body))
        except PolicyError as exc:
            return _policy_error(exc)
        return json_ok(describe(record))

    async def item(self, policy_id: str) -> Response:
        principal = await admitted(self._auth, ("PATCH", "DELETE"))
        if isinstance(principal, Response):
            return principal
        body = await json_body(MAX_POLICY_BODY_BYTES)
        if isinstance(body, Response):
            return body
        try:
            if request.method == "DELETE":
                await self._policies.remove(principal, policy_id, parse_owner(body.get("owner")))
                return json_ok({"removed": True})
            move = parse_move(body)
            if move is not None:
                record = await self._policies.move(principal, policy_id, *move)
            else:
                owner, change = parse_change(body)
                record = await self._policies.update(principal, policy_id, owner, **change)
        except PolicyError as exc:
            return _policy_error(exc)
        return json_ok(describe(record))

    async def evaluate(self) -> Response:
        principal = await admitted(self._auth, ("GET", "HEAD"))
        if isinstance(principal, Response):
            return principal
        try:
            tool_id = parse_tool_path(request.args.get("path"))
            annotation = None if self._catalog is None else await self._catalog.approval_annotation(tool_id, principal)
            explanation = await self._policies.explain(principal, tool_id, annotation)
        except PolicyError as exc:
            return _policy_error(exc)
        return json_ok(explanation_json(tool_id, explanation))


def _policy_error(exc: PolicyError) -> Response:
    status = 404 if isinstance(exc, PolicyNotFound) else 403 if isinstance(exc, PolicyForbidden) else 400
    return json_error(status, str(exc))

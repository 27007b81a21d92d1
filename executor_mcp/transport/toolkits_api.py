"""`/api/toolkits`: the bearer's toolkits over plain JSON HTTP, with upstream's routes and shapes
(`upstream-oauth-toolkits.md` §B.1) and a level on each connection pattern.

    GET    /api/toolkits                                    {toolkits: [Toolkit]}, org's first, then by name
    POST   /api/toolkits                  {owner, name, slug?}                -> Toolkit
    GET    /api/toolkits/<id>                                                 -> Toolkit
    PATCH  /api/toolkits/<id>             {name?, slug?}                      -> Toolkit
    DELETE /api/toolkits/<id>                                                 -> {removed: true}
    GET    /api/toolkits/<id>/policies                      {policies: [ToolkitPolicy]}, by position
    POST   /api/toolkits/<id>/policies    {pattern, action, position?}        -> ToolkitPolicy (first, unless placed)
    PATCH  /api/toolkits/<id>/policies/<pid>  {pattern?, action?, position?}  -> ToolkitPolicy
    DELETE /api/toolkits/<id>/policies/<pid>                                  -> {removed: true}
    GET    /api/toolkits/<id>/connections                   {connections: [ToolkitConnection]}, by position
    POST   /api/toolkits/<id>/connections {pattern, level?, position?}        -> ToolkitConnection (a listed pattern
                                                                                 answers the one it has)
    PATCH  /api/toolkits/<id>/connections/<cid>  {level}                      -> ToolkitConnection
    DELETE /api/toolkits/<id>/connections/<cid>                               -> {removed: true}

Authenticated like every `/api` route. A toolkit failure is upstream's `{"_tag": "ToolkitError", "message"}`:
400, or 403 for an org toolkit changed by a non-admin; authentication and body refusals are `{"error"}` as
elsewhere under `/api`. Nothing is written unless the whole request is valid.
"""

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from quart import Quart, Response, request

from executor_mcp.auth.principal import Authenticator
from executor_mcp.codec import dumps
from executor_mcp.policies.service import PolicyError, PolicyForbidden
from executor_mcp.policies.toolkit_service import (
    ToolkitError,
    Toolkits,
    describe_connection,
    describe_rule,
    describe_toolkit,
    parse_connection,
    parse_level,
    parse_name,
    parse_new_toolkit,
    parse_rule,
    parse_rule_change,
    parse_slug,
)
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.storage.records import ToolkitConnectionRecord, ToolkitRecord, ToolkitRuleRecord
from executor_mcp.transport import headers as rules
from executor_mcp.transport.discovery import API_PREFIX
from executor_mcp.transport.json_answers import NO_STORE, admitted, json_body, json_ok

# A toolkit request is a few short fields; anything much bigger is not one.
MAX_TOOLKIT_BODY_BYTES = 64 * 1024
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class ToolkitsApi:
    def __init__(self, toolkits: Toolkits, authenticator: Authenticator) -> None:
        self._toolkits = toolkits
        self._auth = authenticator

    def register(self, app: Quart) -> None:
        base = API_PREFIX + "/toolkits"
        for path, name, view in (
            (base, "toolkits", self.collection),
            (base + "/<toolkit_id>", "toolkit", self.item),
            (base + "/<toolkit_id>/policies", "toolkit_policies", functools.partial(self.rows, RULES)),
            (base + "/<toolkit_id>/policies/<row_id>", "toolkit_policy", functools.partial(self.row, RULES)),
            (base + "/<toolkit_id>/connections", "toolkit_connections", functools.partial(self.rows, CONNECTIONS)),
            (
                base + "/<toolkit_id>/connections/<row_id>",
                "toolkit_connection",
                functools.partial(self.row, CONNECTIONS),
            ),
        ):
            app.add_url_rule(path, name, view, methods=_METHODS, provide_automatic_options=False)

    async def collection(self) -> Response:
        principal = await admitted(self._auth, ("GET", "HEAD", "POST"))
        if isinstance(principal, Response):
            return principal
        if request.method != "POST":
            return json_ok({"toolkits": [describe_toolkit(r) for r in await self._toolkits.visible(principal)]})
        body = await json_body(MAX_TOOLKIT_BODY_BYTES)
        if isinstance(body, Response):
            return body
        try:
            return json_ok(describe_toolkit(await self._toolkits.create(principal, *parse_new_toolkit(body))))
        except PolicyError as exc:
            return toolkit_error(exc)

    async def item(self, toolkit_id: str) -> Response:
        principal = await admitted(self._auth, ("GET", "HEAD", "PATCH", "DELETE"))
        if isinstance(principal, Response):
            return principal
        try:
            if request.method in ("GET", "HEAD"):
                return json_ok(describe_toolkit(await self._toolkits.get(principal, toolkit_id)))
            if request.method == "DELETE":
                await self._toolkits.remove(principal, toolkit_id)
                return json_ok({"removed": True})
            body = await json_body(MAX_TOOLKIT_BODY_BYTES)
            if isinstance(body, Response):
                return body
            name, slug = body.get("name"), body.get("slug")
            record = await self._toolkits.update(
                principal,
                toolkit_id,
                name=parse_name(name) if name is not None else None,
                slug=parse_slug(slug) if slug is not None else None,
            )
            return json_ok(describe_toolkit(record))
        except PolicyError as exc:
            return toolkit_error(exc)

    async def rows(self, kind: "RowKind", toolkit_id: str) -> Response:
        """A toolkit's rules or connection patterns, by position; or (POST) one more."""
        principal = await admitted(self._auth, ("GET", "HEAD", "POST"))
        if isinstance(principal, Response):
            return principal
        try:
            if request.method != "POST":
                toolkit = await self._toolkits.get(principal, toolkit_id)
                ordered = sorted(kind.rows(toolkit), key=lambda row: (row.position, row.id))
                return json_ok({kind.name: [kind.describe(toolkit, row) for row in ordered]})
            body = await _body()
            if isinstance(body, Response):
                return body
            return json_ok(kind.describe(*await kind.add(self._toolkits, principal, toolkit_id, body)))
        except PolicyError as exc:
            return toolkit_error(exc)

    async def row(self, kind: "RowKind", toolkit_id: str, row_id: str) -> Response:
        """Change (PATCH) or remove (DELETE) one rule or connection pattern of a toolkit."""
        principal = await admitted(self._auth, ("PATCH", "DELETE"))
        if isinstance(principal, Response):
            return principal
        try:
            if request.method == "DELETE":
                await kind.remove(self._toolkits, principal, toolkit_id, row_id)
                return json_ok({"removed": True})
            body = await _body()
            if isinstance(body, Response):
                return body
            return json_ok(kind.describe(*await kind.change(self._toolkits, principal, toolkit_id, row_id, body)))
        except PolicyError as exc:
            return toolkit_error(exc)


Row = ToolkitRuleRecord | ToolkitConnectionRecord
Changed = tuple[ToolkitRecord, Any]


@attrs.frozen
class RowKind:
    """One of a toolkit's two lists, as the API serves both alike: its key in a listing, and its operations."""

    name: str
    rows: Callable[[ToolkitRecord], tuple[Row, ...]]
    describe: Callable[[ToolkitRecord, Any], dict[str, Any]]
    add: Callable[[Toolkits, Principal, str, dict[str, Any]], Awaitable[Changed]]
    change: Callable[[Toolkits, Principal, str, str, dict[str, Any]], Awaitable[Changed]]
    remove: Callable[[Toolkits, Principal, str, str], Awaitable[None]]


async def _add_rule(toolkits: Toolkits, principal: Principal, toolkit_id: str, body: dict[str, Any]) -> Changed:
    return await toolkits.add_rule(principal, toolkit_id, *parse_rule(body))


async def _change_rule(
    toolkits: Toolkits, principal: Principal, toolkit_id: str, row_id: str, body: dict[str, Any]
) -> Changed:
    return await toolkits.update_rule(principal, toolkit_id, row_id, **parse_rule_change(body))


async def _add_connection(toolkits: Toolkits, principal: Principal, toolkit_id: str, body: dict[str, Any]) -> Changed:
    return await toolkits.add_connection(principal, toolkit_id, *parse_connection(body))


async def _change_connection(
    toolkits: Toolkits, principal: Principal, toolkit_id: str, row_id: str, body: dict[str, Any]
) -> Changed:
    """A connection pattern changes its level only (its pattern is what it is)."""
    if "level" not in body:
        raise ToolkitError('level must be "off", "read" or "full"')
    return await toolkits.update_connection(principal, toolkit_id, row_id, parse_level(body["level"]))


RULES = RowKind(
    "policies", lambda record: record.policies, describe_rule, _add_rule, _change_rule, Toolkits.remove_rule
)
CONNECTIONS = RowKind(
    "connections",
    lambda record: record.connections,
    describe_connection,
    _add_connection,
    _change_connection,
    Toolkits.remove_connection,
)


async def _body() -> dict[str, Any] | Response:
    return await json_body(MAX_TOOLKIT_BODY_BYTES)


def toolkit_error(exc: PolicyError) -> Response:
    """Upstream's `ToolkitError` shape: 400, or 403 for a change only an org admin may make."""
    status = 403 if isinstance(exc, PolicyForbidden) else 400
    body = dumps({"_tag": "ToolkitError", "message": str(exc)})
    return Response(body, status=status, content_type=rules.JSON, headers=NO_STORE)

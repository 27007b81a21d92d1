"""The console's audit page: the organization's recent tool calls, newest first, as `GET /api/audit` lists them.

    GET /audit?session=&tool=&since=&before=   one page of `PAGE_SIZE` records; `before` is the cursor that
                                               the previous page's "Older calls" link carries

The page reads the same trail with the query the API builds for the same principal (`audit_query`): the
visitor's org and, for a member who is not an org admin, only the visitor's own account, so the page can never
show more than the API would answer. It is server-rendered with no script: the filters are a GET form (a read
carries no CSRF token and needs none) and the pager is plain links. Every filter is bounded as the API bounds
it, an empty one is no filter, and a malformed one is the form again with the reason, never a server error.
"""

import glob
import time
import urllib.parse
from collections.abc import Mapping

import attrs
from quart import Quart, Response, request

from executor_mcp.audit.model import AuditQuery, AuditRecord, parse_since
from executor_mcp.audit.trail import AuditTrail
from executor_mcp.auth.principal import Principal
from executor_mcp.execution.results import iso
from executor_mcp.web.console import Console
from executor_mcp.web.signin import SignIn

PATH = "/audit"
PAGE_SIZE = 50
MAX_FILTER = 512  # `/api/audit`'s bound on a query parameter
FILTERS = ("session", "tool", "since")
APPROVAL_WORDS = {"accepted": "approved", "declined": "declined", "cancelled": "cancelled", "unanswered": "unanswered"}


@attrs.frozen
class Filters:
    """What the form asked for, as typed: the form shows it again, and `audit_query` reads it."""

    session: str
    tool: str
    since: str
    before: str

    def link(self, before: str | None) -> str:
        """This page's filters at another cursor (None: the newest calls)."""
        values = {name: getattr(self, name) for name in FILTERS if getattr(self, name)}
        if before:
            values["before"] = before
        return PATH + ("?" + urllib.parse.urlencode(values) if values else "")


def filters_of(args: Mapping[str, str]) -> Filters:
    return Filters(*(args.get(name, "").strip() for name in (*FILTERS, "before")))


def audit_query(principal: Principal, filters: Filters, now: float) -> AuditQuery:
    """`/api/audit`'s query for this principal (its org; a non-admin member's own account only), narrowed by
    the filters; ValueError, in words for the page, for filters that make no query."""
    if any(len(value) > MAX_FILTER for value in attrs.astuple(filters)):
        raise ValueError(f"a filter is longer than {MAX_FILTER} characters")
    since = parse_since(filters.since, now) if filters.since else None
    if since is not None and since > now:
        raise ValueError("since is in the future")  # it would find nothing, and a far one fits in no key
    try:
        before = bytes.fromhex(filters.before) if filters.before else None
    except ValueError:
        raise ValueError("the page cursor is not one this page made") from None
    return AuditQuery.seen_by(
        principal.org_id or "",
        principal.account_id,
        org_admin=principal.org_admin,
        since=since,
        before=before,
        session_id=filters.session or None,
        tool=filters.tool or None,
        limit=PAGE_SIZE,
    )


@attrs.frozen
class Row:
    """One call as the table shows it: words, never the record's raw codes alone."""

    at: str  # ISO, for `<time datetime>`
    shown_at: str
    account: str
    session_id: str
    session_link: str
    tool: str
    tool_link: str  # the tool path as a glob matching only itself
    execution_id: str | None
    decision: str | None
    rule: str
    approval: str | None
    outcome: str
    duration: str


def row(record: AuditRecord) -> Row:
    if record.decision is None:
        rule = "no policy was asked"
    elif record.rule_id is None:
        rule = "the tool's own annotation"
    else:
        rule = f"{record.rule_owner} policy {record.rule_pattern} ({record.rule_id})"
    approval = None
    if record.approval is not None:
        approval = APPROVAL_WORDS.get(record.approval, record.approval)
        if record.answered_by:
            approval += f" by the {record.answered_by}"
    return Row(
        at=iso(record.at),
        shown_at=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.at)),
        account=record.account,
        session_id=record.session_id,
        session_link=PATH + "?" + urllib.parse.urlencode({"session": record.session_id}),
        tool=record.tool,
        tool_link=PATH + "?" + urllib.parse.urlencode({"tool": glob.escape(record.tool)}),
        execution_id=record.execution_id,
        decision=record.decision,
        rule=rule,
        approval=approval,
        outcome=record.outcome,
        duration=f"{record.duration_ms:.0f} ms" if record.duration_ms >= 1 else "<1 ms",
    )


class AuditPages:
    def __init__(self, console: Console, trail: AuditTrail) -> None:
        self._console = console
        self._trail = trail

    def register(self, app: Quart) -> None:
        self._console.add_page(app, PATH, "console_audit", self._list)

    async def _list(self) -> Response:
        async def build(visitor: SignIn) -> Response:
            filters = filters_of(request.args)
            try:
                query = audit_query(visitor.principal, filters, time.time())
            except ValueError as problem:
                words = f"Those filters do not work: {problem}"
                return self._page(visitor, filters, [], None, status=400, problem=words)
            found = await self._trail.page(query)
            older = filters.link(found.next_before.hex()) if found.next_before is not None else None
            return self._page(visitor, filters, [row(record) for record in found.records], older)

        return await self._console.page(build)

    def _page(
        self,
        visitor: SignIn,
        filters: Filters,
        rows: list[Row],
        older: str | None,
        *,
        status: int = 200,
        problem: str | None = None,
    ) -> Response:
        return self._console.view(
            visitor,
            "audit.html",
            status=status,
            title="Audit",
            page="audit",
            styles=("governance.css", "audit.css"),
            filters=filters,
            rows=rows,
            older=older,
            newest=filters.link(None) if filters.before else None,
            problem=problem,
            org_admin=visitor.org_admin,
            page_size=PAGE_SIZE,
            max_filter=MAX_FILTER,
        )

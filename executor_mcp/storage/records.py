"""What is stored about a session, as attrs records encoded with the shared strict converter."""

import logging
from typing import Any, TypeVar

import attrs

from executor_mcp.codec import JsonObject, converter, dumps, loads

R = TypeVar("R")
EXECUTE_MODE = "execute"
PASSTHROUGH_MODE = "passthrough"
# `?elicitation_mode=`, read once at initialize; anything else (absent, unknown) is model mode.
MODEL_ELICITATION = "model"
NATIVE_ELICITATION = "native"
BROWSER_ELICITATION = "browser"
ELICITATION_MODES = (MODEL_ELICITATION, NATIVE_ELICITATION, BROWSER_ELICITATION)
log = logging.getLogger(__name__)


@attrs.frozen
class Owner:
    """The principal a session belongs to: the account that opened it, within its organization."""

    account_id: str
    org_id: str | None
    # May create, change and remove the organization's rules. It is not part of whom something belongs
    # to (equality and hashing ignore it): a session or a pause is the account's whatever its role. A
    # session records the role of the bearer that opened it, which is what its executions act with.
    org_admin: bool = attrs.field(default=False, eq=False)
    # The one toolkit endpoint the bearer may use (an API key created with `keys create --toolkit`), or None. Like
    # the role, a property of the bearer, not of whom something belongs to.
    toolkit: str | None = attrs.field(default=None, eq=False)

    def may_act_on(self, owned_by: "Owner") -> bool:
        """Whether this caller may use what `owned_by` owns (a session, a paused execution): the same account
        in the same organization, and what an admin started only as an admin, since it acts with that role."""
        return self == owned_by and (self.org_admin or not owned_by.org_admin)


@attrs.frozen
class SessionRecord:
    """A session's line in the control-plane directory: enough to route, refuse or sweep it unopened."""

    session_id: str
    owner: Owner
    resource: str
    created_at: float
    last_activity_at: float
    condemned: bool = False
    # Until when a pause of the session is kept in its file: a restart before then revives the session.
    paused_until: float = 0.0
    # A principal's workspace, where its MCP 2026-07-28 requests run (`sessions/manager.py`): never named on
    # the wire, outside the per-account session cap.
    workspace: bool = False


@attrs.frozen
class SessionMeta:
    """Who and what a session is, kept in its own file so a restore needs nothing else."""

    session_id: str
    owner: Owner
    resource: str
    protocol_version: str
    client_info: JsonObject
    client_capabilities: JsonObject
    created_at: float
    # How approvals are asked: "model" (pause, the model resumes), "browser" (pause, a person answers on the
    # console's approval page, the model's resume waits for it) or "native" (inline `elicitation/create`).
    elicitation_mode: str = MODEL_ELICITATION
    # Which tools it lists: `execute` and `skills`, or (`?mode=passthrough`) `search` and `invoke`.
    mode: str = EXECUTE_MODE


def encode(record: Any) -> bytes:
    return dumps(converter.unstructure(record))


def decode(raw: bytes, cls: type[R]) -> R:
    return converter.structure(loads(raw), cls)


def decoded_or_skipped(raw: bytes, cls: type[R], what: Any) -> R | None:
    """A stored record, or None (logged) when it fails strict decoding: one bad record is skipped, never the
    end of a scan, a sweep or the server."""
    try:
        return decode(raw, cls)
    except Exception as exc:
        log.error("skipping an unreadable %s record %r: %s", cls.__name__, what, exc)
        return None


@attrs.frozen
class UsageLimits:
    """Limits on an org's use: tool calls per minute per org, per account and per connection (`org`, `account`,
    `connection`), and executions in progress at once per org and per account; None is no limit. The operator's
    (`Settings`) are ceilings; an org admin's own (`/api/limits`, kept on the org's record) can only be stricter."""

    org: int | None = None
    account: int | None = None
    connection: int | None = None
    executions_org: int | None = None
    executions_account: int | None = None


@attrs.frozen
class OrgRecord:
    """An organization the server has seen or been told about; revoked orgs are refused."""

    org_id: str
    first_seen_at: float
    revoked: bool = False
    changed_at: float | None = None
    limits: UsageLimits | None = None


@attrs.frozen
class ApiKeyRecord:
    """An API key, stored by the SHA-256 of its secret: the key itself is shown once and never kept."""

    key_id: str
    account_id: str
    org_id: str
    created_at: float
    revoked: bool = False
    admin: bool = False  # `keys create --admin`: the key administers its org's rules under --org-admin-claim
    toolkit: str | None = None  # `keys create --toolkit SLUG`: the one MCP endpoint the key may use


@attrs.frozen
class PolicyRecord:
    """A tool policy of an organization (`owner` "org") or of one account in it (`owner` "user")."""

    id: str
    org_id: str
    owner: str
    account_id: str | None
    pattern: str
    action: str
    position: str
    created_at: float
    updated_at: float


@attrs.frozen
class ToolkitRuleRecord:
    """One of a toolkit's own rules (`tkpol_…`): evaluated after the org's and the user's, it can only tighten."""

    id: str
    pattern: str
    action: str
    position: str
    created_at: float
    updated_at: float


@attrs.frozen
class ToolkitConnectionRecord:
    """One of a toolkit's connection patterns (`tkconn_…`) and the level its tools are shown at (`off`, `read`,
    `full`)."""

    id: str
    pattern: str
    level: str
    position: str
    created_at: float
    updated_at: float


@attrs.frozen
class ToolkitRecord:
    """A named MCP endpoint, `/mcp/toolkits/<slug>`, of the org (`owner` "org") or of one account in it (`owner`
    "user"); its rules and connection patterns are kept with it, bounded, and change with it in one write."""

    id: str
    org_id: str
    owner: str
    account_id: str | None
    slug: str
    name: str
    created_at: float
    updated_at: float
    policies: tuple[ToolkitRuleRecord, ...] = ()
    connections: tuple[ToolkitConnectionRecord, ...] = ()


@attrs.frozen
class ConsoleLinkRecord:
    """A one-time console sign-in link (`executor-mcp console-link`), stored by the SHA-256 of its token."""

    account_id: str
    org_id: str
    admin: bool
    created_at: float
    expires_at: float

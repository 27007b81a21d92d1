"""Admin commands (`orgs`, `keys`, `policies`, `sessions`, `console-link`) on a data dir, also while a server
runs on it. LMDB is multi-process.

Each opens the control plane, does one thing, closes it; the server sees the change on its next read
(a key revocation on the key's next use). Terminating a session also leaves a request that the session's
home instance takes within a second, and every running instance looks each second whether the orgs of its live
sessions are revoked, so those sessions and their executions end there too, not only on their next request.
"""

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import trio

from executor_mcp.audit.model import MAX_LISTED, AuditQuery, AuditRecord, parse_since, record_json
from executor_mcp.audit.trail import AuditTrail
from executor_mcp.auth.api_keys import digest, new_api_key
from executor_mcp.auth.identity import identity_problem
from executor_mcp.config import SECRET_KEY_ENV, Settings
from executor_mcp.listing import Column, milliseconds, print_fields, print_listing
from executor_mcp.policies.model import RuleOwner
from executor_mcp.policies.service import (
    Policies,
    PolicyError,
    PolicyNotFound,
    describe,
    parse_new,
)
from executor_mcp.policies.toolkit_service import (
    Toolkits,
    describe_connection,
    describe_rule,
    describe_toolkit,
    parse_connection,
    parse_name,
    parse_rule,
)
from executor_mcp.secrets.cipher import KEY_FILE, SecretCipher, SecretUnreadable
from executor_mcp.sessions.manager import SESSIONS_DIR
from executor_mcp.storage import ownership, transfer
from executor_mcp.storage.control import CONTROL_FILE, ControlPlane, migrate_database, open_control_plane
from executor_mcp.storage.postgres.migrations import LATEST as LATEST_SCHEMA
from executor_mcp.storage.records import (
    ApiKeyRecord,
    OrgRecord,
    Owner,
    PolicyRecord,
    SessionMeta,
    SessionRecord,
    ToolkitConnectionRecord,
    ToolkitRecord,
    ToolkitRuleRecord,
)
from executor_mcp.storage.session_file import MissingSessionFile, SessionFile
from executor_mcp.web.console import LINK_PATH, new_link
from executor_mcp.web.signin import MAX_LINK_SECONDS


@asynccontextmanager
async def _control_plane(settings: Settings) -> AsyncIterator[ControlPlane]:
    control = await open_control_plane(settings)
    try:
        yield control
    finally:
        await control.close()


async def migrate(settings: Settings, from_lmdb: Path | None = None) -> int:
    """Bring the schema up to date; with `from_lmdb`, then move that data dir's control plane into the
    database (`storage/transfer.py`) and check the move."""
    if settings.database_url is None:
        print("executor-mcp: error: migrate needs --database-url (or EXECUTOR_MCP_DATABASE_URL)", file=sys.stderr)
        return 2
    if from_lmdb is None:
        await _migrate_schema(settings.database_url)
        return 0
    if not (from_lmdb / CONTROL_FILE).is_file():
        print(f"executor-mcp: error: {from_lmdb} holds no {CONTROL_FILE}: not a data dir", file=sys.stderr)
        return 2
    if not os.environ.get(SECRET_KEY_ENV, "").strip():
        print(f"executor-mcp: error: {_key_advice(from_lmdb)}", file=sys.stderr)
        return 2
    try:
        held = ownership.acquire(from_lmdb)  # no server changes the source while it is read
    except ownership.DataDirInUse as exc:
        print(f"executor-mcp: error: {exc}; the move reads it whole, so stop that server first", file=sys.stderr)
        return 1
    try:
        await _migrate_schema(settings.database_url)
        return await _move(from_lmdb, settings.database_url)
    finally:
        held.release()


async def _migrate_schema(url: str) -> None:
    applied = await migrate_database(url)
    if applied:
        print("applied " + ", ".join(str(version) for version in applied))
    else:
        print(f"up to date (version {LATEST_SCHEMA})")


async def _move(data_dir: Path, url: str) -> int:
    source = await ControlPlane.open(data_dir)
    try:
        target = await ControlPlane.open_postgres(url, pool_size=2)
        try:
            if not await _opens_secrets(source):
                print(
                    f"executor-mcp: error: {SECRET_KEY_ENV} does not open {data_dir}'s stored secrets: "
                    + _key_advice(data_dir),
                    file=sys.stderr,
                )
                return 1
            try:
                await transfer.copy(source, target)
            except transfer.TargetNotEmpty as exc:
                print(f"executor-mcp: error: {exc}", file=sys.stderr)
                return 1
            checks = await transfer.verify(source, target)
            behind = await transfer.left_behind(source)
        finally:
            await target.close()
    finally:
        await source.close()
    return _report(data_dir, checks, behind)


async def _opens_secrets(source: ControlPlane) -> bool:
    """Whether the master key the instances will use opens the source's sealed items (one tried: they were
    all sealed with one key). True when there are none."""
    items = await source.secrets.export_records()
    if not items:
        return True
    master = os.environ[SECRET_KEY_ENV].strip().encode()
    try:
        await trio.to_thread.run_sync(lambda: SecretCipher.derive(master).decrypt(items[0][1]))
    except SecretUnreadable:
        return False
    return True


def _key_advice(data_dir: Path) -> str:
    return (
        f"set {SECRET_KEY_ENV} to the content of {data_dir / KEY_FILE} (or to the {SECRET_KEY_ENV} that install "
        "ran with): the secrets move sealed, and every instance on the database opens them with that key"
    )


def _report(data_dir: Path, checks: list[transfer.DomainCheck], behind: transfer.LeftBehind) -> int:
    width = max(len(check.domain) for check in checks)
    print(f"{'DOMAIN':<{width}}  {'RECORDS':>7}  VERIFIED")
    for check in checks:
        print(f"{check.domain:<{width}}  {check.source_records:>7}  {'yes' if check.verified else 'NO'}")
    print(
        f"{'sessions':<{width}}  {behind.sessions:>7}  not moved: their clients initialize again"
        + (f" ({behind.paused} paused executions are not carried over)" if behind.paused else "")
    )
    differences = [check.difference() for check in checks if not check.verified]
    if differences:
        print("executor-mcp: error: the copy differs from the source:", file=sys.stderr)
        for difference in differences:
            print(f"  {difference}", file=sys.stderr)
        return 1
    print(
        f"moved {data_dir}'s control plane; start every instance with --database-url, its own --instance-id and "
        f"{SECRET_KEY_ENV} set to the content of {data_dir / KEY_FILE} (or the key that install ran with)"
    )
    return 0


def _when(at: float | None) -> str:
    return "-" if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


_ORG_COLUMNS: list[Column[OrgRecord]] = [
    ("ORG", lambda org: org.org_id),
    ("STATE", lambda org: "revoked" if org.revoked else "live"),
    ("FIRST SEEN", lambda org: _when(org.first_seen_at)),
    ("CHANGED", lambda org: _when(org.changed_at)),
]


def _org_json(org: OrgRecord) -> dict[str, object]:
    """No HTTP API lists organizations: the row follows the listings' rule (`listing.py`)."""
    return {
        "id": org.org_id,
        "revoked": org.revoked,
        "firstSeenAt": milliseconds(org.first_seen_at),
        "changedAt": milliseconds(org.changed_at),
    }


async def orgs_list(settings: Settings, as_json: bool = False) -> int:
    async with _control_plane(settings) as control:
        orgs = sorted(await control.orgs.orgs(), key=lambda record: record.org_id)
    print_listing(orgs, as_json, "no organizations", _ORG_COLUMNS, _org_json)
    return 0


async def orgs_set_revoked(settings: Settings, org_id: str, revoked: bool) -> int:
    async with _control_plane(settings) as control:
        # Every running instance reads the record for the orgs of its live sessions and ends those of this one.
        await control.orgs.set_org_revoked(org_id, revoked, time.time())
    print(f"{'revoked' if revoked else 'restored'} organization {org_id}", file=sys.stderr)
    return 0


async def keys_create(
    settings: Settings, account_id: str, org_id: str, admin: bool = False, toolkit: str | None = None
) -> int:
    """`toolkit`: the key opens that toolkit's MCP endpoint and nothing else (no other endpoint, no `/api`, no
    console). The toolkit need not exist yet: until it does, its endpoint is not found."""
    for flag, value in (("--user", account_id), ("--org", org_id)):
        problem = identity_problem(value)
        if problem:
            print(f"executor-mcp: error: {flag} {problem}", file=sys.stderr)
            return 2
    key_id, key = new_api_key()
    async with _control_plane(settings) as control:
        record = ApiKeyRecord(
            key_id=key_id, account_id=account_id, org_id=org_id, created_at=time.time(), admin=admin, toolkit=toolkit
        )
        await control.api_keys.put_api_key(digest(key), record)
    role = "admin " if admin else ""
    bound = f", bound to toolkit {toolkit}" if toolkit else ""
    print(
        f"created {role}API key {key_id} for account {account_id} in organization {org_id}{bound}; it is shown only"
        " once:",
        file=sys.stderr,
    )
    print(key)
    return 0


_KEY_COLUMNS: list[Column[ApiKeyRecord]] = [
    ("ID", lambda key: key.key_id),
    ("STATE", lambda key: "revoked" if key.revoked else "active"),
    ("ROLE", lambda key: "admin" if key.admin else "member"),
    ("ACCOUNT", lambda key: key.account_id),
    ("ORG", lambda key: key.org_id),
    ("TOOLKIT", lambda key: key.toolkit or "-"),
    ("CREATED", lambda key: _when(key.created_at)),
]


def _key_json(key: ApiKeyRecord) -> dict[str, object]:
    """No HTTP API lists API keys: the row follows the listings' rule (`listing.py`). The record holds no
    secret (only its digest names it in the store), so all of it may be shown."""
    return {
        "id": key.key_id,
        "account": key.account_id,
        "org": key.org_id,
        "admin": key.admin,
        "toolkit": key.toolkit,
        "revoked": key.revoked,
        "createdAt": milliseconds(key.created_at),
    }


async def keys_list(settings: Settings, as_json: bool = False) -> int:
    async with _control_plane(settings) as control:
        keys = sorted(await control.api_keys.api_keys(), key=lambda record: record.created_at)
    print_listing(keys, as_json, "no API keys", _KEY_COLUMNS, _key_json)
    return 0


async def keys_revoke(settings: Settings, key_id: str) -> int:
    async with _control_plane(settings) as control:
        record = await control.api_keys.revoke_api_key(key_id)
    if record is None:
        print(f"executor-mcp: error: no API key with id {key_id}", file=sys.stderr)
        return 1
    print(f"revoked API key {key_id}", file=sys.stderr)
    return 0


def _principal(org_id: str, account_id: str | None) -> Owner:
    """The operator on the data dir administers every org."""
    return Owner(account_id=account_id or "", org_id=org_id, org_admin=True)


_POLICY_COLUMNS: list[Column[PolicyRecord]] = [
    ("ID", lambda record: record.id),
    ("OWNER", lambda record: f"user {record.account_id}" if record.owner == "user" else "org"),
    ("PATTERN", lambda record: record.pattern),
    ("ACTION", lambda record: record.action),
    ("POSITION", lambda record: record.position),
]


async def policies_list(settings: Settings, org_id: str, account_id: str | None, as_json: bool = False) -> int:
    """`--json` rows are the HTTP API's (`GET /api/policies`)."""
    async with _control_plane(settings) as control:
        records = await Policies(control.policies).list(_principal(org_id, account_id))
    empty = f"no policies in organization {org_id}" + (f" for user {account_id}" if account_id else "")
    print_listing(records, as_json, empty, _POLICY_COLUMNS, describe)
    return 0


async def policies_add(
    settings: Settings, org_id: str, account_id: str | None, pattern: str, action: str, position: str | None
) -> int:
    owner = RuleOwner.USER if account_id else RuleOwner.ORG
    try:
        checked = parse_new({"owner": owner.value, "pattern": pattern, "action": action, "position": position})
    except PolicyError as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 2
    async with _control_plane(settings) as control:
        record = await Policies(control.policies).create(_principal(org_id, account_id), *checked)
    print(record.id)
    return 0


async def policies_remove(settings: Settings, org_id: str, account_id: str | None, policy_id: str) -> int:
    owner = RuleOwner.USER if account_id else RuleOwner.ORG
    async with _control_plane(settings) as control:
        try:
            await Policies(control.policies).remove(_principal(org_id, account_id), policy_id, owner)
        except PolicyNotFound as exc:
            print(f"executor-mcp: error: {exc}", file=sys.stderr)
            return 1
    print(f"removed policy {policy_id}", file=sys.stderr)
    return 0


def _session_state(record: SessionRecord) -> str:
    return "condemned" if record.condemned else "stored"


_SESSION_COLUMNS: list[Column[SessionRecord]] = [
    ("ID", lambda record: record.session_id),
    ("STATE", _session_state),
    ("ACCOUNT", lambda record: record.owner.account_id),
    ("ORG", lambda record: record.owner.org_id),
    ("RESOURCE", lambda record: record.resource),
    ("CREATED", lambda record: _when(record.created_at)),
    ("ACTIVE", lambda record: _when(record.last_activity_at)),
]


def _session_json(record: SessionRecord) -> dict[str, object]:
    """A directory entry, with the HTTP API's names for what it shares with `GET /api/sessions`'s rows (`id`,
    `createdAt`, `lastActivityAt`). The API lists only the caller's own sessions, with their live state, which
    only the server knows; the command lists every account's, as stored."""
    return {
        "id": record.session_id,
        "account": record.owner.account_id,
        "org": record.owner.org_id,
        "resource": record.resource,
        "condemned": record.condemned,
        "workspace": record.workspace,
        "createdAt": milliseconds(record.created_at),
        "lastActivityAt": milliseconds(record.last_activity_at),
        "pausedUntil": milliseconds(record.paused_until) if record.paused_until else None,
    }


def _meta_json(meta: SessionMeta) -> dict[str, object]:
    """What the session file adds to its directory entry (who it is, the entry says)."""
    return {
        "protocolVersion": meta.protocol_version,
        "clientInfo": meta.client_info,
        "clientCapabilities": meta.client_capabilities,
        "elicitationMode": meta.elicitation_mode,
        "mode": meta.mode,
        "createdAt": milliseconds(meta.created_at),
    }


async def sessions_list(settings: Settings, as_json: bool = False) -> int:
    async with _control_plane(settings) as control:
        records = sorted(await control.sessions.sessions(), key=lambda r: r.last_activity_at, reverse=True)
    print_listing(records, as_json, "no sessions", _SESSION_COLUMNS, _session_json)
    return 0


async def sessions_show(settings: Settings, session_id: str, as_json: bool = False) -> int:
    async with _control_plane(settings) as control:
        record = await control.sessions.get_session(session_id)
    if record is None:
        print(f"executor-mcp: error: no session {session_id}", file=sys.stderr)
        return 1
    meta: SessionMeta | None = None
    last_activity: float | None = None
    initialize: bytes | None = None
    try:
        file = await SessionFile.open(SessionFile.path_for(settings.data_dir / SESSIONS_DIR, session_id))
    except MissingSessionFile:
        pass
    else:
        try:
            meta, last_activity = await file.meta(), await file.last_activity()
            initialize = await file.initialize_request()
        finally:
            await file.close()
    if as_json:
        shown = {
            "session": _session_json(record),
            "meta": None if meta is None else _meta_json(meta),
            "lastActivityAt": milliseconds(last_activity),
            "initializeRequest": json.loads(initialize) if initialize else None,
        }
        print(json.dumps(shown, indent=2))
        return 0
    fields: list[tuple[str, object]] = [(title.lower(), cell(record)) for title, cell in _SESSION_COLUMNS]
    if meta is None:
        fields.append(("file", "none (the session's file is gone)"))
    else:
        client = " ".join(str(meta.client_info.get(key) or "") for key in ("name", "version"))
        fields += [
            ("client", client),
            ("protocol", meta.protocol_version),
            ("approvals", meta.elicitation_mode),
            ("mode", meta.mode),
        ]
    print_fields(fields)
    return 0


async def sessions_terminate(settings: Settings, session_id: str) -> int:
    async with _control_plane(settings) as control:
        found = await control.sessions.request_termination(session_id, time.time())
    if not found:
        print(f"executor-mcp: error: no session {session_id}", file=sys.stderr)
        return 1
    print(f"terminated session {session_id}", file=sys.stderr)
    return 0


async def console_link(settings: Settings, account_id: str, org_id: str, admin: bool, seconds: float) -> int:
    """Print a one-time console sign-in link; the server it points at redeems it (the control plane is shared)."""
    for flag, value in (("--user", account_id), ("--org", org_id)):
        problem = identity_problem(value)
        if problem:
            print(f"executor-mcp: error: {flag} {problem}", file=sys.stderr)
            return 2
    if not 0 < seconds <= MAX_LINK_SECONDS:
        print(f"executor-mcp: error: --expires must be between 0 and {MAX_LINK_SECONDS:g} seconds", file=sys.stderr)
        return 2
    host = f"[{settings.host}]" if ":" in settings.host and not settings.host.startswith("[") else settings.host
    base = settings.public_url or f"http://{host}:{settings.port}"
    if settings.public_url is None and settings.port == 0:
        print("executor-mcp: warning: --port 0 names no port: pass the server's --public-url", file=sys.stderr)
    now = time.time()
    async with _control_plane(settings) as control:
        token = await new_link(
            control.sign_ins, Owner(account_id=account_id, org_id=org_id, org_admin=admin), now, seconds
        )
    print(
        f"one-time console sign-in for account {account_id} in organization {org_id}, usable once within "
        f"{seconds:g} seconds:",
        file=sys.stderr,
    )
    print(f"{base.rstrip('/')}{LINK_PATH}{token}")
    return 0


async def audit_list(
    settings: Settings, org: str, since: str | None, session: str | None, tool: str | None, limit: int, as_json: bool
) -> int:
    try:
        after = None if since is None else parse_since(since, time.time())
    except ValueError as exc:
        print(f"executor-mcp: error: --since: {exc}", file=sys.stderr)
        return 2
    if not 1 <= limit <= MAX_LISTED:
        print(f"executor-mcp: error: --limit must be between 1 and {MAX_LISTED}", file=sys.stderr)
        return 2
    query = AuditQuery(org=org, since=after, session_id=session, tool=tool, limit=limit)
    async with _control_plane(settings) as control:
        page = await AuditTrail(control.audit, retention=0.0).page(query)
    empty = f"no audit records for org {org}" + (" matching the filters" if query.narrowed or after else "")
    print_listing(page.records, as_json, empty, _AUDIT_COLUMNS, record_json)
    return 0


def _decision(record: AuditRecord) -> str:
    rule = "-" if record.decision is None else (record.rule_pattern or "tool default")
    return f"{record.decision or '-'} ({rule})"


_AUDIT_COLUMNS: list[Column[AuditRecord]] = [
    ("TIME", lambda record: _when(record.at)),
    ("ACCOUNT", lambda record: record.account),
    ("SESSION", lambda record: record.session_id[:12]),
    ("TOOL", lambda record: record.tool),
    ("DECISION", _decision),
    ("APPROVAL", lambda record: "-" if record.approval is None else f"{record.approval} by {record.answered_by}"),
    ("OUTCOME", lambda record: record.outcome),
    ("DURATION", lambda record: f"{record.duration_ms:.1f} ms"),
]


# -- toolkits -------------------------------------------------------------------------------------------

_TOOLKIT_COLUMNS: list[Column[ToolkitRecord]] = [
    ("ID", lambda record: record.id),
    ("OWNER", lambda record: f"user {record.account_id}" if record.owner == "user" else "org"),
    ("SLUG", lambda record: record.slug),
    ("NAME", lambda record: record.name),
    ("ROWS", lambda record: f"{len(record.connections)} connections, {len(record.policies)} rules"),
]


async def toolkits_list(settings: Settings, org_id: str, account_id: str | None, as_json: bool = False) -> int:
    """`--json` rows are the HTTP API's (`GET /api/toolkits`)."""
    async with _control_plane(settings) as control:
        records = await Toolkits(control.toolkits).visible(_principal(org_id, account_id))
    empty = f"no toolkits in organization {org_id}" + (f" for user {account_id}" if account_id else "")
    print_listing(records, as_json, empty, _TOOLKIT_COLUMNS, describe_toolkit)
    return 0


async def toolkits_show(
    settings: Settings, org_id: str, account_id: str | None, toolkit_id: str, as_json: bool = False
) -> int:
    async def shown(toolkits: Toolkits) -> int:
        record = await toolkits.get(_principal(org_id, account_id), toolkit_id)
        connections = [describe_connection(record, row) for row in sorted(record.connections, key=_row_order)]
        rules = [describe_rule(record, row) for row in sorted(record.policies, key=_row_order)]
        if as_json:
            print(json.dumps({**describe_toolkit(record), "connections": connections, "policies": rules}, indent=2))
            return 0
        print(f"{record.name}\t/mcp/toolkits/{record.slug}\t{record.id}")
        for row in connections:
            print(f"connection\t{row['id']}\t{row['pattern']}\t{row['level']}")
        for row in rules:
            print(f"rule\t{row['id']}\t{row['pattern']}\t{row['action']}")
        return 0

    return await _toolkit_command(settings, shown)


async def toolkits_create(settings: Settings, org_id: str, account_id: str | None, name: str, slug: str | None) -> int:
    async def create(toolkits: Toolkits) -> int:
        owner = RuleOwner.USER if account_id else RuleOwner.ORG
        record = await toolkits.create(_principal(org_id, account_id), owner, parse_name(name), slug)
        print(record.id)
        print(f"created toolkit {record.slug}: its endpoint is /mcp/toolkits/{record.slug}", file=sys.stderr)
        return 0

    return await _toolkit_command(settings, create)


async def toolkits_remove(settings: Settings, org_id: str, account_id: str | None, toolkit_id: str) -> int:
    async def remove(toolkits: Toolkits) -> int:
        await toolkits.remove(_principal(org_id, account_id), toolkit_id)
        print(f"removed toolkit {toolkit_id}", file=sys.stderr)
        return 0

    return await _toolkit_command(settings, remove)


async def toolkits_connect(
    settings: Settings, org_id: str, account_id: str | None, toolkit_id: str, pattern: str, level: str
) -> int:
    async def connect(toolkits: Toolkits) -> int:
        checked = parse_connection({"pattern": pattern, "level": level})
        _, row = await toolkits.add_connection(_principal(org_id, account_id), toolkit_id, *checked)
        print(row.id)
        return 0

    return await _toolkit_command(settings, connect)


async def toolkits_rule(
    settings: Settings, org_id: str, account_id: str | None, toolkit_id: str, pattern: str, action: str
) -> int:
    async def rule(toolkits: Toolkits) -> int:
        checked = parse_rule({"pattern": pattern, "action": action})
        _, row = await toolkits.add_rule(_principal(org_id, account_id), toolkit_id, *checked)
        print(row.id)
        return 0

    return await _toolkit_command(settings, rule)


async def toolkits_remove_row(
    settings: Settings, org_id: str, account_id: str | None, toolkit_id: str, row_id: str
) -> int:
    async def remove(toolkits: Toolkits) -> int:
        principal = _principal(org_id, account_id)
        if row_id.startswith("tkpol_"):
            await toolkits.remove_rule(principal, toolkit_id, row_id)
        else:
            await toolkits.remove_connection(principal, toolkit_id, row_id)
        print(f"removed {row_id} from toolkit {toolkit_id}", file=sys.stderr)
        return 0

    return await _toolkit_command(settings, remove)


async def _toolkit_command(settings: Settings, work: Callable[[Toolkits], Awaitable[int]]) -> int:
    """A toolkit command on the data dir, as its org's admin; a refusal is one line on stderr and status 2."""
    async with _control_plane(settings) as control:
        try:
            return await work(Toolkits(control.toolkits))
        except PolicyError as exc:
            print(f"executor-mcp: error: {exc}", file=sys.stderr)
            return 2


def _row_order(row: ToolkitRuleRecord | ToolkitConnectionRecord) -> tuple[str, str]:
    return row.position, row.id

"""Admin commands `oauth-clients …` and `connections connect` on a data dir, also while a server runs on it.

They go through the same `OAuthClients` and `OAuthSignIns` as the HTTP API (`/api/oauth/clients`,
`/api/oauth/start`), as an admin of the org, so what they accept and refuse is the API's. A client's secret is
read from a TTY prompt that does not echo, or from standard input, never from argv; nothing printed holds it.

`connections connect` with an authorization-code client starts a sign-in as `--user`, prints where to sign in,
and waits for the connection: the browser comes back to the running server's callback (the flow is in the
control plane both share), and that server, not this process, exchanges the code and writes the connection.
"""

import signal
import sys
from typing import BinaryIO

import trio

from executor_mcp.codec import JsonObject
from executor_mcp.config import Settings
from executor_mcp.integrations.commands import (
    admin_principal,
    fail,
    identity_refusal,
    open_service,
    refused,
    report_saved,
)
from executor_mcp.integrations.connections import Connections
from executor_mcp.integrations.oauth_clients import OAuthClients
from executor_mcp.integrations.oauth_signins import OAuthSignIns
from executor_mcp.integrations.service import Integrations
from executor_mcp.listing import Column, print_listing
from executor_mcp.oauth.flows import FLOW_TTL
from executor_mcp.records.integration_errors import ConnectionNotFound, IntegrationError
from executor_mcp.records.integrations import ConnectionRecord
from executor_mcp.records.oauth import AUTHORIZATION_CODE
from executor_mcp.secrets.prompt import SecretInputRefused, read_secret_value
from executor_mcp.storage.records import Owner

# The flag each field of a client's registration comes from: a refusal names what the operator typed.
CLIENT_FLAGS = {
    "slug": "--slug",
    "clientId": "--client-id",
    "authorizationUrl": "--authorization-url",
    "tokenUrl": "--token-url",
    "resource": "--resource",
    "issuer": "--issuer",
    "tokenEndpointAuthMethod": "--token-auth-method",
    "clientSecret": "the client secret",
}
# How often the wait for a sign-in reads the connection: a person is signing in, a second is quick enough.
POLL_SECONDS = 1.0


def client_body(
    *,
    owner: str,
    slug: str,
    grant: str,
    client_id: str,
    authorization_url: str | None,
    token_url: str,
    resource: str | None,
    issuer: str | None,
    token_auth_method: str | None,
) -> JsonObject:
    """`oauth-clients add`'s flags as a `POST /api/oauth/clients` body (checked by the service like any other)."""
    body: JsonObject = {"owner": owner, "slug": slug, "grant": grant, "clientId": client_id, "tokenUrl": token_url}
    for field, value in (
        ("authorizationUrl", authorization_url),
        ("resource", resource),
        ("issuer", issuer),
        ("tokenEndpointAuthMethod", token_auth_method),
    ):
        if value is not None:
            body[field] = value
    return body


def in_flags(message: str) -> str:
    """A refusal of the service's, which names the API's fields (`tokenUrl must be ...`), in the flags' words."""
    field, space, rest = message.partition(" ")
    return CLIENT_FLAGS[field] + space + rest if field in CLIENT_FLAGS else message


def _oauth(integrations: Integrations) -> tuple[OAuthClients, OAuthSignIns]:
    # `open_integrations` always serves OAuth: it passes the control plane's OAuth store and its outbound client.
    assert integrations.oauth_clients is not None
    assert integrations.oauth is not None
    return integrations.oauth_clients, integrations.oauth


async def clients_add(
    settings: Settings,
    org_id: str,
    account_id: str | None,
    body: JsonObject,
    with_secret: bool,
    stdin: BinaryIO,
    tty: bool,
) -> int:
    if (problem := identity_refusal(org_id, account_id)) is not None:
        return fail(problem, 2)
    if body["owner"] == "user" and not account_id:
        return fail("--owner user needs --user, the account the client belongs to", 2)
    if with_secret:
        try:
            body = {**body, "clientSecret": read_secret_value("client secret: ", stdin, tty)}
        except SecretInputRefused as problem:
            return fail(str(problem), 2)
    try:
        async with open_service(settings) as integrations:
            record = await _oauth(integrations)[0].create(admin_principal(org_id, account_id), body)
    except IntegrationError as error:
        return refused(error, in_flags(error.message))
    kept = "its secret sealed in the secret store" if record.secret_item else "a public client (no secret)"
    print(f"added OAuth client {record.slug} ({record.grant}); {kept}", file=sys.stderr)
    print(record.slug)
    return 0


_CLIENT_COLUMNS: list[Column[JsonObject]] = [
    ("SLUG", lambda row: row["slug"]),
    ("OWNER", lambda row: row["owner"]),
    ("GRANT", lambda row: row["grant"]),
    ("CLIENT_ID", lambda row: row["clientId"]),
    ("TOKEN_URL", lambda row: row["tokenUrl"]),
    ("ORIGIN", lambda row: row["origin"]["kind"]),
]


async def clients_list(settings: Settings, org_id: str, account_id: str | None, as_json: bool = False) -> int:
    """`--json` rows are the HTTP API's (`GET /api/oauth/clients`): never a secret."""
    if (problem := identity_refusal(org_id, account_id)) is not None:
        return fail(problem, 2)
    async with open_service(settings) as integrations:
        rows = await _oauth(integrations)[0].summaries(admin_principal(org_id, account_id))
    print_listing(rows, as_json, f"no OAuth clients in organization {org_id}", _CLIENT_COLUMNS, lambda row: row)
    return 0


async def clients_remove(settings: Settings, org_id: str, account_id: str | None, owner: str, slug: str) -> int:
    """Looked up first: the service's removal is idempotent, and a mistyped slug should not read as removed."""
    if (problem := identity_refusal(org_id, account_id)) is not None:
        return fail(problem, 2)
    if owner == "user" and not account_id:
        return fail("--owner user needs --user, the account the client belongs to", 2)
    principal = admin_principal(org_id, account_id)
    try:
        async with open_service(settings) as integrations:
            clients = _oauth(integrations)[0]
            await clients.get(principal, owner, slug)
            await clients.remove(principal, owner, slug)
    except IntegrationError as error:
        return refused(error)
    print(
        f"removed OAuth client {slug}; connections made with it keep working until their next token refresh",
        file=sys.stderr,
    )
    return 0


def start_body(
    *, owner: str, name: str, integration: str, template: str, client: str, client_owner: str | None
) -> JsonObject:
    """`connections connect`'s flags as a `POST /api/oauth/start` body; the client is the connection's owner's
    unless `--client-owner` says otherwise (a user connection may sign in with the org's client)."""
    return {
        "owner": owner,
        "name": name,
        "integration": integration,
        "template": template,
        "client": client,
        "clientOwner": client_owner or owner,
    }


async def connect(settings: Settings, org_id: str, account_id: str | None, body: JsonObject, wait: bool) -> int:
    """A client-credentials client connects here and now. An authorization-code one starts a sign-in as `--user`
    and (unless `wait` is off) waits: only the running server, which the browser comes back to, can complete it."""
    if (problem := identity_refusal(org_id, account_id)) is not None:
        return fail(problem, 2)
    if body["owner"] == "user" and not account_id:
        return fail("--owner user needs --user, the account the connection belongs to", 2)
    principal = admin_principal(org_id, account_id)
    # As the server takes its `--public-url` (`PublicUrl`): the redirect URI is compared with its callback as text.
    public = settings.public_url.rstrip("/") if settings.public_url else None
    try:
        async with open_service(settings, lambda: public or "") as integrations:
            clients, signins = _oauth(integrations)
            # Checked before a sign-in is kept: one nobody can complete would only hold a place until it expires.
            client = await clients.get(principal, str(body["clientOwner"]), str(body["client"]))
            if client.grant == AUTHORIZATION_CODE and (why := _cannot_sign_in(account_id, public)) is not None:
                return fail(why, 2)
            before = await _stored(integrations.connections, principal, body)
            started = await signins.start(principal, body)
            connection = started.get("connection")
            if isinstance(connection, ConnectionRecord):
                return _connected(connection)
            _show_sign_in(str(started["authorizationUrl"]), signins.callback_url(), principal)
            if not wait:
                print("not waiting: the connection is made when the sign-in comes back to the server", file=sys.stderr)
                return 0
            return await _await_sign_in(
                integrations.connections, signins, principal, body, str(started["state"]), before
            )
    except IntegrationError as error:
        return refused(error)


def _cannot_sign_in(account_id: str | None, public: str | None) -> str | None:
    if not account_id:
        return (
            "signing in needs --user, the account signed in to the console that completes it (with --auth none: "
            "--user local)"
        )
    if public is None:
        return (
            "no public URL for the sign-in to come back to: run this while the server on this data dir runs (it is "
            "asked where it is reached), or pass the server's --public-url"
        )
    return None


def _show_sign_in(url: str, callback: str, principal: Owner) -> None:
    """The URL alone on stdout, for a script to hand on; the instructions on stderr."""
    print(
        f"open this URL in a browser signed in to the console as account {principal.account_id} of organization "
        f"{principal.org_id}; the sign-in comes back to {callback}, where the server completes it:",
        file=sys.stderr,
    )
    print(url, flush=True)


async def _stored(connections: Connections, principal: Owner, body: JsonObject) -> ConnectionRecord | None:
    try:
        return await connections.get(principal, str(body["owner"]), str(body["integration"]), str(body["name"]))
    except ConnectionNotFound:
        return None


async def _made(
    connections: Connections, principal: Owner, body: JsonObject, before: ConnectionRecord | None
) -> ConnectionRecord | None:
    """The connection the sign-in wrote: there now and not there before, or written since (a reconnect)."""
    now = await _stored(connections, principal, body)
    return now if now is not None and (before is None or now.updated_at > before.updated_at) else None


async def _appeared(
    connections: Connections, principal: Owner, body: JsonObject, before: ConnectionRecord | None
) -> ConnectionRecord:
    """Polled: another process (the server's callback) writes the connection, so no event here can say when."""
    while True:
        made = await _made(connections, principal, body, before)
        if made is not None:
            return made
        await trio.sleep(POLL_SECONDS)


async def _await_sign_in(
    connections: Connections,
    signins: OAuthSignIns,
    principal: Owner,
    body: JsonObject,
    state: str,
    before: ConnectionRecord | None,
) -> int:
    """Poll for the connection until the flow expires; SIGINT or SIGTERM cancel the flow instead (trio's
    default would raise KeyboardInterrupt wherever the wait was, and leave the flow for its ten minutes)."""
    address = f"tools.{body['integration']}.{body['owner']}.{body['name']}"
    print(f"waiting for {address} (Ctrl-C cancels the sign-in)", file=sys.stderr, flush=True)
    made: ConnectionRecord | None = None
    stopped_by: int | None = None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                nonlocal stopped_by
                async for signum in signals:
                    stopped_by = signum
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            with trio.move_on_after(FLOW_TTL):
                made = await _appeared(connections, principal, body, before)
            nursery.cancel_scope.cancel()
        if made is None:  # still under the receiver: a second Ctrl-C does not interrupt the cancelling
            await signins.cancel(principal, state)
            # A callback that completed as the flow was being cancelled made the connection: say so.
            made = await _made(connections, principal, body, before)
    if made is not None:
        return _connected(made)
    if stopped_by is not None:
        print(f"cancelled the sign-in; {address} was not connected", file=sys.stderr)
        return 128 + stopped_by
    return fail(
        f"no connection within {FLOW_TTL / 60:g} minutes: the sign-in expired (if the browser's page said the "
        "connection failed, it says why)"
    )


def _connected(record: ConnectionRecord) -> int:
    if record.missing_scopes:
        print(
            f"executor-mcp: warning: the grant lacks scopes the template asks for: {', '.join(record.missing_scopes)}",
            file=sys.stderr,
        )
    return report_saved(record, "connected")

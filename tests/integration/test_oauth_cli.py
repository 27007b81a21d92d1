"""`executor-mcp oauth-clients …` and `connections connect` as real subprocesses beside a running server on the
same data dir, against a real authorization server (`tests/oauth_provider.py`: oidc-provider, the sign-in driven
in Chromium) and an API that takes only its tokens.

A client registered by the CLI (its secret on standard input, never argv, never printed) is the one the server's
callback uses: the CLI starts the sign-in, the browser comes back to the server, which makes the connection, and
the CLI's wait ends with it. A client-credentials client connects at once; Ctrl-C cancels a sign-in."""

import json
import signal
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx
import jwt
import pytest
import trio

from executor_mcp.integrations.oauth_commands import client_body, in_flags, start_body
from executor_mcp.storage import ownership
from tests.conftest import ServerUnderTest, start_server
from tests.integration.test_oauth_connections import ResourceServer, orders_spec
from tests.integration.test_stateless_wire import call_body, result_of, send
from tests.oauth_provider import OAuthProvider, oauth_provider
from tests.process import command
from tests.upstream import Upstream, start_upstream

CLI_BOUND = 60
CALLBACK = "/api/oauth/callback"
READ = "return await tools.orders.org.{name}.orders.getOrder({{ id: '7' }});"


@attrs.define
class Running:
    """A CLI process whose output is read as it comes (the sign-in URL comes before the process ends)."""

    process: trio.Process
    stdout: bytearray = attrs.Factory(bytearray)
    stderr: bytearray = attrs.Factory(bytearray)

    async def first_line(self) -> str:
        with trio.fail_after(CLI_BOUND):
            while b"\n" not in self.stdout:
                assert self.process.poll() is None, self.stderr.decode()
                await trio.sleep(0.05)
        return self.stdout.split(b"\n", 1)[0].decode()

    async def wait(self) -> int:
        with trio.fail_after(CLI_BOUND):
            return await self.process.wait()


@attrs.frozen
class World:
    executor: ServerUnderTest
    provider: OAuthProvider
    api: Upstream
    http: httpx.AsyncClient
    discovery: dict[str, Any]
    data_dir: Path
    secrets: list[str] = attrs.Factory(list)  # every client secret handed out: no output may hold one

    @property
    def url(self) -> str:
        return self.executor.running.url

    async def cli(self, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        with trio.fail_after(CLI_BOUND):
            done = await trio.run_process(
                self._command(args), stdin=stdin, capture_stdout=True, capture_stderr=True, check=False
            )
        self.no_secret_in(done.stdout + done.stderr)
        assert b"Traceback" not in done.stderr, done.stderr.decode()
        return done

    @asynccontextmanager
    async def started(self, *args: str) -> AsyncIterator[Running]:
        """The command running until the block ends (then killed, if it has not ended by itself)."""
        process = await trio.lowlevel.open_process(
            self._command(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        running = Running(process)

        async def drain(stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
            assert stream is not None
            while chunk := await stream.receive_some():
                into.extend(chunk)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, process.stdout, running.stdout)
                nursery.start_soon(drain, process.stderr, running.stderr)
                yield running
                await running.wait()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
        self.no_secret_in(running.stdout + running.stderr)

    def _command(self, args: Sequence[str]) -> list[str]:
        return command(*args, "--data-dir", str(self.data_dir))

    def no_secret_in(self, output: bytes) -> None:
        for secret in self.secrets:
            assert secret.encode() not in output

    async def register(self, **metadata: Any) -> dict[str, Any]:
        """A confidential client registered at the provider (its id and secret, as an admin would be given
        them), for the CLI to register here. Its id may start with `-`: the commands pass `--client-id=ID`."""
        answer = await self.http.post(self.discovery["registration_endpoint"], json=metadata)
        assert answer.status_code == 201, answer.text
        registered = dict(answer.json())
        self.secrets.append(registered["client_secret"])
        return registered

    async def web_client(self, slug: str = "orders-app") -> None:
        """An authorization-code client whose redirect URI is the server's callback, added through the CLI."""
        registered = await self.register(
            redirect_uris=[self.url + CALLBACK],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="client_secret_post",
        )
        added = await self.cli(
            "oauth-clients", "add", "--slug", slug, f"--client-id={registered['client_id']}",
            "--authorization-url", self.discovery["authorization_endpoint"],
            "--token-url", self.discovery["token_endpoint"],
            "--resource", self.api.url, "--issuer", self.provider.issuer,
            stdin=registered["client_secret"].encode() + b"\n",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert added.stdout == f"{slug}\n".encode()

    async def get(self, path: str) -> Any:
        answer = await self.http.get(self.url + path)
        assert answer.status_code == 200, answer.text
        self.no_secret_in(answer.content)
        return answer.json()

    async def execute(self, code: str) -> dict[str, Any]:
        answer = result_of(await send(self.http, self.url + "/mcp", call_body(1, "execute", {"code": code})), 1)
        return dict(answer["structuredContent"])


def connect_args(name: str = "main", client: str = "orders-app") -> list[str]:
    return ["connections", "connect", "--integration", "orders", "--name", name, "--template", "oauth-oauth",
            "--client", client]  # fmt: skip


@pytest.fixture
async def world(nursery: trio.Nursery, data_dir: Path) -> AsyncIterator[World]:
    """The server with `--auth none`: its callback completes a sign-in for the local principal, account `local`
    of org `local`, which the CLI's `--user local` starts it as (the default `--org`)."""
    async with oauth_provider() as provider, httpx.AsyncClient(timeout=30) as http:
        discovery = (await http.get(provider.issuer + "/.well-known/openid-configuration")).json()
        resource = ResourceServer(provider.issuer)
        resource.keys = jwt.PyJWKSet.from_dict((await http.get(discovery["jwks_uri"])).json())
        resource.upstream = await start_upstream(nursery, resource.respond)
        executor = await start_server(nursery, data_dir, allow_local_network=True)
        spec = orders_spec(resource.upstream.url, discovery["authorization_endpoint"], discovery["token_endpoint"])
        added = await http.post(
            executor.running.url + "/api/openapi/specs",
            json={"spec": {"kind": "blob", "value": json.dumps(spec)}, "slug": "orders"},
        )
        assert added.status_code == 200, added.text
        yield World(executor, provider, resource.upstream, http, discovery, data_dir)
        await executor.stop()


@pytest.mark.slow  # a browser sign-in and half a dozen CLI processes
async def test_oauth_cli_adds_a_client_and_connects_through_the_servers_callback(world: World) -> None:
    await world.web_client()
    listed = await world.cli("oauth-clients", "list")
    header, row = listed.stdout.decode().splitlines()
    assert header.split("\t") == ["SLUG", "OWNER", "GRANT", "CLIENT_ID", "TOKEN_URL", "ORIGIN"]
    (client,) = await world.get("/api/oauth/clients")
    token_url = world.discovery["token_endpoint"]
    assert row.split("\t") == ["orders-app", "org", "authorization_code", client["clientId"], token_url, "manual"]
    assert json.loads((await world.cli("oauth-clients", "list", "--json")).stdout) == [client]

    async with world.started(*connect_args(), "--user", "local", "--public-url", world.url) as connecting:
        url = await connecting.first_line()
        assert url.startswith(world.discovery["authorization_endpoint"] + "?")
        assert parse_qs(urlsplit(url).query)["redirect_uri"] == [world.url + CALLBACK]
        landed = await world.provider.sign_in(url, "alice@acme.test", follow=True)
        assert landed.startswith(world.url + CALLBACK + "?")
    assert connecting.process.returncode == 0, connecting.stderr.decode()
    assert connecting.stdout.decode().splitlines() == [url, "tools.orders.org.main"]
    assert b"signed in to the console as account local of organization local" in connecting.stderr
    assert connecting.stderr.decode().endswith("connected connection tools.orders.org.main\n")

    (made,) = await world.get("/api/connections")
    assert (made["address"], made["oauthClient"], made["oauthClientOwner"]) == (
        "tools.orders.org.main",
        "orders-app",
        "org",
    )
    result = await world.execute(READ.format(name="main"))
    assert result["result"]["data"] == {"id": "7", "sub": "alice@acme.test"}, result


@pytest.mark.slow  # three browser sign-ins
async def test_oauth_cli_ctrl_c_cancels_the_sign_in_and_no_wait_leaves_it_to_the_server(world: World) -> None:
    await world.web_client()
    signing_in = [*connect_args(), "--user", "local", "--public-url", world.url]
    async with world.started(*signing_in) as cancelled:
        url = await cancelled.first_line()
        with trio.fail_after(CLI_BOUND):
            # Another process's output: nothing here can be awaited for it.
            while b"Ctrl-C cancels" not in cancelled.stderr:  # noqa: ASYNC110
                await trio.sleep(0.05)
        cancelled.process.send_signal(signal.SIGINT)
    assert cancelled.process.returncode == 128 + signal.SIGINT, cancelled.stderr.decode()
    assert b"cancelled the sign-in; tools.orders.org.main was not connected" in cancelled.stderr
    await world.provider.sign_in(url, "alice@acme.test", follow=True)  # the callback finds no sign-in
    assert await world.get("/api/connections") == []

    left = await world.cli(*signing_in, "--no-wait")
    assert left.returncode == 0, left.stderr
    await world.provider.sign_in(left.stdout.decode().strip(), "alice@acme.test", follow=True)
    (made,) = await world.get("/api/connections")
    assert made["address"] == "tools.orders.org.main"

    # A reconnect: the wait ends when the connection is written again, not at once because it exists.
    async with world.started(*signing_in) as reconnecting:
        url = await reconnecting.first_line()
        await trio.sleep(1.5)  # a wait that took the existing connection for the new one would have ended
        assert reconnecting.process.poll() is None
        await world.provider.sign_in(url, "alice@acme.test", follow=True)
    assert reconnecting.process.returncode == 0, reconnecting.stderr.decode()
    assert reconnecting.stdout.decode().splitlines() == [url, "tools.orders.org.main"]
    (again,) = await world.get("/api/connections")
    assert again["expiresAt"] > made["expiresAt"]  # the new grant's token


async def test_oauth_cli_a_client_credentials_client_connects_at_once(world: World) -> None:
    registered = await world.register(
        grant_types=["client_credentials"], response_types=[], token_endpoint_auth_method="client_secret_basic"
    )
    added = await world.cli(
        "oauth-clients", "add", "--slug", "machine", "--grant", "client_credentials",
        f"--client-id={registered['client_id']}", "--token-url", world.discovery["token_endpoint"],
        "--resource", world.api.url, "--token-auth-method", "client_secret_basic",
        stdin=registered["client_secret"].encode(),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    # No --user and no public URL: neither is needed where no browser signs in.
    connected = await world.cli(*connect_args("robot", "machine"))
    assert connected.returncode == 0, connected.stderr
    assert connected.stdout == b"tools.orders.org.robot\n"
    result = await world.execute(READ.format(name="robot"))
    assert result["result"]["ok"] is True, result
    (request,) = world.api.calls("/orders/7")
    assert request.headers["authorization"].startswith("Bearer ey")
    removed = await world.cli("oauth-clients", "remove", "machine")
    assert removed.returncode == 0, removed.stderr
    assert await world.get("/api/oauth/clients") == []


@pytest.mark.slow  # a dozen CLI processes
async def test_oauth_cli_refusals_are_one_line_and_leave_nothing_behind(world: World) -> None:
    unknown = await world.cli(*connect_args(client="nope"), "--user", "local", "--public-url", world.url)
    assert unknown.returncode == 2
    assert unknown.stderr == b"executor-mcp: error: OAuth client not found: nope\n"

    await world.web_client()
    # The in-process server has announced no address in the data dir's lock file: nothing says where it is.
    nowhere = await world.cli(*connect_args(), "--user", "local")
    assert nowhere.returncode == 2
    assert b"no public URL for the sign-in to come back to" in nowhere.stderr
    ownership.announce(world.data_dir, world.url)  # as `serve` does once it listens
    asked = await world.cli(*connect_args(), "--user", "local", "--no-wait")
    assert asked.returncode == 0, asked.stderr
    assert parse_qs(urlsplit(asked.stdout.decode().strip()).query)["redirect_uri"] == [world.url + CALLBACK]
    nobody = await world.cli(*connect_args(), "--public-url", world.url)
    assert nobody.returncode == 2
    assert b"signing in needs --user" in nobody.stderr
    not_oauth = await world.cli(*connect_args(), "--template", "none", "--user", "local", "--public-url", world.url)
    assert not_oauth.returncode == 2
    assert b'Template "none" of orders is not an OAuth method' in not_oauth.stderr

    base = ["oauth-clients", "add", "--slug", "other", "--client-id", "c", "--grant", "client_credentials"]
    plain = await world.cli(*base, "--token-url", "ftp://tokens.example/token", stdin=b"s3cret")
    assert plain.returncode == 2
    assert plain.stderr == b"executor-mcp: error: --token-url must be https (or http on a loopback host)\n"
    empty = await world.cli(*base, "--token-url", world.discovery["token_endpoint"], stdin=b"")
    assert empty.returncode == 2
    assert b"empty" in empty.stderr
    in_argv = await world.cli(*base, "--token-url", world.discovery["token_endpoint"], "--client-secret", "s3cret")
    assert in_argv.returncode == 2
    gone = await world.cli("oauth-clients", "remove", "other")
    assert (gone.returncode, gone.stderr) == (2, b"executor-mcp: error: OAuth client not found: other\n")
    assert [client["slug"] for client in await world.get("/api/oauth/clients")] == ["orders-app"]
    assert await world.get("/api/connections") == []


def test_oauth_cli_flags_map_onto_the_apis_bodies_and_its_refusals_onto_the_flags() -> None:
    assert client_body(
        owner="org",
        slug="app",
        grant="authorization_code",
        client_id="id",
        authorization_url="https://as.example/authorize",
        token_url="https://as.example/token",
        resource=None,
        issuer=None,
        token_auth_method=None,
    ) == {
        "owner": "org",
        "slug": "app",
        "grant": "authorization_code",
        "clientId": "id",
        "tokenUrl": "https://as.example/token",
        "authorizationUrl": "https://as.example/authorize",
    }
    flags = {"owner": "user", "name": "main", "integration": "orders", "template": "t", "client": "app"}
    # The connection's owner's client, unless --client-owner says otherwise.
    assert start_body(**flags, client_owner=None) == {**flags, "clientOwner": "user"}
    assert start_body(**flags, client_owner="org")["clientOwner"] == "org"
    assert in_flags("tokenUrl must be https") == "--token-url must be https"
    assert in_flags("authorizationUrl must be a non-empty string") == "--authorization-url must be a non-empty string"
    assert in_flags("OAuth client not found: x") == "OAuth client not found: x"

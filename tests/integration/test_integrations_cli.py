"""`executor-mcp integrations …` and `connections …` as real subprocesses beside a running server on the same
data dir: what they write, the server serves; a secret goes in through standard input, never argv, and no
output holds it."""

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
import trio

from tests.conftest import ServerUnderTest, start_server
from tests.integration.test_integrations_api import items_spec, warehouse
from tests.process import command
from tests.sdk import connect
from tests.upstream import Upstream, start_upstream

SECRET = "sk-cli-5d4c3b2a1908f7e6"
CLI_BOUND = 60


async def cli(
    data_dir: Path, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(CLI_BOUND):
        done = await trio.run_process(
            command(*args, "--data-dir", str(data_dir)),
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, **(env or {})},
        )
    assert SECRET.encode() not in done.stdout + done.stderr
    return done


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, warehouse)


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


@pytest.fixture
def spec_file(tmp_path: Path, upstream: Upstream) -> Path:
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items_spec(upstream.url)))
    return path


async def get(http: httpx.AsyncClient, server: ServerUnderTest, path: str, status: int = 200) -> object:
    response = await http.get(server.running.url + path)
    assert response.status_code == status, response.text
    assert SECRET not in response.text
    return response.json()


@pytest.mark.slow  # a dozen CLI processes, about 0.7 s each
async def test_an_integration_and_a_connection_added_by_the_cli_are_served(
    executor: ServerUnderTest, upstream: Upstream, spec_file: Path, http: httpx.AsyncClient, data_dir: Path
) -> None:
    added = await cli(data_dir, "integrations", "add-openapi", "--slug", "items", "--file", str(spec_file))
    assert added.returncode == 0, added.stderr
    assert added.stdout == b"items\n"
    assert b"2 tools" in added.stderr
    assert b"apikey-0" in added.stderr
    assert [row["slug"] for row in await get(http, executor, "/api/integrations")] == ["executor", "items"]

    connected = await cli(
        data_dir,
        "connections", "add", "--integration", "items", "--name", "Main Key", "--template", "apikey-0",
        stdin=SECRET.encode() + b"\n",
    )  # fmt: skip
    assert connected.returncode == 0, connected.stderr
    assert connected.stdout == b"tools.items.org.mainKey\n"
    (row,) = await get(http, executor, "/api/connections")
    assert row["address"] == "tools.items.org.mainKey"
    async with connect(executor.url, mode="legacy") as (client, _):
        result = await client.call_tool(
            "execute", {"code": 'return await tools.items.org.mainKey.items.getItem({ itemId: "9" });'}
        )
    assert result.structured_content["result"]["data"] == {"id": "9", "name": "bolt"}
    (request,) = upstream.calls("/items")
    assert request.headers["x-api-key"] == SECRET

    listed = await cli(data_dir, "connections", "list", "--integration", "items")
    header, row = listed.stdout.decode().splitlines()
    assert header.split() == ["ADDRESS", "TEMPLATE", "PROVIDER", "DESCRIPTION"]
    assert row.split() == ["tools.items.org.mainKey", "apikey-0", "encrypted", "-"]
    shown = await cli(data_dir, "integrations", "show", "items")
    assert shown.stdout.decode().splitlines() == [
        "slug         items",
        "name         Items API",
        "kind         openapi",
        "source       -",  # a spec from a file, calling the servers it names: no URL was given
        "description  Items of the warehouse.",
        "tools        2",
        "template     apikey-0: API key (x-api-key); inputs: token (header x-api-key)",
        "template     none: no credential",
    ]
    as_json = await cli(data_dir, "integrations", "show", "items", "--json")
    assert json.loads(as_json.stdout) == await get(http, executor, "/api/integrations/items")
    integrations = (await cli(data_dir, "integrations", "list")).stdout.decode().splitlines()
    assert [line.split()[:3] for line in integrations] == [["SLUG", "KIND", "NAME"], ["items", "openapi", "Items"]]

    # A connection is named as `connections list` prints it, not as the HTTP API's path names it.
    path_form = await cli(data_dir, "connections", "remove", "org/items/mainKey")
    assert path_form.returncode == 2
    assert b"tools.INTEGRATION.OWNER.NAME" in path_form.stderr
    removed = await cli(data_dir, "connections", "remove", row.split()[0])
    assert removed.returncode == 0, removed.stderr
    await get(http, executor, "/api/connections/org/items/mainKey", status=404)
    again = await cli(data_dir, "connections", "remove", "tools.items.org.mainKey")
    assert again.returncode == 1
    assert b"Connection not found" in again.stderr


async def test_connections_add_never_takes_a_value_from_argv(
    executor: ServerUnderTest, spec_file: Path, http: httpx.AsyncClient, data_dir: Path
) -> None:
    assert (
        await cli(data_dir, "integrations", "add-openapi", "--slug", "items", "--file", str(spec_file))
    ).returncode == 0
    base = ["connections", "add", "--integration", "items", "--name", "main", "--template", "apikey-0"]
    for smuggled in (["--value", "sk-in-argv"], ["--values", "sk-in-argv"], ["sk-in-argv"]):
        refused = await cli(data_dir, *base, *smuggled, stdin=b"from-stdin")
        assert refused.returncode == 2
    empty = await cli(data_dir, *base, stdin=b"")
    assert empty.returncode == 2
    assert b"empty" in empty.stderr
    assert await get(http, executor, "/api/connections") == []


async def test_several_inputs_one_line_each_and_a_user_connection(
    executor: ServerUnderTest, upstream: Upstream, spec_file: Path, http: httpx.AsyncClient, data_dir: Path
) -> None:
    added = await cli(
        data_dir,
        "integrations", "add-openapi", "--slug", "items", "--file", str(spec_file),
        "--auth-header", "Authorization:Bearer ", "--auth-header", "X-App-Key",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    (method,) = (await get(http, executor, "/api/integrations/items"))["authMethods"]
    assert method["template"] == "apikey"
    assert method["placements"] == [
        {"carrier": "header", "name": "Authorization", "prefix": "Bearer "},
        {"carrier": "header", "name": "X-App-Key", "prefix": "", "variable": "x_app_key"},
    ]
    connected = await cli(
        data_dir,
        "connections", "add", "--integration", "items", "--name", "mine", "--owner", "user", "--user", "local",
        "--template", "apikey", "--input", "token", "--input", "x_app_key",
        stdin=f"{SECRET}\napp-{SECRET}\n".encode(),
    )  # fmt: skip
    assert connected.returncode == 0, connected.stderr
    assert [row["address"] for row in await get(http, executor, "/api/connections?owner=user")] == [
        "tools.items.user.mine"
    ]
    async with connect(executor.url, mode="legacy") as (client, _):
        await client.call_tool(
            "execute", {"code": 'return await tools.items.user.mine.items.getItem({ itemId: "1" });'}
        )
    (request,) = upstream.calls("/items")
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert request.headers["x-app-key"] == f"app-{SECRET}"
    no_user = await cli(
        data_dir,
        "connections", "add", "--integration", "items", "--name", "x", "--owner", "user", "--template", "none",
    )  # fmt: skip
    assert no_user.returncode == 2


@pytest.mark.slow  # a dozen CLI processes, about 0.7 s each
async def test_update_and_remove_an_integration(
    executor: ServerUnderTest,
    upstream: Upstream,
    spec_file: Path,
    tmp_path: Path,
    http: httpx.AsyncClient,
    data_dir: Path,
) -> None:
    url = upstream.url + "/spec"
    # The server on this data dir reaches the local network, so its commands do too, with no flag of their own.
    added = await cli(data_dir, "integrations", "add-openapi", "--slug", "items", "--url", url)
    assert added.returncode == 0, added.stderr
    assert (await get(http, executor, "/api/integrations/items"))["canRefresh"] is True

    extra = {
        "/stock": {"get": {"operationId": "listStock", "tags": ["stock"], "responses": {"200": {"description": "ok"}}}}
    }
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(items_spec(upstream.url, extra_paths=extra)))
    updated = await cli(data_dir, "integrations", "update", "items", "--file", str(newer))
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout)["addedTools"] == ["stock.listStock"]
    refetched = await cli(data_dir, "integrations", "update", "items")
    assert json.loads(refetched.stdout)["removedTools"] == ["stock.listStock"]

    removed = await cli(data_dir, "integrations", "remove", "items")
    assert removed.returncode == 0, removed.stderr
    await get(http, executor, "/api/integrations/items", status=404)
    missing = await cli(data_dir, "integrations", "remove", "items")
    assert missing.returncode == 1
    built_in = await cli(data_dir, "integrations", "remove", "executor")
    assert built_in.returncode == 1


async def test_an_unknown_template_is_refused_before_a_value_is_read(
    executor: ServerUnderTest, spec_file: Path, http: httpx.AsyncClient, data_dir: Path
) -> None:
    """A typo used to be saved: every call then went out without the credential and failed as rejected."""
    added = await cli(data_dir, "integrations", "add-openapi", "--slug", "items", "--file", str(spec_file))
    assert added.returncode == 0, added.stderr
    # Nothing on standard input: had the value been read first, the refusal would be about that.
    typo = await cli(
        data_dir, "connections", "add", "--integration", "items", "--name", "main", "--template", "apikey-9"
    )
    assert typo.returncode == 2
    assert typo.stderr.decode().endswith(
        'executor-mcp: error: unknown template "apikey-9" for integration "items"; valid templates: apikey-0, none\n'
    )
    assert await get(http, executor, "/api/connections") == []


LOCAL_OPTION = (
    b"Local and private network addresses are not allowed: 127.0.0.1; "
    b"the server allows local addresses with --allow-local-network"
)


@pytest.mark.slow  # CLI processes and two servers, one after the other
async def test_commands_on_a_data_dir_see_what_its_server_allows(
    nursery: trio.Nursery, upstream: Upstream, tmp_path: Path
) -> None:
    """`--allow-local-network` used to hold for the server's process only: its admin commands refused what it
    served. What the data dir's records may do is one fact, the server's, unless a command sets it itself."""
    data_dir = tmp_path / "shared"
    url = upstream.url + "/spec"
    alone = await cli(data_dir, "integrations", "add-openapi", "--slug", "items", "--url", url)
    assert alone.returncode == 2
    assert LOCAL_OPTION in alone.stderr  # no server has said otherwise: the refusal names the option

    server = await start_server(nursery, data_dir, allow_local_network=True, allow_stdio_mcp=True)
    added = await cli(data_dir, "integrations", "add-openapi", "--slug", "items", "--url", url)
    assert added.returncode == 0, added.stderr
    local = await cli(data_dir, "integrations", "add-mcp", "--name", "Local", "--command", "/bin/true")
    assert local.returncode == 0, local.stderr
    own = await cli(data_dir, "integrations", "update", "items", env={"EXECUTOR_MCP_ALLOW_LOCAL_NETWORK": "false"})
    assert own.returncode == 2  # a command's own setting wins
    assert LOCAL_OPTION in own.stderr

    await server.stop()
    await start_server(nursery, data_dir)
    refetched = await cli(data_dir, "integrations", "update", "items")
    assert refetched.returncode == 2
    assert LOCAL_OPTION in refetched.stderr
    stdio = await cli(data_dir, "integrations", "add-mcp", "--name", "Other", "--command", "/bin/true")
    assert stdio.returncode == 2
    assert b"--allow-stdio-mcp" in stdio.stderr

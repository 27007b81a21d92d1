"""Moving up: a single-node install's control plane moved into PostgreSQL by `executor-mcp migrate --from-lmdb`,
and an instance on the database then serving what the install served: its API key, its rule, its connection's
secret, its audit log, its console cookie and its unopened sign-in link. The move refuses a served data dir and
a database that holds records."""

import json
from pathlib import Path

import httpx
import pytest
import trio

from executor_mcp.config import SECRET_KEY_ENV
from executor_mcp.secrets.cipher import KEY_FILE, SecretCipher
from executor_mcp.storage.control import ControlPlane
from tests.conftest import ServerUnderTest, jwt_server
from tests.integration.test_cli_operations import cli
from tests.integration.test_integrations_api import SECRET, blob, warehouse
from tests.postgres import PostgresServer
from tests.sdk import connect, text_of
from tests.upstream import Upstream, start_upstream

pytestmark = pytest.mark.slow

GET_ITEM = 'return await tools.items.org.main.items.getItem({ itemId: "7" });'
CALL_POLICIES = "return await tools.executor.coreTools.policies.list({});"
AUDIT_BOUND = 10.0


async def execute(server: ServerUnderTest, key: str, code: str) -> str:
    async with connect(server.url, headers={"authorization": f"Bearer {key}"}, mode="legacy") as (client, _):
        return text_of(await client.call_tool("execute", {"code": code}))


async def api(http: httpx.AsyncClient, server: ServerUnderTest, key: str, method: str, path: str, body=None):
    response = await http.request(
        method, server.running.url + path, json=body, headers={"authorization": f"Bearer {key}"}
    )
    assert response.status_code in (200, 201), (response.status_code, response.text)
    return response.json()


async def audit_ids(http: httpx.AsyncClient, server: ServerUnderTest, key: str, at_least: int) -> set[str]:
    """The audit log's records (each as its JSON text), once it lists `at_least` (the trail writes in
    batches)."""
    with trio.fail_after(AUDIT_BOUND):
        while True:
            items = (await api(http, server, key, "GET", "/api/audit"))["items"]
            if len(items) >= at_least:
                return {json.dumps(item, sort_keys=True) for item in items}
            await trio.sleep(0.1)


async def console_link(data_dir: Path, base: str) -> str:
    made = await cli(
        "console-link", "--user", "alice", "--org", "acme", "--data-dir", str(data_dir), "--public-url", base
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.decode().strip()


async def test_an_install_moves_into_postgres_whole(
    nursery: trio.Nursery,
    tmp_path: Path,
    postgres: PostgresServer,
    http: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream: Upstream = await start_upstream(nursery, warehouse)
    data_dir = tmp_path / "single-node"
    single = await jwt_server(nursery, data_dir, tmp_path, allow_local_network=True)
    created = await cli("keys", "create", "--user", "alice", "--org", "acme", "--data-dir", str(data_dir))
    assert created.returncode == 0, created.stderr
    key = created.stdout.decode().strip()

    added = await api(http, single, key, "POST", "/api/openapi/specs", {"spec": blob(upstream), "slug": "items"})
    assert added == {"slug": "items", "toolCount": 2}
    connection = {"owner": "org", "name": "main", "integration": "items", "template": "apikey-0", "value": SECRET}
    await api(http, single, key, "POST", "/api/connections", connection)
    assert json.loads(await execute(single, key, GET_ITEM))["data"] == {"id": "7", "name": "bolt"}
    ruled = await cli(
        "policies", "add", "--org", "acme", "--pattern", "executor.coreTools.policies.list", "--action", "block",
        "--data-dir", str(data_dir),
    )  # fmt: skip
    assert ruled.returncode == 0, ruled.stderr
    audited = await audit_ids(http, single, key, 1)
    signed = await http.post(
        await console_link(data_dir, single.running.url), json={}, headers={"origin": single.running.url}
    )
    assert signed.status_code == 200, signed.text
    cookie = signed.headers["set-cookie"].split(";")[0]
    unopened = await console_link(data_dir, single.running.url)

    monkeypatch.setenv(SECRET_KEY_ENV, (data_dir / KEY_FILE).read_text().strip())
    url = postgres.new_database()
    served = await cli("migrate", "--from-lmdb", str(data_dir), "--database-url", url)
    assert served.returncode == 1
    assert "in use by another executor-mcp server" in served.stderr.decode()
    assert served.stdout == b""  # nothing done, not even the schema
    await single.stop()

    moved = await cli("migrate", "--from-lmdb", str(data_dir), "--database-url", url)
    assert moved.returncode == 0, moved.stderr
    table = [line.split() for line in moved.stdout.decode().splitlines()]
    assert table[0][0] == "applied"
    rows = {row[0]: row[1:] for row in table[1:]}
    assert rows["DOMAIN"] == ["RECORDS", "VERIFIED"]
    for domain in ("orgs", "api_keys", "policies", "audit", "signing_keys", "console_links", "catalog", "secrets"):
        assert rows[domain][1] == "yes", moved.stdout
        assert int(rows[domain][0]) > 0, moved.stdout
    assert rows["sessions"][1:3] == ["not", "moved:"]
    assert SECRET_KEY_ENV in moved.stdout.decode()

    again = await cli("migrate", "--from-lmdb", str(data_dir), "--database-url", url)
    assert again.returncode == 1
    assert "the target already holds records" in again.stderr.decode()

    instance = await jwt_server(
        nursery, tmp_path / "instance-a", tmp_path, allow_local_network=True, database_url=url, instance_id="a"
    )
    # The API key authenticates, the connection's secret reaches the upstream, the rule governs.
    assert json.loads(await execute(instance, key, GET_ITEM))["data"] == {"id": "7", "name": "bolt"}
    assert [request.headers["x-api-key"] for request in upstream.calls("/items")] == [SECRET, SECRET]
    blocked = json.loads(await execute(instance, key, CALL_POLICIES))
    assert (blocked["ok"], blocked["error"]["code"]) == (False, "tool_blocked")
    # The audit log holds the install's records, and the new ones after them.
    assert audited < await audit_ids(http, instance, key, len(audited) + 1)
    # The console key moved: a cookie signed by the install still signs in; so does a link made there.
    base = instance.running.url
    home = await http.get(f"{base}/", headers={"cookie": cookie})
    assert "<code>alice</code>" in home.text
    token = unopened.rsplit("/", 1)[1]
    used = await http.post(f"{base}/signin/link/{token}", json={}, headers={"origin": base})
    assert used.status_code == 200, used.text
    await instance.stop()


async def test_the_move_needs_the_key_that_opens_the_secrets(
    nursery: trio.Nursery, tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "single-node"
    single = await jwt_server(nursery, data_dir, tmp_path)
    await single.stop()
    url = postgres.new_database()
    monkeypatch.delenv(SECRET_KEY_ENV, raising=False)
    unset = await cli("migrate", "--from-lmdb", str(data_dir), "--database-url", url)
    assert unset.returncode == 2
    assert f"set {SECRET_KEY_ENV} to the content of {data_dir / KEY_FILE}" in unset.stderr.decode()
    missing = await cli("migrate", "--from-lmdb", str(tmp_path / "nowhere"), "--database-url", url)
    assert missing.returncode == 2
    assert "not a data dir" in missing.stderr.decode()

    plane = await ControlPlane.open(data_dir)
    try:
        sealed = SecretCipher.derive((data_dir / KEY_FILE).read_bytes().strip()).encrypt("a token")
        await plane.secrets.put_secret_items("acme", "", {"token": sealed})
    finally:
        await plane.close()
    monkeypatch.setenv(SECRET_KEY_ENV, "another key")
    wrong = await cli("migrate", "--from-lmdb", str(data_dir), "--database-url", url)
    assert wrong.returncode == 1
    assert f"{SECRET_KEY_ENV} does not open {data_dir}'s stored secrets" in wrong.stderr.decode()
    monkeypatch.setenv(SECRET_KEY_ENV, (data_dir / KEY_FILE).read_text())
    right = await cli("migrate", "--from-lmdb", str(data_dir), "--database-url", url)
    assert right.returncode == 0, right.stderr

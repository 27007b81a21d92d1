"""A PostgreSQL outage under a running `serve --database-url`, every part real: a PostgreSQL of the test's own
(`tests/postgres.py`), stopped and started again under the server. While it is down `/readyz` fails naming the
database, requests get the transient envelope (503 -32001, `Retry-After: 2`) over `/mcp` and the JSON API, and
nothing is acknowledged; the log says so in lines, never a traceback or the URL. When it is back the instance is
ready again within seconds, serves requests, and every write acknowledged before the outage is there, the audit
records of the calls made just before it included."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from executor_mcp.config import SECRET_KEY_ENV
from executor_mcp.storage.interfaces import StoreUnavailable
from executor_mcp.storage.postgres.database import Database
from tests.auth_support import SECRET, bearer, mint
from tests.integration.test_cli_operations import free_port
from tests.mcp_http import envelope, initialize_body, open_session, post, sse_messages
from tests.postgres import PostgresServer, postgres_server
from tests.process import server_process

pytestmark = pytest.mark.slow

CALL = "return (await tools.executor.coreTools.policies.list({})).data.policies.length;"
RULE = {"owner": "org", "pattern": "github.*", "action": "block"}
DOWN = (503, -32001, "The database is unavailable, please retry")
BACK_BOUND = 5.0  # how soon after PostgreSQL returns the instance is ready and its held audit records written
CALLS = 3
WHOLE = "return await tools.executor.coreTools.policies.list({});"


@pytest.fixture
def database() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


async def execute(http: httpx.AsyncClient, mcp: str, session_id: str, code: str = CALL) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": code}},
    }
    return await post(http, mcp, body, session_id)


async def ready(http: httpx.AsyncClient, base: str) -> httpx.Response:
    return await http.get(base + "/readyz")


async def audited(http: httpx.AsyncClient, base: str, session_id: str) -> int:
    items = (await http.get(base + "/api/audit", params={"limit": 100})).json()["items"]
    return sum(item["sessionId"] == session_id for item in items)


async def test_an_outage_answers_the_transient_envelope_and_loses_no_acknowledged_write(
    database: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_KEY_ENV, "the shared key")
    url = database.new_database()
    async with (
        server_process(tmp_path / "a", "--database-url", url, "--instance-id", "a") as server,
        httpx.AsyncClient(timeout=30) as http,
    ):
        base = server.url.removesuffix("/mcp")
        assert (await ready(http, base)).status_code == 200
        scraped = (await http.get(base + "/metrics")).text
        assert 'executor_mcp_database_connections{state="idle"}' in scraped
        assert 'executor_mcp_database_connections{state="waiting"} 0.0' in scraped

        session_id = await open_session(http, server.url)
        created = await http.post(base + "/api/policies", json=RULE)
        assert created.status_code in (200, 201), created.text
        for _ in range(CALLS):
            answered = await execute(http, server.url, session_id)
            assert answered.status_code == 200, answered.text
        # At once, while the audit trail may still hold the calls' records: they must survive the outage.
        database.stop("fast")

        refused = await ready(http, base)
        assert refused.status_code == 503
        verdict = refused.json()["checks"]["database"]
        assert verdict != "ok"
        assert url not in verdict

        fresh = await post(http, server.url, initialize_body())
        assert envelope(fresh) == DOWN
        assert fresh.headers["retry-after"] == "2"
        assert "mcp-session-id" not in fresh.headers
        write = await http.post(base + "/api/policies", json={**RULE, "pattern": "slack.*"})
        assert (write.status_code, write.json()) == (503, {"error": DOWN[2]})
        assert write.headers["retry-after"] == "2"
        listed = await http.get(base + "/api/policies")
        assert listed.status_code == 503
        # The session already open stays open: a tool call that needs the database fails as a value the code
        # can inspect and retry (its audit record held until the database is back).
        during = await execute(http, server.url, session_id, WHOLE)
        failed = result_of(during)["structuredContent"]["result"]
        assert failed == {"ok": False, "error": {"code": "database_unavailable", "message": DOWN[2]}}
        scraped = await http.get(base + "/metrics")
        assert scraped.status_code == 200
        assert "executor_mcp_database_connections" in scraped.text

        database.start()
        with trio.fail_after(BACK_BOUND):
            while (await ready(http, base)).status_code != 200:  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert envelope_free(await post(http, server.url, initialize_body()))
        again = await http.post(base + "/api/policies", json={**RULE, "pattern": "jira.*"})
        assert again.status_code in (200, 201), again.text
        patterns = {item["pattern"] for item in (await http.get(base + "/api/policies")).json()}
        assert {"github.*", "jira.*"} <= patterns
        assert "slack.*" not in patterns  # refused with 503: not acknowledged, not written
        with trio.fail_after(BACK_BOUND):
            while await audited(http, base, session_id) < CALLS + 1:  # noqa: ASYNC110
                await trio.sleep(0.1)
        answered = await execute(http, server.url, session_id)
        assert answered.status_code == 200
        assert result_of(answered)["structuredContent"] == {"status": "completed", "result": 2, "logs": []}

        server.terminate()  # a graceful stop, whose log is checked too
        assert await server.wait() == 0
        said = server.stderr.decode(errors="replace")
        assert "Traceback" not in said, said
        assert url not in said
        assert "The database is unavailable" in said or "the database is unavailable" in said


def result_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return next(m for m in sse_messages(response.text) if m.get("id") == 7)["result"]


def envelope_free(response: httpx.Response) -> bool:
    return response.status_code == 200 and "mcp-session-id" in response.headers


async def test_the_pool_survives_a_restart_between_transactions_and_says_what_it_holds(
    database: PostgresServer,
) -> None:
    pool = await Database.open(database.new_database(), size=3)
    try:

        async def hold(entered: trio.Event, release: trio.Event) -> None:
            def work(connection: Any) -> None:
                trio.from_thread.run_sync(entered.set)
                trio.from_thread.run(release.wait)

            await pool.transact(work)

        async with trio.open_nursery() as nursery:
            release = trio.Event()
            for _ in range(3):
                entered = trio.Event()
                nursery.start_soon(hold, entered, release)
                await entered.wait()
            nursery.start_soon(pool.transact, lambda connection: connection.execute("SELECT 1"))
            await trio.testing.wait_all_tasks_blocked()
            assert attrs.asdict(pool.stats()) == {"idle": 0, "in_use": 3, "waiting": 1}
            release.set()
        assert attrs.asdict(pool.stats()) == {"idle": 3, "in_use": 0, "waiting": 0}

        database.stop("fast")
        with pytest.raises(StoreUnavailable) as down:
            await pool.transact(lambda connection: connection.execute("SELECT 1"))
        assert "the database is unavailable" in str(down.value)
        assert (await pool.ping(2.0)).startswith("the database is unavailable")
        database.start()
        # The pooled connections the restart cut are replaced, not each answered with a 503.
        for _ in range(4):
            assert await pool.transact(lambda connection: connection.execute("SELECT 7").fetchone()) == (7,)
        assert await pool.ping(2.0) == "ok"
    finally:
        await pool.close()


async def test_readiness_is_bounded_when_the_database_never_answers() -> None:
    """A server that accepts connections and says nothing (a hung host, a black-holed route) fails the check
    within its bound rather than holding `/readyz`."""
    with trio.socket.socket() as silent:
        await silent.bind(("127.0.0.1", free_port()))
        silent.listen(8)
        host, port = silent.getsockname()
        pool = Database(f"postgresql://nobody:secret-word@{host}:{port}/none", size=1)
        started = trio.current_time()
        verdict = await pool.ping(1.0)
        assert trio.current_time() - started < 1.5
        assert verdict == "the database did not answer within 1 s"


async def test_with_bearer_auth_an_outage_is_the_transient_auth_envelope(
    database: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `--auth jwt` every request first asks the database whether its org is live: the outage is then
    "verification is temporarily impossible", the same 503 -32001 with `Retry-After: 2`, said in one log line."""
    monkeypatch.setenv(SECRET_KEY_ENV, "the shared key")
    (tmp_path / "jwt-secret").write_bytes(SECRET)
    alice = bearer(mint("alice", "acme", expires_in=3600))
    url = database.new_database()
    arguments = ("--database-url", url, "--instance-id", "a", "--auth", "jwt", "--jwt-secret-file")
    async with (
        server_process(tmp_path / "a", *arguments, str(tmp_path / "jwt-secret")) as server,
        httpx.AsyncClient(timeout=30) as http,
    ):
        base = server.url.removesuffix("/mcp")
        assert (await post(http, server.url, initialize_body(), **alice)).status_code == 200
        database.stop("fast")
        fresh = await post(http, server.url, initialize_body(), **alice)
        assert envelope(fresh)[:2] == (503, -32001)
        assert fresh.headers["retry-after"] == "2"
        write = await http.post(base + "/api/policies", json=RULE, headers=alice)
        assert (write.status_code, write.headers["retry-after"]) == (503, "2")
        database.start()
        with trio.fail_after(BACK_BOUND):
            while (await post(http, server.url, initialize_body(), **alice)).status_code != 200:  # noqa: ASYNC110
                await trio.sleep(0.1)
        server.terminate()
        assert await server.wait() == 0
        said = server.stderr.decode(errors="replace")
        assert "Traceback" not in said, said
        assert url not in said

"""Two instances on one PostgreSQL database behind a proxy, every part real: `executor-mcp serve` processes
(`--database-url`, `--instance-id`), Debian's PostgreSQL (`tests/postgres.py`), and nginx (`tests/nginx.py`) or
HAProxy (`tests/haproxy.py`) running the configuration `executor-mcp proxy-config` prints. Sessions are served by
their home through the proxy; a request on the wrong instance hears the restart envelope, never gets a new
session; a policy written through one instance governs a call on the other within a second; an org revoked once
is refused by both; both write one audit log; an instance killed outright answers the restart envelope through
the proxy until it is back on its data dir, and its sessions then continue; a pause made on one instance is
resumed from a session on the other, its home killed or serving, and its tool runs once."""

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import attrs
import httpx
import psycopg
import pytest
import trio

from executor_mcp.config import SECRET_KEY_ENV
from executor_mcp.proxy_config import Instance, render
from tests.auth_support import SECRET, bearer, mint
from tests.haproxy import haproxy
from tests.integration.test_cli_operations import cli
from tests.integration.test_stateless_wire import FORM, call_body, send
from tests.integration.test_stateless_wire import result_of as wire_result
from tests.mcp_http import envelope, initialize_body, post, sse_messages
from tests.nginx import nginx
from tests.postgres import PostgresServer
from tests.process import ServerProcess, server_process
from tests.recording_upstream import listen_port

pytestmark = pytest.mark.slow

ALICE = bearer(mint("alice", "acme", expires_in=3600))
BOB = bearer(mint("bob", "globex", expires_in=3600))
CALL_POLICIES = "return await tools.executor.coreTools.policies.list({});"
LIST_POLICIES = "return (await tools.executor.coreTools.policies.list({})).data.policies.length;"
# How long a change made through one instance may take to govern the other.
PROPAGATION = 1.0
AUDIT_BOUND = 10.0
# How long a proxy may take to route to an instance that came back (HAProxy: its next health check).
RETURN_BOUND = 10.0
# How long HAProxy may take to see both instances up at the start (each check is bounded by its 1 s interval, and
# one that times out on a loaded machine marks the instance down until the next succeeds).
HEALTH_BOUND = 30.0
# How long a process takes to see that another took its instance (its next renewal) and to stop.
LEASE_LOSS_BOUND = 15.0


@attrs.define
class Cluster:
    root: Path
    url: str  # the database's
    ports: dict[str, int]
    proxy: str = ""
    servers: dict[str, ServerProcess] = attrs.Factory(dict)

    def arguments(self, name: str) -> list[str]:
        return [
            "--port",
            str(self.ports[name]),
            "--database-url",
            self.url,
            "--instance-id",
            name,
            "--auth",
            "jwt",
            "--jwt-secret-file",
            str(self.root / "jwt-secret"),
            "--public-url",
            self.proxy,
        ]

    def direct(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"


PROXIES = {"nginx": nginx, "haproxy": haproxy}


@pytest.fixture(params=sorted(PROXIES))
async def cluster(
    request: pytest.FixtureRequest, postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cluster]:
    monkeypatch.setenv(SECRET_KEY_ENV, "one key for the whole cluster")
    (tmp_path / "jwt-secret").write_bytes(SECRET)
    cluster = Cluster(tmp_path, postgres.new_database(), {"a": listen_port(), "b": listen_port()})
    listen = listen_port()
    cluster.proxy = f"http://127.0.0.1:{listen}"
    generated = render(
        request.param,
        [Instance(name, f"127.0.0.1:{port}") for name, port in cluster.ports.items()],
        f"127.0.0.1:{listen}",
    )
    async with AsyncExitStack() as stack:
        for name in cluster.ports:
            cluster.servers[name] = await stack.enter_async_context(
                server_process(tmp_path / name, *cluster.arguments(name))
            )
        await stack.enter_async_context(PROXIES[request.param](generated, listen))
        try:
            yield cluster
        finally:
            with trio.CancelScope(shield=True):
                await stop(*cluster.servers.values())


async def stop(*servers: ServerProcess) -> None:
    """Stop servers the test started (SIGTERM, a graceful stop); their output readers end with them."""
    for server in servers:
        if server.process.returncode is None:
            server.terminate()
            await server.wait()


async def initialize(http: httpx.AsyncClient, base: str, auth: dict[str, str]) -> str:
    response = await post(http, base + "/mcp", initialize_body(), **auth)
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    notified = await post(
        http, base + "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id, **auth
    )
    assert notified.status_code == 202
    return session_id


async def execute(
    http: httpx.AsyncClient, base: str, session_id: str, code: str, auth: dict[str, str]
) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": code}},
    }
    return await post(http, base + "/mcp", body, session_id, **auth)


def result_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        [message] = [m for m in sse_messages(response.text) if m.get("id") == 7]
    else:
        message = response.json()
    return message["result"]


def text(result: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in result["content"])


async def sessions_on_both(http: httpx.AsyncClient, cluster: Cluster) -> dict[str, str]:
    """Sessions opened through the proxy until each instance is home to one: `initialize` goes anywhere (HAProxy
    sends nothing to an instance until its health check has seen it up, so the first ones may all go to one; on a
    loaded machine a check can time out and mark an instance down again, hence the longer bound)."""
    homes: dict[str, str] = {}
    with trio.move_on_after(HEALTH_BOUND):
        while len(homes) < 2:
            session_id = await initialize(http, cluster.proxy, ALICE)
            homes.setdefault(session_id.split("_")[0], session_id)
            await trio.sleep(0.05)
    assert len(homes) == 2, f"the proxy sent every initialize to {sorted(homes)}"
    return homes


async def test_sessions_are_served_by_their_home_through_the_proxy(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        homes = await sessions_on_both(http, cluster)
        for home, session_id in homes.items():
            assert session_id.startswith(f"{home}_")
            for _ in range(3):
                result = result_of(await execute(http, cluster.proxy, session_id, "return 6 * 7;", ALICE))
                assert "42" in text(result)
            # Straight to the other instance: the restart envelope, never a new session.
            other = "b" if home == "a" else "a"
            stray = await execute(http, cluster.direct(other), session_id, "return 1;", ALICE)
            assert envelope(stray) == (503, -32001, "MCP session is restarting, please retry")
            assert stray.headers["retry-after"] == "2"
            assert "mcp-session-id" not in stray.headers


async def test_a_policy_written_through_one_instance_governs_the_other(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        homes = await sessions_on_both(http, cluster)
        assert "0" in text(result_of(await execute(http, cluster.proxy, homes["b"], LIST_POLICIES, ALICE)))
        rule = {"owner": "org", "pattern": "executor.coreTools.policies.list", "action": "block"}
        created = await http.post(cluster.direct("a") + "/api/policies", json=rule, headers=ALICE)
        assert created.status_code in (200, 201), created.text
        with trio.fail_after(PROPAGATION):
            result = result_of(await execute(http, cluster.proxy, homes["b"], CALL_POLICIES, ALICE))
        answer = json.loads(text(result))
        assert answer["ok"] is False
        assert answer["error"]["code"] == "tool_blocked"


async def test_an_org_revoked_once_is_refused_by_every_instance(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        homes = await sessions_on_both(http, cluster)
        bobs = await initialize(http, cluster.proxy, BOB)
        revoked = await cli("orgs", "revoke", "acme", "--database-url", cluster.url)
        assert revoked.returncode == 0, revoked.stderr
        with trio.fail_after(PROPAGATION):
            for home, session_id in homes.items():
                refused = await execute(http, cluster.direct(home), session_id, "return 1;", ALICE)
                assert refused.status_code == 403, refused.text
            for name in cluster.ports:
                fresh = await post(http, cluster.direct(name) + "/mcp", initialize_body(), **ALICE)
                assert fresh.status_code == 403, fresh.text
        # Another org is untouched.
        assert "42" in text(result_of(await execute(http, cluster.proxy, bobs, "return 42;", BOB)))


async def test_both_instances_write_one_audit_log(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        homes = await sessions_on_both(http, cluster)
        for session_id in homes.values():
            result_of(await execute(http, cluster.proxy, session_id, LIST_POLICIES, ALICE))
        for name in cluster.ports:
            # The trail writes in batches: each instance's records land within a flush interval.
            with trio.fail_after(AUDIT_BOUND):
                while True:
                    items = (await http.get(cluster.direct(name) + "/api/audit", headers=ALICE)).json()["items"]
                    if {item["sessionId"] for item in items} >= set(homes.values()):
                        break
                    await trio.sleep(0.1)


async def test_a_killed_instance_answers_the_restart_envelope_until_it_is_back(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        homes = await sessions_on_both(http, cluster)
        cluster.servers["a"].kill()
        await cluster.servers["a"].wait()
        down = await execute(http, cluster.proxy, homes["a"], "return 1;", ALICE)
        assert envelope(down) == (503, -32001, "MCP session is restarting, please retry")
        assert down.headers["retry-after"] == "2"
        # The other instance serves its own sessions and new ones meanwhile.
        assert "42" in text(result_of(await execute(http, cluster.proxy, homes["b"], "return 42;", ALICE)))
        assert (await initialize(http, cluster.proxy, ALICE)).startswith("b_")
        async with server_process(cluster.root / "a", *cluster.arguments("a")) as again:
            try:
                # A client retries on the restart envelope; the proxy may take a health check to see A back.
                with trio.fail_after(RETURN_BOUND):
                    while (
                        answer := await execute(http, cluster.proxy, homes["a"], "return 'back';", ALICE)
                    ).status_code == 503:
                        assert envelope(answer) == (503, -32001, "MCP session is restarting, please retry")
                        await trio.sleep(0.2)
                assert "back" in text(result_of(answer))
            finally:
                await stop(again)


# A call that pauses by default (it changes policies), whose every run leaves a record any instance can count.
CREATE_ONE = (
    'await tools.executor.coreTools.policies.create({ owner: "user", pattern: "once.only", action: "block" });'
    ' return "created";'
)
COUNT_CREATED = (
    "const listed = await tools.executor.coreTools.policies.list({});"
    ' return "created " + listed.data.policies.filter((p) => p.pattern === "once.only").length;'
)


async def paused_on(http: httpx.AsyncClient, base: str, session_id: str) -> str:
    """Run `CREATE_ONE` in the session: it pauses for approval; its execution id."""
    structured = result_of(await execute(http, base, session_id, CREATE_ONE, ALICE))["structuredContent"]
    assert structured["status"] == "waiting_for_interaction", structured
    return str(structured["executionId"])


async def resume(http: httpx.AsyncClient, base: str, session_id: str, execution_id: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "resume", "arguments": {"executionId": execution_id, "action": "accept"}},
    }
    return result_of(await post(http, base + "/mcp", body, session_id, **ALICE))


async def created(http: httpx.AsyncClient, base: str, session_id: str) -> str:
    return text(result_of(await execute(http, base, session_id, COUNT_CREATED, ALICE)))


async def test_a_pause_made_on_a_killed_instance_is_resumed_from_a_new_session_on_the_other(
    cluster: Cluster,
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        homes = await sessions_on_both(http, cluster)
        execution_id = await paused_on(http, cluster.proxy, homes["a"])
        cluster.servers["a"].kill()
        await cluster.servers["a"].wait()
        elsewhere = await initialize(http, cluster.proxy, ALICE)
        assert elsewhere.startswith("b_")
        answer = await resume(http, cluster.proxy, elsewhere, execution_id)
        assert answer["structuredContent"]["status"] == "completed", answer
        assert "created" in text(answer)
        # A duplicate resume in the adopting instance replays the same result; the tool ran once.
        assert await resume(http, cluster.proxy, elsewhere, execution_id) == answer
        assert "created 1" in await created(http, cluster.proxy, elsewhere)
        async with server_process(cluster.root / "a", *cluster.arguments("a")) as again:
            try:
                # Back on its data dir, A revives its session without the execution it no longer holds.
                with trio.fail_after(RETURN_BOUND):
                    while (
                        response := await execute(http, cluster.proxy, homes["a"], COUNT_CREATED, ALICE)
                    ).status_code == 503:
                        assert envelope(response) == (503, -32001, "MCP session is restarting, please retry")
                        await trio.sleep(0.2)
                assert "created 1" in text(result_of(response))
                late = await resume(http, cluster.proxy, homes["a"], execution_id)
                assert late["structuredContent"]["status"] == "execution_not_found", late
                assert "created 1" in await created(http, cluster.proxy, homes["a"])
            finally:
                await stop(again)


async def test_a_pause_resumed_elsewhere_while_its_home_serves_runs_once(cluster: Cluster) -> None:
    """A 2026 client's requests go to any instance, so a resume may reach one that is not the pause's home
    while the home serves: the execution moves, and the home's run, answered later, stops before its tool."""
    async with httpx.AsyncClient(timeout=30) as http:
        homes = await sessions_on_both(http, cluster)
        execution_id = await paused_on(http, cluster.direct("a"), homes["a"])
        answer = await resume(http, cluster.direct("b"), homes["b"], execution_id)
        assert answer["structuredContent"]["status"] == "completed", answer
        too_late = await resume(http, cluster.direct("a"), homes["a"], execution_id)
        assert too_late["structuredContent"]["status"] == "execution_already_settled", too_late
        assert "created 1" in await created(http, cluster.proxy, homes["a"])
        # Another account cannot take it, whichever instance it asks.
        bobs = await initialize(http, cluster.direct("b"), BOB)
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "resume", "arguments": {"executionId": execution_id, "action": "accept"}},
        }
        stranger = result_of(await post(http, cluster.direct("b") + "/mcp", body, bobs, **BOB))
        assert stranger["structuredContent"]["status"] in ("execution_not_found", "execution_forbidden")


async def test_a_2026_client_answers_a_question_asked_by_a_killed_instance_through_any_other(
    cluster: Cluster,
) -> None:
    """MCP 2026-07-28 has no session to route by: the retry carrying the answer reaches whichever instance the
    proxy picks, the home being dead; the `requestState` is sealed with a key all instances share."""
    native = "/mcp?elicitation_mode=native"
    async with httpx.AsyncClient(timeout=30) as http:
        asking = call_body("ask", "execute", {"code": CREATE_ONE}, capabilities=FORM)
        question = wire_result(await send(http, cluster.direct("a") + native, asking, **ALICE), "ask")
        assert question["resultType"] == "input_required", question
        cluster.servers["a"].kill()
        await cluster.servers["a"].wait()
        # A retry without the answer is asked again, wherever it lands: nothing is answered for the user.
        unanswered = call_body("again", "execute", {"code": CREATE_ONE}, capabilities=FORM)
        unanswered["params"].update(requestState=question["requestState"])
        again = wire_result(await send(http, cluster.direct("b") + native, unanswered, **ALICE), "again")
        assert again["resultType"] == "input_required", again
        retry = call_body("answer", "execute", {"code": CREATE_ONE}, capabilities=FORM)
        (key,) = question["inputRequests"]
        retry["params"].update(
            requestState=question["requestState"], inputResponses={key: {"action": "accept", "content": {}}}
        )
        answer = wire_result(await send(http, cluster.proxy + native, retry, **ALICE), "answer")
        assert answer["resultType"] == "complete", answer
        assert answer["structuredContent"]["status"] == "completed", answer
        counting = call_body("count", "execute", {"code": COUNT_CREATED}, capabilities=FORM)
        counted = wire_result(await send(http, cluster.proxy + native, counting, **ALICE), "count")
        assert "created 1" in text(counted)


async def test_a_pause_of_a_session_that_ended_is_not_adopted(cluster: Cluster) -> None:
    """A deleted session's file takes its executions with it; in the database they go too, or a resume
    elsewhere would run what its session's end cancelled."""
    async with httpx.AsyncClient(timeout=30) as http:
        homes = await sessions_on_both(http, cluster)
        execution_id = await paused_on(http, cluster.direct("a"), homes["a"])
        deleted = await http.delete(cluster.direct("a") + "/mcp", headers={"mcp-session-id": homes["a"], **ALICE})
        assert deleted.status_code == 200, deleted.text
        late = await resume(http, cluster.direct("b"), homes["b"], execution_id)
        assert late["structuredContent"]["status"] == "execution_not_found", late
        assert "created 0" in await created(http, cluster.direct("b"), homes["b"])


async def test_a_process_whose_instance_another_process_took_stops(cluster: Cluster) -> None:
    """Its lease names another holder now (an operator started the instance elsewhere): it stops serving (the
    same drain as on SIGTERM) and exits saying why, instead of serving sessions the other process serves too."""
    with psycopg.connect(cluster.url, autocommit=True) as connection:
        connection.execute(
            "UPDATE instance_leases SET holder = 'elsewhere:/srv/a', expires_at = clock_timestamp() + interval '1 hour'"
            " WHERE instance_id = 'a'"
        )
    with trio.fail_after(LEASE_LOSS_BOUND):
        code = await cluster.servers["a"].wait()
    assert code == 2  # a configuration error: one instance id, two processes
    said = bytes(cluster.servers["a"].stderr)
    assert b"--instance-id a is now served by another process (elsewhere:/srv/a); this one stopped" in said


async def test_the_command_prints_what_the_cluster_runs() -> None:
    """The fixture runs `render`'s text; the command an operator runs prints that same text."""
    done = await cli("proxy-config", "nginx", "--instance", "a=http://127.0.0.1:1", "--instance", "b=127.0.0.1:2")
    assert done.returncode == 0, done.stderr
    instances = [Instance("a", "127.0.0.1:1"), Instance("b", "127.0.0.1:2")]
    assert done.stdout.decode() == render("nginx", instances, "127.0.0.1:8080")
    refused = await cli("proxy-config", "nginx", "--instance", "A=http://127.0.0.1:1")
    assert refused.returncode == 2
    assert "instance id" in refused.stderr.decode()

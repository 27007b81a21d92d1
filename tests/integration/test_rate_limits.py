"""Rate limits end to end: a real server with the operator's limits, the official client running code that calls
tools past them. A call over a limit answers `rate_limited` with when to retry (and code that waits that long gets
through), it is audited and counted in `/metrics`, a connection's limit is its own, and an org admin's own limits
(`/api/limits`) can only make the operator's stricter."""

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client

from tests.auth_support import bearer, mint
from tests.conftest import jwt_server, start_server
from tests.integration.test_audit import audited
from tests.integration.test_integrations_e2e import add_orders, shop
from tests.sdk import connect, text_of
from tests.upstream import start_upstream

LIST = "executor.coreTools.policies.list"


def in_flight(org: int | None, account: int | None) -> dict[str, dict[str, int | None]]:
    return {"executionsInFlight": {"org": org, "account": account}}


GET_ORDER = "orders.org.myMainKey.orders.getOrder"
CALL_UNTIL_LIMITED = """
const outcomes = [];
for (let i = 0; i < %(calls)d; i++) {
  const r = await tools.%(tool)s(%(args)s);
  outcomes.push(r.ok ? "ok" : r.error);
}
return outcomes;
"""


async def run(client: Client, code: str) -> Any:
    result = await client.call_tool("execute", {"code": code})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


def calls(tool: str, count: int, args: str = "{}") -> str:
    return CALL_UNTIL_LIMITED % {"calls": count, "tool": tool, "args": args}


async def test_a_call_over_the_account_limit_is_rate_limited_audited_and_counted(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, data_dir, tool_calls_per_minute_per_account=3)
    async with connect(server.url) as (client, _):
        outcomes = await run(client, calls(LIST, 4))
    assert outcomes[:3] == ["ok", "ok", "ok"]
    error = outcomes[3]
    assert error["code"] == "rate_limited"
    assert error["message"].startswith("Rate limit exceeded: at most 3 tool calls a minute for your account.")
    assert error["details"]["scope"] == "account"
    assert error["details"]["limitPerMinute"] == 3
    assert 19_000 < error["details"]["retryAfterMs"] <= 20_000  # the next slot, 60/3 s after the first call
    entries = await audited(http, server, 4)  # the writer batches them in the background
    assert [entry["outcome"] for entry in entries].count("rate_limited") == 1
    scraped = (await http.get(server.running.url + "/metrics")).text
    assert 'outcome="rate_limited"' in scraped


async def test_code_that_waits_the_retry_after_gets_through(nursery: trio.Nursery, data_dir: Path) -> None:
    server = await start_server(nursery, data_dir, tool_calls_per_minute_per_account=120)  # one a half second
    code = """
    let limited = null;
    for (let i = 0; i < 121; i++) {
      const r = await tools.executor.coreTools.policies.list({});
      if (!r.ok) { limited = r.error; break; }
    }
    await new Promise((resolve) => setTimeout(resolve, limited.details.retryAfterMs));
    const again = await tools.executor.coreTools.policies.list({});
    return { limited: limited.code, retried: again.ok };
    """
    async with connect(server.url) as (client, _):
        assert await run(client, code) == {"limited": "rate_limited", "retried": True}


async def test_a_connections_limit_is_its_own(nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient) -> None:
    server = await start_server(nursery, data_dir, allow_local_network=True, tool_calls_per_minute_per_connection=1)
    upstream = await start_upstream(nursery, shop)
    await add_orders(http, server, upstream)
    async with connect(server.url) as (client, _):
        outcomes = await run(client, calls(GET_ORDER, 2, '{ orderId: "1" }'))
        assert outcomes[0] == "ok"
        assert (outcomes[1]["code"], outcomes[1]["details"]["scope"]) == ("rate_limited", "connection")
        assert await run(client, calls(LIST, 3)) == ["ok", "ok", "ok"]  # a built-in tool is at no connection
    assert len(upstream.calls("/orders/1")) == 1  # the refused call sent nothing


async def test_an_org_admin_makes_the_limits_stricter_never_looser(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = await jwt_server(
        nursery, data_dir, tmp_path, org_admin_claim=("role", "admin"), tool_calls_per_minute_per_org=100
    )
    admin, member = bearer(mint("alice", "acme", role="admin")), bearer(mint("bob", "acme"))
    api = server.running.url + "/api/limits"
    executions = in_flight(None, None)  # the per-process guard on workers is not a configured limit
    assert (await http.get(api, headers=member)).json() == {
        "operator": {"toolCallsPerMinute": {"org": 100, "account": None, "connection": None}, **executions},
        "org": {
            "toolCallsPerMinute": {"org": None, "account": None, "connection": None},
            **in_flight(None, None),
        },
        "effective": {"toolCallsPerMinute": {"org": 100, "account": None, "connection": None}, **executions},
    }
    refused = await http.put(api, json={"toolCallsPerMinute": {"org": 1}}, headers=member)
    assert (refused.status_code, refused.json()) == (
        403,
        {"error": "Only an organization admin can change the org's limits"},
    )
    for body in (
        {"toolCallsPerMinute": {"org": 0}},
        {"toolCallsPerMinute": {"team": 1}},
        {"org": 1},
        {"executionsInFlight": {"connection": 1}},
        {"executionsInFlight": {"account": 1.5}},
        {"executionsInFlight": [1]},
        {},
    ):
        bad = await http.put(api, json=body, headers=admin)
        assert bad.status_code == 400, body
    changed = await http.put(api, json={"toolCallsPerMinute": {"org": 500, "account": 2}}, headers=admin)
    assert changed.json()["effective"]["toolCallsPerMinute"] == {"org": 100, "account": 2, "connection": None}
    async with connect(server.url, headers=member) as (client, _):
        outcomes = await run(client, calls(LIST, 3))
    assert outcomes[:2] == ["ok", "ok"]
    assert outcomes[2]["details"] == {
        "scope": "account",
        "limitPerMinute": 2,
        "retryAfterMs": outcomes[2]["details"]["retryAfterMs"],
    }
    # A PUT replaces the sections it names, and keeps the others.
    narrowed = await http.put(api, json={"executionsInFlight": {"account": 3}}, headers=admin)
    assert narrowed.json()["org"] == {
        "toolCallsPerMinute": {"org": 500, "account": 2, "connection": None},
        **in_flight(None, 3),
    }
    cleared = await http.put(api, json={"toolCallsPerMinute": {}}, headers=admin)
    assert cleared.json()["org"] == {
        "toolCallsPerMinute": {"org": None, "account": None, "connection": None},
        **in_flight(None, 3),
    }


@pytest.mark.parametrize("path", ["/api/limits"])
async def test_limits_need_a_bearer(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient, path: str
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path)
    assert (await http.get(server.running.url + path)).status_code == 401

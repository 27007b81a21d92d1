"""One policy scenario table, run against every endpoint kind: `/mcp` in both eras and in passthrough, a toolkit's
endpoint in both eras and in passthrough, and `executor-mcp stdio --toolkit`. Every endpoint is a projection of the
one policy engine, so the org's and the user's rules mean the same everywhere, and a toolkit's own rules can only
tighten them: a toolkit endpoint never lets through what the default endpoint would block or pause (upstream let
workspace rules be bypassed on toolkit endpoints; here the table would catch it on every kind at once)."""

import json
import sys
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import ServerUnderTest, start_server
from tests.process import run_cli
from tests.sdk import connect, execution_id

READ = "executor.coreTools.policies.list"  # no approval annotation
GATED = "executor.coreTools.policies.create"  # its annotation asks for approval
ARGS = {READ: {}, GATED: {"owner": "user", "pattern": "zzz.*", "action": "block"}}
Rules = tuple[tuple[str, str], ...]


@attrs.frozen
class Scenario:
    name: str
    tool: str
    default: str  # what the call gets on every endpoint but a toolkit's
    toolkit: str  # what it gets on the toolkit's
    org: Rules = ()
    user: Rules = ()
    kit: Rules = ()  # the toolkit's own rules


TABLE = [
    Scenario("nothing matches, no annotation", READ, "ok", "ok"),
    Scenario("nothing matches, annotated", GATED, "paused", "paused"),
    Scenario("an org block", READ, "tool_blocked", "tool_blocked", org=(("executor.*", "block"),)),
    Scenario("a user gate", READ, "paused", "paused", user=((READ, "require_approval"),)),
    Scenario("an org approve lifts the annotation", GATED, "ok", "ok", org=((GATED, "approve"),)),
    Scenario(
        "a toolkit gate tightens an org approve",
        GATED,
        "ok",
        "paused",
        org=((GATED, "approve"),),
        kit=((GATED, "require_approval"),),
    ),
    Scenario("a toolkit approve does not lift the annotation", GATED, "paused", "paused", kit=(("*", "approve"),)),
    Scenario(
        "a toolkit approve does not lift an org block",
        READ,
        "tool_blocked",
        "tool_blocked",
        org=((READ, "block"),),
        kit=((READ, "approve"),),
    ),
    Scenario("a toolkit block", READ, "ok", "tool_blocked", kit=(("executor.coreTools.policies.*", "block"),)),
    Scenario(
        "a user approve does not lift an org gate",
        GATED,
        "paused",
        "paused",
        org=(("executor.*", "require_approval"),),
        user=((GATED, "approve"),),
    ),
    Scenario(
        "the strictest word wins across all three",
        READ,
        "tool_blocked",
        "tool_blocked",
        user=((READ, "block"),),
        kit=((READ, "require_approval"),),
    ),
]


@attrs.frozen
class Endpoint:
    path: str
    mode: str  # the client's era: "legacy" (2025) or "auto" (2026)
    passthrough: bool

    @property
    def toolkit(self) -> bool:
        return "/toolkits/" in self.path


ENDPOINTS = {
    "2025": Endpoint("", "legacy", False),
    "2025 passthrough": Endpoint("?mode=passthrough", "legacy", True),
    "2026": Endpoint("", "auto", False),
    "2025 toolkit": Endpoint("/toolkits/crm", "legacy", False),
    "2025 toolkit passthrough": Endpoint("/toolkits/crm?mode=passthrough", "legacy", True),
    "2026 toolkit": Endpoint("/toolkits/crm", "auto", False),
    "2026 toolkit passthrough": Endpoint("/toolkits/crm?mode=passthrough", "auto", True),
}


async def outcome(client: Client, tool: str, passthrough: bool) -> str:
    """What the call got: `ok`, its failure's code, or `paused` (then declined, so nothing is left waiting)."""
    if passthrough:
        result = await client.call_tool("invoke", {"path": tool, "args": ARGS[tool]})
    else:
        code = f"const r = await tools.{tool}({json.dumps(ARGS[tool])}); return r.ok ? 'ok' : r.error.code;"
        result = await client.call_tool("execute", {"code": code})
    content = result.structured_content or {}
    if content.get("status") == "waiting_for_interaction":
        await client.call_tool("resume", {"executionId": execution_id(result), "action": "decline"})
        return "paused"
    answer = content.get("result")
    if isinstance(answer, dict):
        return "ok" if answer.get("ok") else answer["error"]["code"]
    return str(answer)


# -- over HTTP, each endpoint kind --------------------------------------------------------------------


async def api(http: httpx.AsyncClient, server: ServerUnderTest, method: str, path: str, body: Any = None) -> Any:
    response = await http.request(method, server.running.url + "/api" + path, json=body)
    assert response.status_code == 200, (response.status_code, response.text)
    return response.json()


async def set_rules(http: httpx.AsyncClient, server: ServerUnderTest, toolkit_id: str, scenario: Scenario) -> None:
    """Exactly the scenario's rules: the previous scenario's removed, these added in order."""
    for rule in await api(http, server, "GET", "/policies"):
        await api(http, server, "DELETE", f"/policies/{rule['id']}", {"owner": rule["owner"]})
    for row in (await api(http, server, "GET", f"/toolkits/{toolkit_id}/policies"))["policies"]:
        await api(http, server, "DELETE", f"/toolkits/{toolkit_id}/policies/{row['id']}")
    for owner, rules in (("org", scenario.org), ("user", scenario.user)):
        for pattern, action in rules:
            await api(http, server, "POST", "/policies", {"owner": owner, "pattern": pattern, "action": action})
    for pattern, action in reversed(scenario.kit):  # each new toolkit rule goes first
        await api(http, server, "POST", f"/toolkits/{toolkit_id}/policies", {"pattern": pattern, "action": action})


@pytest.mark.parametrize("kind", list(ENDPOINTS))
async def test_the_table_on_every_http_endpoint_kind(
    kind: str, nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    endpoint = ENDPOINTS[kind]
    server = await start_server(nursery, data_dir)
    made = await api(http, server, "POST", "/toolkits", {"owner": "org", "name": "crm"})
    await api(http, server, "POST", f"/toolkits/{made['id']}/connections", {"pattern": "executor.coreTools.*"})
    got, wanted = {}, {}
    async with connect(server.url + endpoint.path, mode=endpoint.mode) as (client, _):
        for scenario in TABLE:
            await set_rules(http, server, made["id"], scenario)
            got[scenario.name] = await outcome(client, scenario.tool, endpoint.passthrough)
            wanted[scenario.name] = scenario.toolkit if endpoint.toolkit else scenario.default
    assert got == wanted


# -- over stdio, on a toolkit -------------------------------------------------------------------------


async def cli(data_dir: Path, *args: str) -> str:
    done = await run_cli(*args, "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


@pytest.mark.slow
async def test_the_table_over_stdio_on_a_toolkit(tmp_path: Path) -> None:
    """The rules are written by the CLI on the data dir the stdio server holds; it reads them at each call."""
    toolkit_id = await cli(tmp_path, "toolkits", "create", "--org", "local", "--name", "crm")
    await cli(tmp_path, "toolkits", "connect", toolkit_id, "--org", "local", "--pattern", "executor.coreTools.*")
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "executor_mcp", "stdio", "--toolkit", "crm", "--data-dir", str(tmp_path)],
    )
    got, wanted = {}, {}
    with trio.fail_after(240):
        async with Client(server, mode="legacy") as client:
            for scenario in TABLE:
                removals: list[tuple[str, ...]] = []
                for owner, rules in (("org", scenario.org), ("user", scenario.user)):
                    user = ("--user", "local") if owner == "user" else ()
                    for pattern, action in rules:
                        rule_id = await cli(
                            tmp_path,
                            "policies",
                            "add",
                            "--org",
                            "local",
                            *user,
                            "--pattern",
                            pattern,
                            "--action",
                            action,
                        )
                        removals.append(("policies", "remove", rule_id, "--org", "local", *user))
                for pattern, action in reversed(scenario.kit):
                    row = await cli(
                        tmp_path,
                        "toolkits",
                        "rule",
                        toolkit_id,
                        "--org",
                        "local",
                        "--pattern",
                        pattern,
                        "--action",
                        action,
                    )
                    removals.append(("toolkits", "remove-row", toolkit_id, row, "--org", "local"))
                got[scenario.name] = await outcome(client, scenario.tool, passthrough=False)
                wanted[scenario.name] = scenario.toolkit
                for removal in removals:
                    await cli(tmp_path, *removal)
    assert got == wanted

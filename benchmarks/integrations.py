"""Integrations benchmark: importing GitHub's REST description, `tools.search` over more than ten thousand
connected tools, and what an integration tool call adds over a direct httpx request to the same upstream.

In-process and real: the integrations service over a real control plane in a temporary data dir, the
catalog the sandbox calls into (policies, pre-flight, credential lookup, request building, the guarded
outbound client, response classification), and a local HTTP upstream. The sandbox itself is left out:
`scripts/bench` measures what `execute` costs. Every loop is bounded in count and time.

    scripts/fetch-fixtures && .venv/bin/python -m benchmarks.integrations [--connections 9] [--repeat 200]
"""

import argparse
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import hypercorn.trio
import trio
from hypercorn.config import Config

from benchmarks.common import line, no_gate, overhead_line, timed
from executor_mcp.auth.principal import LOCAL_PRINCIPAL
from executor_mcp.config import Settings
from executor_mcp.integrations.assembly import open_integrations
from executor_mcp.policies.service import Policies
from executor_mcp.records.integrations import OPENAPI
from executor_mcp.storage.control import ControlPlane
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.core import build_catalog

GITHUB = Path(__file__).parent.parent / "tests" / "fixtures" / ".cache" / "api.github.com.json"
QUERIES = ["create issue", "list pull requests", "get repository", "delete webhook", "workflow run", "gist comment"]
PING_SPEC = """{"openapi": "3.0.3", "info": {"title": "Ping", "version": "1"}, "servers": [{"url": "%s"}],
"paths": {"/ping": {"get": {"operationId": "ping", "tags": ["ping"],
"responses": {"200": {"description": "pong", "content": {"application/json": {"schema": {"type": "object"}}}}}}}}}"""


async def pong(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"pong": true}'})


async def main(connections: int, repeat: int) -> None:
    if not GITHUB.exists():
        raise SystemExit(f"{GITHUB} is missing: run scripts/fetch-fixtures")
    source = GITHUB.read_text()
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(data_dir=Path(scratch), allow_local_network=True)
        control = await ControlPlane.open(settings.data_dir)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = config.errorlog = None
        try:
            async with open_integrations(settings, control) as integrations, trio.open_nursery() as nursery:
                upstream = (await nursery.start(partial(hypercorn.trio.serve, pong, config)))[0]
                catalog = build_catalog(integrations)
                context = CallContext(principal=LOCAL_PRINCIPAL, policies=Policies(control.policies), gate=no_gate)
                started = time.perf_counter()
                _, count = await integrations.add(
                    LOCAL_PRINCIPAL, OPENAPI, {"spec": {"kind": "blob", "value": source}, "slug": "github"}
                )
                imported = time.perf_counter() - started
                print(f"import GitHub's spec ({len(source) / 1e6:.1f} MB, {count} tools): {imported:.2f} s")
                for index in range(connections):
                    await integrations.connections.create(
                        LOCAL_PRINCIPAL,
                        {"owner": "org", "name": f"account {index}", "integration": "github", "template": "none"},
                        pasted=True,
                    )
                view = await integrations.view(LOCAL_PRINCIPAL)
                print(f"catalog: {len(view.entries)} connected tools")
                started = time.perf_counter()
                await catalog.invoke("search", {"query": "warm up"}, context)
                print(f"first search (builds the index): {(time.perf_counter() - started) * 1000:.0f} ms")
                for query in QUERIES:
                    samples = await timed(partial(catalog.invoke, "search", {"query": query}, context), repeat)
                    print(line(f"search {query!r}", samples))
                enumeration = partial(catalog.invoke, "search", {"namespace": "github", "query": ""}, context)
                print(line("search namespace enumeration", await timed(enumeration, repeat)))

                await integrations.add(
                    LOCAL_PRINCIPAL,
                    OPENAPI,
                    {"spec": {"kind": "blob", "value": PING_SPEC % upstream}, "slug": "pinger"},
                )
                await integrations.connections.create(
                    LOCAL_PRINCIPAL,
                    {"owner": "org", "name": "main", "integration": "pinger", "template": "none"},
                    pasted=True,
                )
                tool = partial(catalog.invoke, "pinger.org.main.ping.getOperation", {}, context)
                first = await tool()
                assert first["ok"] is True, first
                async with httpx.AsyncClient() as direct:
                    direct_samples = await timed(partial(direct.get, upstream + "/ping"), repeat)
                tool_samples = await timed(tool, repeat)
                print(line("direct httpx GET", direct_samples))
                print(line("integration tool call", tool_samples))
                print(overhead_line(direct_samples, tool_samples))
                nursery.cancel_scope.cancel()
        finally:
            await control.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=9, help="connections to GitHub (9 give 11,007 tools)")
    parser.add_argument("--repeat", type=int, default=200)
    options = parser.parse_args()
    trio.run(main, options.connections, options.repeat)

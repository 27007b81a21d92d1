"""What one organization's spec import costs another organization's `execute` (issue 25, defect 4).

A server child process with `--auth jwt` (so the two organizations are real tenants): org B runs `execute`
in a loop, first alone, then while org A imports the largest OpenAPI document the server allows
(generated: `--operations` operations, padded toward `--integration-max-spec-bytes`). Prints org B's
latency p50/p95/max in both phases and how long the import took. Loopback only, bounded in count and time.

    .venv/bin/python -m benchmarks.import_stall [--operations 60000] [--samples 200]
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import trio

from benchmarks.common import HEADERS, INITIALIZE
from benchmarks.mcp_bench import running_server

SECRET = b"import-stall-benchmark-secret-of-enough-length"
BOUND = 600  # seconds for the whole run
EXECUTE = {"name": "execute", "arguments": {"code": "return 1"}}


def token(org: str) -> str:
    return jwt.encode({"sub": f"bench-{org}", "org_id": org, "exp": int(time.time()) + BOUND + 60}, SECRET, "HS256")


def large_spec(operations: int, description_bytes: int) -> bytes:
    """An OpenAPI document with `operations` GET operations, each with a path and a query parameter."""
    paths: dict[str, Any] = {}
    for index in range(operations):
        paths[f"/things{index}/{{id}}"] = {
            "get": {
                "operationId": f"getThing{index}",
                "summary": f"Fetch thing number {index}",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "expand", "in": "query", "schema": {"type": "boolean"}},
                ],
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {}}}}},
            }
        }
    info = {"title": "Big", "version": "1", "description": "x" * description_bytes}
    spec = {"openapi": "3.0.3", "info": info, "servers": [{"url": "http://127.0.0.1:9"}], "paths": paths}
    return json.dumps(spec).encode()


async def execute_latencies(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], session: str, count: int, stop: trio.Event | None
) -> list[float]:
    samples: list[float] = []
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": EXECUTE}
    for _ in range(count):
        started = time.perf_counter()
        response = await http.post(url, json=call, headers={**headers, "mcp-session-id": session})
        response.raise_for_status()
        samples.append(time.perf_counter() - started)
        if stop is not None and stop.is_set():
            break
    return samples


def summary(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (
        f"{label:<28} n={len(samples):4d}  p50 {statistics.median(ordered) * 1e3:7.1f} ms  "
        f"p95 {p95 * 1e3:7.1f} ms  max {ordered[-1] * 1e3:7.1f} ms"
    )


async def main(operations: int, samples: int, description_bytes: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-stall-") as scratch:
        secret = Path(scratch) / "hs256.key"
        secret.write_bytes(SECRET)
        spec = large_spec(operations, description_bytes)
        print(f"spec: {operations} operations, {len(spec) / 1e6:.1f} MB")
        with trio.fail_after(BOUND):
            async with (
                running_server("--auth", "jwt", "--jwt-secret-file", str(secret)) as server,
                httpx.AsyncClient(timeout=BOUND) as http,
            ):
                org_a = {"authorization": f"Bearer {token('org-a')}"}
                org_b = {**HEADERS, "authorization": f"Bearer {token('org-b')}"}
                opened = await http.post(server.url, json=INITIALIZE, headers=org_b)
                opened.raise_for_status()
                session = opened.headers["mcp-session-id"]
                await execute_latencies(http, server.url, org_b, session, 20, None)  # warm the worker pool
                alone = await execute_latencies(http, server.url, org_b, session, samples, None)
                print(summary("org B execute, alone", alone))
                imported = trio.Event()
                during: list[float] = []
                took: list[float] = []

                async def import_spec() -> None:
                    started = time.perf_counter()
                    response = await http.post(
                        server.url.removesuffix("/mcp") + "/api/openapi/specs",
                        json={"spec": {"kind": "blob", "value": spec.decode()}, "slug": "big"},
                        headers=org_a,
                    )
                    took.append(time.perf_counter() - started)
                    print(f"org A import: HTTP {response.status_code} in {took[0]:.1f} s: {response.text[:120]}")
                    imported.set()

                async def measure() -> None:
                    while not imported.is_set():
                        during.extend(await execute_latencies(http, server.url, org_b, session, 50, imported))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(import_spec)
                    nursery.start_soon(measure)
                print(summary("org B execute, during import", during))
                after = await execute_latencies(http, server.url, org_b, session, samples, None)
                print(summary("org B execute, after", after))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=60_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--description-bytes", type=int, default=0, help="pad info.description by this many bytes")
    options = parser.parse_args()
    trio.run(main, options.operations, options.samples, options.description_bytes)

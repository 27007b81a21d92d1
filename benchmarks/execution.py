"""Execution benchmark: what `execute` adds over `tools/list`, and what a runaway session costs others.

1. p50/p95 of `tools/list` and of `execute` with `return 6*7` on the same session (raw HTTP, SSE parsed).
2. Resume latency by replay: a program makes N ungated tool calls (`policies.list`), then one gated
   `policies.create` pauses it, and the worker is given back. `resume` with action decline takes a fresh
   worker, replays the N+1 journalled steps, delivers the decline (the program catches it and returns;
   nothing is written, so every sample starts from the same state) and answers: p50/p95 of that request
   for N = 1, 10 and 100, beside `execute` of the same N calls with no pause, so the replay's share shows,
   and the `execute` that ran to the pause (its journal written durably from the pause on).
3. p50/p95 of `execute return 1` in one session, first alone, then while another session keeps a
   `while (true) {}` running (restarted whenever its CPU budget ends it). Last, because the runaway's
   final `while (true)` runs on for up to its CPU budget after the measurement stops.

Every loop is bounded in count and time; the server is in-process on 127.0.0.1:0 with a temp data dir.
"""

import argparse
import json
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import trio

from benchmarks.common import HEADERS, TIME_BOUND, line, open_session, percentiles_ms
from benchmarks.mcp_client import find_answer
from executor_mcp.app import Running, serve
from executor_mcp.config import Settings


async def _timed(http: httpx.AsyncClient, url: str, session_id: str, body: dict, count: int) -> list[float]:
    payload, headers = json.dumps(body), {**HEADERS, "mcp-session-id": session_id}
    samples: list[float] = []
    deadline = time.perf_counter() + TIME_BOUND
    while len(samples) < count and time.perf_counter() < deadline:
        started = time.perf_counter()
        response = await http.post(url, content=payload, headers=headers)
        samples.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        assert '"isError":true' not in response.text, response.text
    return samples


def _call(tool: str, arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def _execute(code: str) -> dict:
    return _call("execute", {"code": code})


# Journalled calls before the pause, per figure.
REPLAYED_CALLS = (1, 10, 100)
_UNGATED = "await tools.executor.coreTools.policies.list({});"
# Gated by its own annotation while no policy says otherwise; declined, it writes nothing.
_GATED = 'await tools.executor.coreTools.policies.create({ owner: "user", pattern: "bench.*", action: "block" });'


def _pausing(calls: int) -> str:
    return (
        f"for (let i = 0; i < {calls}; i++) {_UNGATED}\n"
        f'try {{ {_GATED} return "approved"; }} catch (e) {{ return "declined"; }}'
    )


def _unpaused(calls: int) -> str:
    return f"for (let i = 0; i < {calls}; i++) {_UNGATED}\nreturn {calls};"


async def _answer(http: httpx.AsyncClient, url: str, session_id: str, body: dict) -> dict:
    response = await http.post(url, content=json.dumps(body), headers={**HEADERS, "mcp-session-id": session_id})
    assert response.status_code == 200, response.text
    answer = find_answer(response.headers.get("content-type", ""), response.content, body["id"])
    assert "result" in answer, answer
    return answer["result"]


async def _resumes(
    http: httpx.AsyncClient, url: str, session_id: str, calls: int, count: int
) -> tuple[list[float], list[float]]:
    """Seconds per `execute` to the pause and per `resume` (decline) of a program paused after `calls`
    journalled calls, timed apart: each sample pauses a new execution. At most `count` samples and
    `TIME_BOUND` seconds."""
    pausing = _execute(_pausing(calls))
    to_pause: list[float] = []
    resumed: list[float] = []
    deadline = time.perf_counter() + TIME_BOUND
    while len(resumed) < count and time.perf_counter() < deadline:
        started = time.perf_counter()
        paused = (await _answer(http, url, session_id, pausing)).get("structuredContent") or {}
        to_pause.append(time.perf_counter() - started)
        assert paused.get("status") == "waiting_for_interaction", paused
        decline = _call("resume", {"executionId": paused["executionId"], "action": "decline"})
        started = time.perf_counter()
        answer = await _answer(http, url, session_id, decline)
        resumed.append(time.perf_counter() - started)
        assert (answer.get("structuredContent") or {}).get("result") == "declined", answer
    return to_pause, resumed


async def _replay_figures(http: httpx.AsyncClient, url: str, session_id: str, count: int) -> None:
    await _resumes(http, url, session_id, 1, 5)  # warm-up
    for calls in REPLAYED_CALLS:
        to_pause, resumed = await _resumes(http, url, session_id, calls, count)
        unpaused = await _timed(http, url, session_id, _execute(_unpaused(calls)), count)
        counted = f"{calls} call{'' if calls == 1 else 's'}"
        print(line(f"resume by replay, {counted}", resumed))
        print(line(f"execute {counted}, no pause", unpaused))
        print(line(f"execute {counted} to the pause", to_pause))
        share = percentiles_ms(resumed)[0] - percentiles_ms(unpaused)[0]
        print(f"{f'resume over execute, {counted}, p50':<36} {share:+.2f} ms")


async def main(count: int, resumes: int) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            host="127.0.0.1", port=0, data_dir=Path(data_dir), log_level="warning", execution_cpu_limit=5.0
        )
        async with trio.open_nursery() as nursery:
            running: Running = await nursery.start(partial(serve, settings))
            url = running.mcp_url
            async with httpx.AsyncClient(timeout=30) as http:
                session = await open_session(http, url)
                await _timed(http, url, session, _execute("return 1"), 50)  # warm-up
                listed = await _timed(http, url, session, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, count)
                executed = await _timed(http, url, session, _execute("return 6*7"), count)
                print(line("tools/list", listed))
                print(line("execute return 6*7", executed))
                added = percentiles_ms(executed)[0] - percentiles_ms(listed)[0]
                print(f"{'execute over tools/list at p50':<36} {added:+.2f} ms")
                await _replay_figures(http, url, session, resumes)

                alone = await _timed(http, url, session, _execute("return 1"), count)
                print(line("execute return 1, alone", alone))
                hog = await open_session(http, url)
                stop = trio.Event()

                async def run_away() -> None:
                    async with httpx.AsyncClient(timeout=30) as own:
                        while not stop.is_set():
                            await own.post(
                                url,
                                content=json.dumps(_execute("while (true) {}")),
                                headers={**HEADERS, "mcp-session-id": hog},
                            )

                nursery.start_soon(run_away)
                await trio.sleep(0.5)
                beside = await _timed(http, url, session, _execute("return 1"), count)
                stop.set()
                print(line("execute return 1, beside while(true)", beside))
                raised = percentiles_ms(beside)[1] - percentiles_ms(alone)[1]
                print(f"{'p95 raised by the runaway':<36} {raised:+.2f} ms")
            running.stop.set()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--resumes", type=int, default=100, help="samples per figure of resume by replay")
    args = parser.parse_args()
    trio.run(main, args.requests, args.resumes)

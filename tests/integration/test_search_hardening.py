"""Hostile search input costs its caller a refusal, never anyone else their latency (issue 9, item 17)."""

import json
from pathlib import Path

import pytest
import trio

from tests.conftest import ServerUnderTest, start_server
from tests.sdk import connect, text_of
from tests.sdk import execute as run

HOSTILE_SEARCHES = """
const outcomes = await Promise.all([1, 2, 3, 4].map(async () => {
  try { await tools.search({ query: 'zz '.repeat(100000) }); return 'answered'; }
  catch (e) { return e.message; }
}));
return outcomes;
"""
# Generous: the machine is shared, and before the bounds one such batch stalled everyone by 8 to 15 s.
NEIGHBOUR_BOUND = 1.0


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir)


async def test_hostile_searches_are_refused_and_do_not_stall_another_session(executor: ServerUnderTest) -> None:
    latencies: list[float] = []
    hostile_outcomes: list[str] = []

    async def neighbour(ready: trio.Event, hostile_done: trio.Event) -> None:
        async with connect(executor.url, mode="legacy") as (client, _):
            assert text_of(await run(client, "return 0")) == "0"
            ready.set()
            for _ in range(40):
                started = trio.current_time()
                with trio.move_on_after(10):
                    try:
                        assert text_of(await run(client, "return 1")) == "1"
                    finally:
                        latencies.append(trio.current_time() - started)
                if hostile_done.is_set() or latencies[-1] >= NEIGHBOUR_BOUND:
                    return
                await trio.sleep(0.02)

    async def hostile(hostile_done: trio.Event) -> None:
        async with connect(executor.url, mode="legacy") as (client, _):
            result = await run(client, HOSTILE_SEARCHES)
            hostile_outcomes.extend(result.structured_content["result"])
            hostile_done.set()

    ready, hostile_done = trio.Event(), trio.Event()
    with trio.fail_after(60):
        async with trio.open_nursery() as both:
            both.start_soon(neighbour, ready, hostile_done)
            await ready.wait()
            both.start_soon(hostile, hostile_done)
    assert latencies
    assert max(latencies) < NEIGHBOUR_BOUND, latencies
    assert hostile_outcomes == ["tools.search query must be at most 500 characters (got 300000)"] * 4


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            "await tools.search({ query: 'x'.repeat(501) })",
            "tools.search query must be at most 500 characters (got 501)",
        ),
        (
            "await tools.search({ query: 'ab '.repeat(33) })",
            "tools.search query must be at most 32 words (got 33)",
        ),
        (
            "await tools.search({ query: 'list', namespace: 'n'.repeat(201) })",
            "tools.search namespace must be at most 200 characters (got 201)",
        ),
        (
            "await tools.describe.tool({ path: 'p'.repeat(501) })",
            "tools.describe.tool path must be at most 500 characters (got 501)",
        ),
        (
            "await tools.executor.integrations.list({ query: 'q'.repeat(201) })",
            "tools.executor.integrations.list query must be at most 200 characters (got 201)",
        ),
    ],
)
async def test_oversized_arguments_throw_a_clear_message_in_the_sandbox(
    executor: ServerUnderTest, code: str, message: str
) -> None:
    async with connect(executor.url, mode="legacy") as (client, _):
        wrapped = f"try {{ {code}; return 'answered'; }} catch (e) {{ return e.message; }}"
        assert (await run(client, wrapped)).structured_content["result"] == message


async def test_a_query_at_the_bounds_still_searches(executor: ServerUnderTest) -> None:
    query = json.dumps(" ".join(["integrations"] + ["list"] * 31))
    async with connect(executor.url, mode="legacy") as (client, _):
        result = await run(client, f"return (await tools.search({{ query: {query} }})).items[0].path")
    assert result.structured_content["result"] == "executor.coreTools.integrations.list"


async def test_a_huge_unknown_tool_path_is_not_found_without_suggestions(executor: ServerUnderTest) -> None:
    code = (
        "const r = await tools['aB'.repeat(100000)](); return [r.ok, r.error.code, 'suggestions' in r.error.details];"
    )
    async with connect(executor.url, mode="legacy") as (client, _):
        with trio.fail_after(10):
            result = await run(client, code)
    assert result.structured_content["result"] == [False, "tool_not_found", False]

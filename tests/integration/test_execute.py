"""`execute` and `skills` through the official MCP client, against real sandbox worker processes."""

import re
from pathlib import Path

import httpx
import pytest
import trio
from mcp import Client

from tests.conftest import ServerUnderTest, start_server
from tests.mcp_http import open_session, post, sse_messages
from tests.sdk import connect
from tests.sdk import execute as run
from tests.tools import call_body


def text_of(result) -> str:
    assert len(result.content) == 1, result.content
    return result.content[0].text


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, execution_cpu_limit=3.0)


async def test_return_value_is_the_text(client: Client) -> None:
    result = await run(client, "return 6 * 7;")
    assert text_of(result) == "42"
    assert not result.is_error
    assert result.structured_content == {"status": "completed", "result": 42, "logs": []}


async def test_set_timeout_resolves(client: Client) -> None:
    started = trio.current_time()
    result = await run(client, 'await new Promise((resolve) => setTimeout(resolve, 300)); return "alpha-result";')
    assert text_of(result) == "alpha-result"
    assert trio.current_time() - started >= 0.3


async def test_clear_timeout_cancels(client: Client) -> None:
    code = """
    let fired = false;
    const id = setTimeout(() => { fired = true; }, 50);
    clearTimeout(id);
    await new Promise((resolve) => setTimeout(resolve, 150));
    return fired;
    """
    assert text_of(await run(client, code)) == "false"


async def test_no_result(client: Client) -> None:
    result = await run(client, "const x = 1;")
    assert text_of(result) == "(no result)"
    assert result.structured_content == {"status": "completed", "result": None, "logs": []}


async def test_objects_are_pretty_printed(client: Client) -> None:
    result = await run(client, "return { a: [1, 2], b: 'x' };")
    assert text_of(result) == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "x"\n}'
    assert result.structured_content["result"] == {"a": [1, 2], "b": "x"}


async def test_console_output_is_in_logs(client: Client) -> None:
    code = "console.log('hi', {a: 1}); console.info('i'); console.warn('w'); console.error('e'); console.debug('d');"
    code += "return 1"
    result = await run(client, code)
    logs = ['[log] hi {"a":1}', "[info] i", "[warn] w", "[error] e", "[debug] d"]
    assert text_of(result) == "1\n\nLogs:\n" + "\n".join(logs)
    assert result.structured_content["logs"] == logs


async def test_emit_renders_items_before_logs(client: Client) -> None:
    code = "emit('first'); emit({ n: 2 }); emit({ type: 'text', text: 'third' }); console.log('done'); return 99"
    result = await run(client, code)
    assert [block.text for block in result.content] == ["first", '{"n":2}', "third", "Logs:\n[log] done"]
    assert result.structured_content == {"status": "completed", "result": 99, "logs": ["[log] done"], "emitted": 3}


async def test_the_skill_says_where_the_return_value_goes_once_something_is_emitted(client: Client) -> None:
    """A model that believes its return value is shown after its emitted output leaves the answer where a client
    reading only the text never shows it: the skill must describe the rendering that actually happens."""
    result = await run(client, "emit('shown'); return 'the answer'")
    assert [block.text for block in result.content] == ["shown"]
    assert result.structured_content["result"] == "the answer"
    guide = text_of(await client.call_tool("skills", {"name": "execute"}))
    rule = " ".join(next(line for line in guide.split("\n- ") if line.startswith("Use `emit(value)`")).split())
    assert "before the return value" not in rule
    assert "not the return value, which is kept only in the structured result" in rule


async def test_thrown_error(client: Client) -> None:
    result = await run(client, 'throw new Error("boom")')
    assert result.is_error
    assert text_of(result).startswith("Error: boom")
    assert result.structured_content["status"] == "error"
    assert result.structured_content["error"].startswith("boom")


async def test_syntax_error_is_reported_verbatim(client: Client) -> None:
    result = await run(client, "const a = 1;\nreturn 6 *;")
    text = text_of(result)
    assert result.is_error
    assert "Unexpected" in text
    assert "(2:" in text
    assert "Internal tool error" not in text


async def test_runtime_error_points_into_the_agents_code(client: Client) -> None:
    result = await run(client, "const a = 1;\nconst b = 2;\nnull.boom;")
    assert re.search(r"\(3:\d+\)", text_of(result)), text_of(result)


async def test_typescript_is_stripped(client: Client) -> None:
    code = """
interface User { id: number; name: string; tags?: string[] }
type Pick2<T, K extends keyof T> = { [P in K]: T[P] };
function first<T>(items: T[]): T | undefined { return items[0]; }
const users: User[] = [{ id: 1, name: "ada" }, { id: 2, name: "bob" }];
const found = users.find((u: User): boolean => u.id === 2)!;
const name = (found as User).name as string;
return { name, first: first<User>(users)!.name } satisfies Record<string, string>;
"""
    result = await run(client, code)
    assert result.structured_content["result"] == {"name": "bob", "first": "ada"}


async def test_fenced_code_and_lone_functions(client: Client) -> None:
    assert text_of(await run(client, "Here:\n```ts\nconst x: number = 5;\nreturn x * 2;\n```")) == "10"
    assert text_of(await run(client, "async () => { return 'arrow'; }")) == "arrow"
    assert text_of(await run(client, "function main() { return 'named'; }")) == "named"
    assert text_of(await run(client, "export default 3 + 4")) == "7"


async def test_invalid_arguments_are_tool_errors(client: Client) -> None:
    for arguments in ({"code": "   "}, {}):
        result = await client.call_tool("execute", arguments)
        assert result.is_error
        assert text_of(result).startswith(
            "MCP error -32602: Input validation error: Invalid arguments for tool execute:"
        )


async def test_results_past_the_cap_are_truncated(client: Client) -> None:
    result = await run(client, "return 'x'.repeat(40000);")
    assert text_of(result) == "x" * 30000 + "\n... [truncated 10000 chars]"
    assert len(result.structured_content["result"]) == 40000


async def test_tool_catalog_from_code(client: Client) -> None:
    code = """
    const found = await tools.search({ query: "integrations list" });
    const listed = await tools.executor.coreTools.integrations.list({});
    const missing = await tools.nope.nothing({});
    const integrations = await tools.executor.integrations.list({});
    return { paths: found.items.map((i) => i.path), listed, missing: missing.error.code, count: integrations.total };
    """
    result = (await run(client, code)).structured_content["result"]
    assert result["paths"][0] == "executor.coreTools.integrations.list"
    assert result["listed"]["ok"] is True
    assert result["listed"]["data"]["integrations"][0]["slug"] == "executor"
    assert result["missing"] == "tool_not_found"
    assert result["count"] == 1


async def test_tools_proxy_contract(client: Client) -> None:
    code = """
    const seen = {};
    try { Object.keys(tools); } catch (e) { seen.keys = e.message; }
    try { Object.keys(tools.github); } catch (e) { seen.sub = e.message; }
    try { await tools(); } catch (e) { seen.root = e.message; }
    seen.thenable = typeof tools.then;
    try { await tools.search("nope"); } catch (e) { seen.bad = e.message; }
    return seen;
    """
    seen = (await run(client, code)).structured_content["result"]
    assert seen["keys"].startswith("tools is a lazy proxy and cannot be enumerated. Use tools.search(")
    assert seen["sub"].startswith("tools.github is a lazy proxy")
    assert seen["root"] == "Tool path missing in invocation"
    assert seen["thenable"] == "undefined"
    assert seen["bad"].startswith("tools.search expects an object")


async def test_skills(client: Client) -> None:
    index = await client.call_tool("skills", {})
    assert text_of(index).startswith('Available skills. Fetch one with `skills({ name: "<name>" })`.')
    guide = await client.call_tool("skills", {"name": "execute"})
    assert text_of(guide).startswith("# execute")
    for marker in ("## Workflow", "## Rules", "Use `emit(value)` to append user-visible output"):
        assert marker in text_of(guide)
    assert guide.structured_content is None
    unknown = await client.call_tool("skills", {"name": "nope"})
    assert unknown.is_error
    assert text_of(unknown).startswith('No skill named "nope".\n\nAvailable skills.')


async def test_tool_listing(client: Client) -> None:
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(listed) == ["execute", "skills", "resume"]
    assert listed["execute"].input_schema["required"] == ["code"]
    assert listed["execute"].description.startswith("Execute TypeScript in a sandboxed runtime.")


async def test_two_sessions_do_not_share_state(executor: ServerUnderTest) -> None:
    code = (
        "globalThis.counter = (globalThis.counter || 0) + 1; await new Promise(r => setTimeout(r, 100)); return counter"
    )
    results: list[str] = []

    async def session() -> None:
        async with connect(executor.url, mode="legacy") as (client, _):
            results.append(text_of(await run(client, code)))
            results.append(text_of(await run(client, code)))

    async with trio.open_nursery() as both:
        both.start_soon(session)
        both.start_soon(session)
    assert results == ["1"] * 4


async def test_terminating_the_session_cancels_its_execution(executor: ServerUnderTest) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        session_id = await open_session(http, executor.url)
        answer: list[httpx.Response] = []

        async def long_execution() -> None:
            code = "await new Promise((resolve) => setTimeout(resolve, 20000)); return 'too late';"
            answer.append(await post(http, executor.url, call_body(7, "execute", code=code), session_id))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_execution)
            await trio.sleep(0.3)
            with trio.fail_after(5):
                deleted = await http.delete(executor.url, headers={"mcp-session-id": session_id})
        assert deleted.status_code == 200
        assert sse_messages(answer[0].text) == [
            {"jsonrpc": "2.0", "id": 7, "error": {"code": -32001, "message": "Session timed out, please reconnect"}}
        ]


async def test_logs_and_emitted_items_are_capped(client: Client) -> None:
    code = """
    console.log("y".repeat(20000));
    for (let i = 0; i < 1005; i++) console.log(i);
    let refused = null;
    try { for (let i = 0; i < 1001; i++) emit(i); } catch (e) { refused = e.message; }
    return refused;
    """
    result = await run(client, code)
    logs = result.structured_content["logs"]
    assert len(logs) == 1001
    assert logs[0] == "[log] " + "y" * 9994 + "... [truncated 10006 chars]"
    assert logs[-1] == "[executor] 6 more log lines were dropped"
    assert result.structured_content["result"] == "emit() takes at most 1000 items per execution"
    assert result.structured_content["emitted"] == 1000

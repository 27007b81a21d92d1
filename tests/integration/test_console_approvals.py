"""Browser approvals over raw httpx against a real `--auth jwt` server: the official MCP client on
`/mcp?elicitation_mode=browser` pauses, the console's approvals API (with a visitor's cookie and CSRF token)
lists and answers the pause, and the client's `resume` waits for that answer.

The gated tool is `executor.coreTools.policies.create` (gated by its own annotation): each time it runs it
creates one policy, so counting the policies counts the runs.
"""

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest
from tests.console_support import Visitor, console_server, visitor
from tests.sdk import connect, execution_id, text_of

CREATE = (
    'return await tools.executor.coreTools.policies.create({ owner: "user", pattern: "github.*", action: "block" });'
)
CREATE_PATH = "executor.coreTools.policies.create"
DECLINED = f'Tool "{CREATE_PATH}" requires approval but the request was declined by the user.'
ALICE = mint("alice", "acme")


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path)


def mcp_url(server: ServerUnderTest, query: str = "?elicitation_mode=browser") -> str:
    return server.url + query


async def paused(client: Client, code: str = CREATE) -> str:
    result = await client.call_tool("execute", {"code": code})
    structured = result.structured_content
    assert structured is not None
    assert structured["status"] in ("user_approval_required", "waiting_for_interaction"), text_of(result)
    return structured["executionId"]


async def own_policies(http: httpx.AsyncClient, server: ServerUnderTest, token: str = ALICE) -> list[Any]:
    listed = await http.get(server.running.url + "/api/policies", headers=bearer(token))
    assert listed.status_code == 200
    return [p for p in listed.json() if p["owner"] == "user"]


async def decide(http: httpx.AsyncClient, who: Visitor, execution: str, action: str) -> httpx.Response:
    return await http.post(f"{who.base_url}/api/approvals/{execution}", json={"action": action}, headers=who.headers())


async def test_a_browser_pause_points_at_its_page_and_is_listed_for_its_owner_only(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    async with connect(mcp_url(executor), headers=bearer(ALICE), mode="legacy") as (client, _):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["resume"].input_schema["required"] == ["executionId"]
        assert list(tools["resume"].input_schema["properties"]) == ["executionId"]
        assert tools["resume"].description.startswith("Request user approval to resume a paused execution.\n")
        result = await client.call_tool("execute", {"code": CREATE})
        assert not result.is_error
        structured = result.structured_content
        execution = structured["executionId"]
        assert structured == {
            "status": "user_approval_required",
            "executionId": execution,
            "approvalUrl": f"{base}/approvals/{execution}",
            "resumePrompt": structured["resumePrompt"],
        }
        assert text_of(result).startswith("User approval required.\n\n")
        assert f"\n{base}/approvals/{execution}\n" in text_of(result)

        alice = await visitor(http, base, ALICE)
        listed = await http.get(f"{base}/api/approvals", headers=alice.headers())
        assert listed.status_code == 200
        (approval,) = listed.json()
        assert approval["executionId"] == execution
        assert approval["tool"] == CREATE_PATH
        assert approval["outcome"] == "pending"
        assert approval["question"] == f"Approve {CREATE_PATH}?"
        assert '"pattern": "github.*"' in approval["arguments"]
        assert approval["policy"]["source"] == "annotation"
        assert approval["sessionMode"] == "browser"
        assert approval["createdAt"] < approval["expiresAt"]
        one = await http.get(f"{base}/api/approvals/{execution}", headers=alice.headers())
        assert one.json() == approval

        # Another account of the org, and the same account in another org: nothing to see, nothing to answer.
        for stranger in (mint("bob", "acme"), mint("alice", "globex")):
            other = await visitor(http, base, stranger)
            assert (await http.get(f"{base}/api/approvals", headers=other.headers())).json() == []
            hidden = await http.get(f"{base}/api/approvals/{execution}", headers=other.headers())
            assert hidden.status_code == 404
            assert hidden.json() == {"error": "Paused execution not found"}
            assert (await decide(http, other, execution, "accept")).status_code == 404
            page = await http.get(f"{base}/approvals/{execution}", headers=other.headers())
            assert page.status_code == 404
            assert CREATE_PATH not in page.text
            assert "Approval not found" in page.text
            # Nor by bearer, on the API or over MCP (where a live foreign pause is refused, never resumed).
            assert (await http.get(f"{base}/api/approvals", headers=bearer(stranger))).json() == []
        assert (await http.get(f"{base}/api/approvals/{execution}", headers=alice.headers())).json() == approval
        assert await own_policies(http, executor) == []


async def test_a_change_without_the_csrf_token_or_as_a_form_is_refused(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    async with connect(mcp_url(executor), headers=bearer(ALICE), mode="legacy") as (client, _):
        execution = await paused(client)
        alice = await visitor(http, base, ALICE)
        url = f"{base}/api/approvals/{execution}"
        no_token = await http.post(url, json={"action": "accept"}, headers=alice.headers(csrf=False))
        assert no_token.status_code == 403
        assert no_token.json() == {"error": "Forbidden: missing or invalid CSRF token"}
        form = await http.post(url, data={"action": "accept"}, headers=alice.headers(csrf=False))
        assert form.status_code == 403
        form_with_token = await http.post(url, data={"action": "accept"}, headers=alice.headers())
        assert form_with_token.status_code == 415
        bad = await http.post(url, json={"action": "cancel"}, headers=alice.headers())
        assert bad.status_code == 400
        assert (await http.get(url, headers=alice.headers(csrf=False))).status_code == 403
        assert (await http.get(url, headers=alice.headers())).json()["outcome"] == "pending"
        assert await own_policies(http, executor) == []


async def test_two_decisions_at_once_one_wins_and_the_tool_runs_once(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    async with connect(mcp_url(executor), headers=bearer(ALICE), mode="legacy") as (client, _):
        execution = await paused(client)
        alice = await visitor(http, base, ALICE)
        answers: list[httpx.Response] = []

        async def answer(action: str) -> None:
            answers.append(await decide(http, alice, execution, action))

        async with trio.open_nursery() as both:
            both.start_soon(answer, "accept")
            both.start_soon(answer, "decline")
        assert sorted(a.status_code for a in answers) == [200, 409]
        won = next(a.json() for a in answers if a.status_code == 200)
        lost = next(a.json() for a in answers if a.status_code == 409)
        assert won["alreadyAnswered"] is False
        assert won["answeredBy"] == "console"
        assert lost["outcome"] == won["outcome"]
        assert lost["alreadyAnswered"] is True
        assert lost["error"] == f"This approval was already answered: {won['outcome']} on the approvals page"

        resumed = await client.call_tool("resume", {"executionId": execution})
        again = await client.call_tool("resume", {"executionId": execution})
        assert text_of(again) == text_of(resumed)
        if won["outcome"] == "approved":
            assert resumed.structured_content["result"]["ok"] is True
            assert len(await own_policies(http, executor)) == 1
        else:
            assert text_of(resumed).startswith(f"Error: {DECLINED}")
            assert await own_policies(http, executor) == []
        ended = (await http.get(f"{base}/api/approvals/{execution}", headers=alice.headers())).json()
        assert ended["outcome"] == won["outcome"]
        assert ended["ledTo"] == ("completed" if won["outcome"] == "approved" else "error")
        assert (await http.get(f"{base}/api/approvals", headers=alice.headers())).json() == []


async def test_a_decision_on_the_page_then_the_models_resume_replays_it(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    """A model-mode session's pause is on the page too; the page's answer comes first, so it counts."""
    base = executor.running.url
    async with connect(executor.url, headers=bearer(ALICE), mode="legacy") as (client, _):
        execution = await paused(client)
        alice = await visitor(http, base, ALICE)
        (approval,) = (await http.get(f"{base}/api/approvals", headers=alice.headers())).json()
        assert approval["sessionMode"] == "model"
        assert (await decide(http, alice, execution, "decline")).json()["outcome"] == "declined"
        first = await client.call_tool("resume", {"executionId": execution, "action": "accept"})
        assert first.is_error
        assert text_of(first).startswith(f"Error: {DECLINED}")
        second = await client.call_tool("resume", {"executionId": execution, "action": "accept"})
        assert text_of(second) == text_of(first)
        late = await decide(http, alice, execution, "accept")
        assert late.status_code == 409
        assert late.json()["outcome"] == "declined"
    assert await own_policies(http, executor) == []


async def test_the_models_resume_first_then_the_page_hears_it(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    async with connect(executor.url, headers=bearer(ALICE), mode="legacy") as (client, _):
        execution = await paused(client)
        accepted = await client.call_tool("resume", {"executionId": execution, "action": "accept"})
        assert accepted.structured_content["result"]["ok"] is True
        alice = await visitor(http, base, ALICE)
        late = await decide(http, alice, execution, "decline")
        assert late.status_code == 409
        assert late.json()["error"] == "This approval was already answered: approved by the agent's resume"
    assert len(await own_policies(http, executor)) == 1


async def test_a_browser_resume_waits_for_the_decision(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base = executor.running.url
    async with connect(mcp_url(executor), headers=bearer(ALICE), mode="legacy") as (client, _):
        execution = await paused(client)
        alice = await visitor(http, base, ALICE)
        results: list[Any] = []

        async def resume() -> None:
            results.append(await client.call_tool("resume", {"executionId": execution}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume)
            await trio.sleep(0.5)  # give the resume every chance to answer early; it must not
            assert results == []
            assert (await decide(http, alice, execution, "accept")).status_code == 200
        (resumed,) = results
        assert resumed.structured_content["status"] == "completed"
        assert resumed.structured_content["result"]["data"]["pattern"] == "github.*"
    assert len(await own_policies(http, executor)) == 1


async def test_a_pause_that_asks_again_is_worded_for_the_browser_again(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    code = CREATE.removeprefix("return ") + CREATE.replace("github.*", "gitlab.*")
    async with connect(mcp_url(executor), headers=bearer(ALICE), mode="legacy") as (client, _):
        first = await paused(client, code)
        alice = await visitor(http, base, ALICE)
        assert (await decide(http, alice, first, "accept")).status_code == 200
        again = await client.call_tool("resume", {"executionId": first})
        second = again.structured_content["executionId"]
        assert again.structured_content["status"] == "user_approval_required"
        assert again.structured_content["approvalUrl"] == f"{base}/approvals/{second}"
        ended = (await http.get(f"{base}/api/approvals/{first}", headers=alice.headers())).json()
        assert ended["nextExecutionId"] == second
        assert ended["ledTo"] == "user_approval_required"
        assert (await decide(http, alice, second, "accept")).status_code == 200
        done = await client.call_tool("resume", {"executionId": second})
        assert done.structured_content["result"]["data"]["pattern"] == "gitlab.*"
    assert len(await own_policies(http, executor)) == 2


async def test_an_org_rule_is_named_as_the_policy_that_asked(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    rule = {"owner": "org", "pattern": "executor.coreTools.policies.list", "action": "require_approval"}
    created = await http.post(f"{base}/api/policies", json=rule, headers=bearer(ALICE))
    assert created.status_code == 200
    async with connect(executor.url, headers=bearer(ALICE), mode="legacy") as (client, _):
        result = await client.call_tool("execute", {"code": "return await tools.executor.coreTools.policies.list({});"})
        assert text_of(result).startswith(
            "Execution paused: Approve executor.coreTools.policies.list? "
            "(matched policy: executor.coreTools.policies.list)\n\nArguments:\n{}"
        )
        alice = await visitor(http, base, ALICE)
        (approval,) = (await http.get(f"{base}/api/approvals", headers=alice.headers())).json()
        assert approval["executionId"] == execution_id(result)
        assert approval["policy"] == {
            "source": "policy",
            "id": created.json()["id"],
            "owner": "org",
            "pattern": "executor.coreTools.policies.list",
            "words": f"org policy executor.coreTools.policies.list ({created.json()['id']})",
        }
        page = await http.get(f"{base}/approvals/{approval['executionId']}", headers=alice.headers())
        assert page.status_code == 200
        assert f"org policy executor.coreTools.policies.list ({created.json()['id']})" in page.text
        assert '<pre id="arguments">{}</pre>' in page.text
        listing = await http.get(f"{base}/approvals", headers=alice.headers())
        assert approval["executionId"] in listing.text


async def test_the_list_offers_approve_and_decline_on_each_approval_with_its_arguments_escaped(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    hostile = CREATE.replace('"github.*"', '"</pre><script>x()</script>"')
    async with connect(mcp_url(executor), headers=bearer(ALICE), mode="legacy") as (client, _):
        execution = await paused(client, hostile)
        alice = await visitor(http, base, ALICE)
        listing = await http.get(f"{base}/approvals", headers=alice.headers())
        assert listing.status_code == 200
        item = re.search(
            rf'<li data-execution-id="{execution}" data-tool="{CREATE_PATH}">(.*?)</li>', listing.text, re.S
        )
        assert item is not None
        assert '<button type="button" class="approve" data-action="accept">Approve</button>' in item.group(1)
        assert '<button type="button" class="danger" data-action="decline">Decline</button>' in item.group(1)
        assert "&#34;pattern&#34;: &#34;&lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;&#34;" in item.group(1)
        assert "<script>x()" not in listing.text
        assert 'id="empty" class="empty" hidden' in listing.text
        assert await own_policies(http, executor) == []


async def test_passthrough_in_browser_mode_pauses_and_waits_the_same_way(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    url = mcp_url(executor, "?mode=passthrough&elicitation_mode=browser")
    async with connect(url, headers=bearer(ALICE), mode="legacy") as (client, _):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert list(tools) == ["search", "invoke", "resume"]
        assert tools["resume"].input_schema["required"] == ["executionId"]
        assert tools["resume"].description.startswith("Request user approval to resume a paused invoke.\n")
        args = {"owner": "user", "pattern": "github.*", "action": "block"}
        result = await client.call_tool("invoke", {"path": CREATE_PATH, "args": args})
        structured = result.structured_content
        assert structured["status"] == "user_approval_required"
        execution = structured["executionId"]
        alice = await visitor(http, base, ALICE)
        (approval,) = (await http.get(f"{base}/api/approvals", headers=alice.headers())).json()
        assert approval["tool"] == CREATE_PATH
        assert (await decide(http, alice, execution, "accept")).status_code == 200
        done = await client.call_tool("resume", {"executionId": execution})
        assert done.structured_content["result"]["ok"] is True
        unknown = await client.call_tool("resume", {"executionId": "exec_nope"})
        assert unknown.structured_content["status"] == "execution_not_found"
        assert "call the invoke tool again" in text_of(unknown)
    assert len(await own_policies(http, executor)) == 1


@pytest.mark.slow
async def test_an_unanswered_browser_pause_expires_with_the_window(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = await console_server(nursery, data_dir, tmp_path, approval_window=2.0)
    base = server.running.url
    async with connect(mcp_url(server), headers=bearer(ALICE), mode="legacy") as (client, _):
        execution = await paused(client)
        late = await client.call_tool("resume", {"executionId": execution})  # waits out the window
        assert late.is_error
        assert late.structured_content["status"] == "execution_expired"
        assert "run the execute tool again" in text_of(late)
        alice = await visitor(http, base, ALICE)
        assert (await http.get(f"{base}/api/approvals/{execution}", headers=alice.headers())).json()["outcome"] == (
            "expired"
        )
        refused = await decide(http, alice, execution, "accept")
        assert refused.status_code == 409
        assert refused.json()["error"] == "This approval is no longer waiting: it expired before anyone answered"
    assert await own_policies(http, server) == []


async def test_a_pause_whose_session_was_terminated_ends_and_cannot_be_approved(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    """The owning session is terminated while a resume from another session of the account waits: the
    resume is answered (it does not hang), the page says the execution ended (nobody let it expire), and a
    late Approve is refused without running the tool."""
    base = executor.running.url
    alice = await visitor(http, base, ALICE)
    async with (
        connect(mcp_url(executor), headers=bearer(ALICE), mode="legacy") as (owner, ids),
        connect(mcp_url(executor), headers=bearer(ALICE), mode="legacy") as (other, _),
    ):
        execution = await paused(owner)
        results: list[Any] = []

        async def wait_in_another_session() -> None:
            results.append(await other.call_tool("resume", {"executionId": execution}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_in_another_session)
            await trio.sleep(0.2)
            ended = await http.delete(f"{base}/api/sessions/{ids.session_id}", headers=alice.headers())
            assert ended.status_code == 200
        (late,) = results
        assert late.is_error
        assert late.structured_content["status"] == "execution_expired"
        view = (await http.get(f"{base}/api/approvals/{execution}", headers=alice.headers())).json()
        assert view["outcome"] == "ended"
        refused = await decide(http, alice, execution, "accept")
        assert refused.status_code == 409
        assert refused.json()["error"] == "This approval is no longer waiting: it ended before anyone answered"
        assert (await http.get(f"{base}/api/approvals", headers=alice.headers())).json() == []
    assert await own_policies(http, executor) == []

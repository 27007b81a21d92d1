"""The console's audit page over raw httpx against a real `--auth jwt` server with `--org-admin-claim`: its rows are
exactly what `GET /api/audit` answers the same visitor (an admin sees the org's calls, a member only its own,
another org none), its session and tool filters and its pager work, and hostile filters are answered with the
form and the reason, escaped, never a server error."""

import html
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest
from tests.console_support import Visitor, console_server, visitor
from tests.sdk import connect, text_of

ALICE = mint("alice", "acme", role="admin")
CAROL = mint("carol", "acme")
LIST = "executor.coreTools.integrations.list"
POLICIES = "executor.coreTools.policies.list"
WAIT = 15
ROW = re.compile(
    r'<a class="tool" href="([^"]*)"><code>([^<]*)</code></a>.*?<a class="session" href="([^"]*)"><code>([^<]*)</code>',
    re.S,
)


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path, org_admin_claim=("role", "admin"))


async def calls(server: ServerUnderTest, token: str, code: str) -> None:
    """Run `code` in a session of its own for the bearer `token`."""
    async with connect(server.url, headers=bearer(token), mode="legacy") as (client, _):
        result = await client.call_tool("execute", {"code": code})
        assert not result.is_error, text_of(result)


async def api_records(http: httpx.AsyncClient, server: ServerUnderTest, token: str, count: int) -> list[Any]:
    """The bearer's `/api/audit` records once there are `count` (the writer batches in the background)."""
    with trio.fail_after(WAIT):
        while True:
            answer = await http.get(server.running.url + "/api/audit", params={"limit": "1000"}, headers=bearer(token))
            assert answer.status_code == 200, answer.text
            if len(items := answer.json()["items"]) >= count:
                return items
            await trio.sleep(0.05)


async def audit_page(http: httpx.AsyncClient, who: Visitor, query: str = "") -> httpx.Response:
    return await http.get(who.base_url + "/audit" + query, headers=who.headers())


def rows(page: httpx.Response) -> list[tuple[str, str, str, str]]:
    """(tool link, tool, session link, session) of each row, unescaped."""
    return [tuple(html.unescape(part) for part in found) for found in ROW.findall(page.text)]


async def test_each_visitor_sees_what_the_api_answers_them_and_the_filters_narrow_it(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    await calls(executor, ALICE, f"await tools.{LIST}({{}}); return (await tools.{POLICIES}({{}})).ok;")
    await calls(executor, ALICE, f"return (await tools.{LIST}({{}})).ok;")
    await calls(executor, CAROL, f"return (await tools.{POLICIES}({{}})).ok;")
    org = await api_records(http, executor, ALICE, 4)
    own = await api_records(http, executor, CAROL, 1)
    assert len(org) == 4
    assert [record["account"] for record in own] == ["carol"]

    alice, carol = await visitor(http, base, ALICE), await visitor(http, base, CAROL)
    bob = await visitor(http, base, mint("bob", "globex", role="admin"))
    admin_page = await audit_page(http, alice)
    assert admin_page.status_code == 200
    assert [(tool, session) for _, tool, _, session in rows(admin_page)] == [
        (record["tool"], record["sessionId"]) for record in org
    ]
    assert 'aria-current="page">Audit</a>' in admin_page.text
    assert 'id="own-only"' not in admin_page.text
    member_page = await audit_page(http, carol)
    assert [(tool, session) for _, tool, _, session in rows(member_page)] == [(POLICIES, own[0]["sessionId"])]
    assert 'id="own-only"' in member_page.text
    stranger = await audit_page(http, bob)
    assert rows(stranger) == []
    assert 'id="no-calls"' in stranger.text

    # A row's session links to that session's calls, its tool to that tool's (as a glob matching only it).
    first_session = org[-1]["sessionId"]
    session_link = next(link for _, _, link, session in rows(admin_page) if session == first_session)
    by_session = await http.get(base + session_link, headers=alice.headers())
    assert [session for *_, session in rows(by_session)] == [first_session, first_session]
    assert f'value="{first_session}"' in by_session.text
    tool_link = next(link for link, tool, _, _ in rows(admin_page) if tool == POLICIES)
    by_tool = await http.get(base + tool_link, headers=alice.headers())
    assert [tool for _, tool, _, _ in rows(by_tool)] == [POLICIES, POLICIES]
    globbed = await audit_page(http, alice, "?tool=executor.coreTools.integrations.*")
    assert [tool for _, tool, _, _ in rows(globbed)] == [LIST, LIST]
    none = await audit_page(http, alice, "?session=nope")
    assert rows(none) == []
    assert "No calls match these filters." in none.text
    recent = await audit_page(http, alice, "?since=1h&session=&tool=")
    assert len(rows(recent)) == 4  # an empty filter is no filter


async def test_fifty_calls_make_a_page_and_the_older_link_pages_on(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    await calls(executor, ALICE, f"for (let i = 0; i < 53; i++) await tools.{LIST}({{}}); return 1;")
    await api_records(http, executor, ALICE, 53)
    alice = await visitor(http, base, ALICE)
    first = await audit_page(http, alice, f"?tool={LIST}")
    assert len(rows(first)) == 50
    assert 'id="newest"' not in first.text
    older = re.search(r'<a id="older" href="([^"]*)">', first.text)
    assert older is not None
    link = html.unescape(older.group(1))
    assert link.startswith(f"/audit?tool={LIST}&before=")  # the filter travels with the cursor
    second = await http.get(base + link, headers=alice.headers())
    assert len(rows(second)) == 3
    assert 'id="older"' not in second.text
    assert 'id="newest" href="/audit?tool=executor.coreTools.integrations.list"' in second.text


async def test_hostile_filters_get_the_form_back_with_the_reason_escaped(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, ALICE)
    script = await http.get(base + "/audit", params={"tool": '"><script>x()</script>'}, headers=alice.headers())
    assert script.status_code == 200
    assert "<script>x()" not in script.text
    assert 'value="&#34;&gt;&lt;script&gt;x()&lt;/script&gt;"' in script.text
    for params, words in (
        ({"session": "s" * 513}, "a filter is longer than 512 characters"),
        ({"since": "1" * 60}, "since is in the future"),
        ({"since": "yesterday"}, "since must be a duration"),
        ({"before": "not-hex"}, "the page cursor is not one this page made"),
    ):
        refused = await http.get(base + "/audit", params=params, headers=alice.headers())
        assert refused.status_code == 400, params
        assert f"Those filters do not work: {words}" in refused.text
        assert 'id="audit-filters"' in refused.text
    stranger = await http.get(base + "/audit")
    assert stranger.status_code == 303
    assert stranger.headers["location"] == "/signin?next=%2Faudit"

"""Browser approvals without a server: the browser-mode wording, the book's listing, look-up and decisions,
a run that pauses in browser mode, and the views the approvals API and pages show."""

import trio
import trio.testing

from executor_mcp.execution.engine import ToolCall
from executor_mcp.execution.results import (
    BROWSER_RESUME_PROMPT,
    approval_url,
    render_browser_paused,
)
from executor_mcp.execution.runs import (
    MAX_LISTED,
    Ended,
    Pause,
    PendingApprovals,
    Run,
)
from executor_mcp.storage.records import Owner
from executor_mcp.tools.approval import (
    AGENT,
    CONSOLE,
    TOOL_DEFAULT,
    Approval,
    ApprovalAnswer,
    AskedBy,
    Interaction,
    refuse_unless_accepted,
)
from executor_mcp.tools.errors import ToolThrow
from executor_mcp.transport.approvals_api import already_answered, decided_view, ended_view, pause_view
from tests.admissions import admission, admitted

ALICE = Owner("alice", "acme")
NAMESAKE = Owner("alice", "evil")  # the same account name in another org is someone else
BOB = Owner("bob", "acme")
RULE = AskedBy("pol_1", "org", "executor.coreTools.policies.list")
ASKED = Interaction(
    "executor.coreTools.policies.list",
    "Approve executor.coreTools.policies.list? (matched policy: executor.coreTools.policies.list)\n\nArguments:\n{}",
    {},
    asked_by=RULE,
    question="Approve executor.coreTools.policies.list? (matched policy: executor.coreTools.policies.list)",
)
DONE = {"content": [{"type": "text", "text": "42"}], "structuredContent": {"status": "completed", "result": 42}}
REFUSED = {"content": [{"type": "text", "text": "Error: declined"}], "isError": True, "structuredContent": {}}


def opened(book: PendingApprovals, owner: Owner, name: str, created_at: float = 0.0) -> Pause:
    pause = Pause(id=name, owner=owner, interaction=ASKED, expires_at=created_at + 60, ttl=60, created_at=created_at)
    book.open(pause)
    return pause


def a_call() -> ToolCall:
    """The sandbox's call that meets the gate (these runs have no engine behind them)."""
    return ToolCall(1, ASKED.address, lambda: None)


async def gate(book: PendingApprovals, pause: Pause) -> None:
    """What a run does at its gate: wait for the first answer, go on, and resolve the pause with the result."""
    answer = await pause.answer.wait()
    book.resolve(pause, DONE if answer.action == "accept" else REFUSED)


# -- wording ----------------------------------------------------------------------------------------


def test_a_browser_pause_sends_the_user_to_the_approval_page_and_the_model_to_resume() -> None:
    url = approval_url("https://mcp.example/", "exec_1")
    assert url == "https://mcp.example/approvals/exec_1"
    assert approval_url("http://127.0.0.1:8080", "exec_a/b?c") == "http://127.0.0.1:8080/approvals/exec_a%2Fb%3Fc"
    result = render_browser_paused("exec_1", url)
    assert result["content"] == [
        {
            "type": "text",
            "text": "User approval required.\n\n"
            "Tell the user to open this URL while signed in and approve or decline the paused interaction:\n"
            "https://mcp.example/approvals/exec_1\n\n"
            "Required next steps for this agent:\n"
            "Return text to the user telling them to approve the action at this approvalUrl. Only after you have "
            "prompted the user, call the `resume` tool with this executionId; `resume` will wait for the user's "
            "browser decision.",
        }
    ]
    assert result["structuredContent"] == {
        "status": "user_approval_required",
        "executionId": "exec_1",
        "approvalUrl": url,
        "resumePrompt": BROWSER_RESUME_PROMPT,
    }
    assert "isError" not in result


def test_the_policy_that_asked_is_a_rule_or_the_tools_own_default() -> None:
    assert RULE.as_json() == {
        "source": "policy",
        "id": "pol_1",
        "owner": "org",
        "pattern": "executor.coreTools.policies.list",
    }
    assert RULE.words() == "org policy executor.coreTools.policies.list (pol_1)"
    assert TOOL_DEFAULT.as_json() == {"source": "annotation"}
    assert "own default" in TOOL_DEFAULT.words()


# -- the book ---------------------------------------------------------------------------------------


def test_pending_lists_only_the_owners_unanswered_pauses_newest_first() -> None:
    book = PendingApprovals(approval_window=60)
    first, second = opened(book, ALICE, "exec_1", 1), opened(book, ALICE, "exec_2", 2)
    opened(book, NAMESAKE, "exec_3")
    opened(book, BOB, "exec_4")
    assert [p.id for p in book.pending(ALICE)] == ["exec_2", "exec_1"]
    assert [p.id for p in book.pending(NAMESAKE)] == ["exec_3"]
    book.decide("exec_2", ALICE, "accept")
    assert book.pending(ALICE) == [first]  # answered: no longer waiting for anyone
    book.resolve(second, DONE)
    book.expire(first)
    assert book.pending(ALICE) == []


def test_a_listing_is_bounded() -> None:
    book = PendingApprovals(approval_window=60)
    for index in range(MAX_LISTED + 5):
        opened(book, ALICE, f"exec_{index}", index)
    listed = book.pending(ALICE)
    assert len(listed) == MAX_LISTED
    assert listed[0].id == f"exec_{MAX_LISTED + 4}"


def test_a_strangers_pause_is_not_found_and_stays_unanswered() -> None:
    book = PendingApprovals(approval_window=60)
    pause = opened(book, ALICE, "exec_1")
    for stranger in (BOB, NAMESAKE):
        assert book.lookup("exec_1", stranger) is None
        assert book.decide("exec_1", stranger, "accept") is None
    assert not pause.answer.done
    assert book.lookup("exec_1", ALICE) is pause
    assert book.lookup("exec_unknown", ALICE) is None
    book.resolve(pause, DONE)
    assert book.lookup("exec_1", BOB) is None
    assert isinstance(book.lookup("exec_1", ALICE), Ended)


def test_an_admins_pause_is_not_found_by_the_same_account_without_the_role() -> None:
    book = PendingApprovals(approval_window=60)
    admin = Owner("alice", "acme", org_admin=True)
    opened(book, admin, "exec_1")
    assert book.pending(ALICE) == []
    assert book.decide("exec_1", ALICE, "accept") is None
    assert book.decide("exec_1", admin, "accept") is not None


async def test_the_first_decision_wins_and_a_later_one_hears_how_it_went() -> None:
    book = PendingApprovals(approval_window=60)
    pause = opened(book, ALICE, "exec_1")
    first = book.decide("exec_1", ALICE, "decline")
    second = book.decide("exec_1", ALICE, "accept")
    assert first is not None
    assert second is not None
    assert (first.outcome, first.by, first.first) == ("declined", CONSOLE, True)
    assert (second.outcome, second.by, second.first) == ("declined", CONSOLE, False)
    await gate(book, pause)
    late = book.decide("exec_1", ALICE, "accept")
    assert late is not None
    assert (late.outcome, late.by, late.first) == ("declined", CONSOLE, False)
    assert already_answered(late) == "This approval was already answered: declined on the approvals page"
    assert decided_view(late) == {
        "executionId": "exec_1",
        "outcome": "declined",
        "answeredBy": "console",
        "alreadyAnswered": True,
    }


async def test_a_decision_then_the_models_resume_replays_the_same_outcome() -> None:
    book = PendingApprovals(approval_window=60)
    pause = opened(book, ALICE, "exec_1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate, book, pause)
        await trio.testing.wait_all_tasks_blocked()
        decided = book.decide("exec_1", ALICE, "accept")
    assert decided is not None
    assert decided.first
    # The model's own answer comes second: it hears what the first one led to, whatever it says.
    assert await book.resume("exec_1", ALICE, ApprovalAnswer("decline")) == DONE
    assert await book.resume("exec_1", ALICE, None) == DONE


async def test_the_models_answer_first_makes_the_page_hear_it() -> None:
    book = PendingApprovals(approval_window=60)
    pause = opened(book, ALICE, "exec_1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate, book, pause)
        assert await book.resume("exec_1", ALICE, ApprovalAnswer("accept")) == DONE
    decided = book.decide("exec_1", ALICE, "decline")
    assert decided is not None
    assert (decided.outcome, decided.by, decided.first) == ("approved", AGENT, False)
    assert already_answered(decided) == "This approval was already answered: approved by the agent's resume"


async def test_a_browser_resume_waits_for_the_decision() -> None:
    book = PendingApprovals(approval_window=60)
    pause = opened(book, ALICE, "exec_1")
    results: list[dict] = []

    async def resume() -> None:
        results.append(await book.resume("exec_1", ALICE, None))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate, book, pause)
        nursery.start_soon(resume)
        await trio.testing.wait_all_tasks_blocked()
        assert results == []  # no answer of its own: it waits
        assert not pause.answer.done
        book.decide("exec_1", ALICE, "accept")
    assert results == [DONE]


async def test_a_browser_resume_of_a_strangers_pause_is_forbidden_and_of_an_expired_one_expired() -> None:
    book = PendingApprovals(approval_window=60)
    pause = opened(book, ALICE, "exec_1")
    assert (await book.resume("exec_1", BOB, None))["structuredContent"]["status"] == "execution_forbidden"
    book.expire(pause)
    assert (await book.resume("exec_1", ALICE, None))["structuredContent"]["status"] == "execution_expired"
    decided = book.decide("exec_1", ALICE, "accept")
    assert decided is not None
    assert (decided.outcome, decided.by, decided.first) == ("expired", None, False)
    assert already_answered(decided) == "This approval is no longer waiting: it expired before anyone answered"


async def test_an_ended_pause_remembers_what_answering_led_to() -> None:
    book = PendingApprovals(approval_window=60)
    first = opened(book, ALICE, "exec_1")
    book.decide("exec_1", ALICE, "accept")
    opened(book, ALICE, "exec_2")
    paused_again = {"status": "user_approval_required", "executionId": "exec_2"}
    book.resolve(first, {"content": [], "structuredContent": paused_again})
    ended = book.lookup("exec_1", ALICE)
    assert isinstance(ended, Ended)
    assert ended_view("exec_1", ended) == {
        "executionId": "exec_1",
        "outcome": "approved",
        "answeredBy": "console",
        "ledTo": "user_approval_required",
        "nextExecutionId": "exec_2",
    }


# -- a run in browser mode --------------------------------------------------------------------------


async def test_a_run_in_browser_mode_pauses_in_its_wording_and_goes_on_once_approved() -> None:
    book = PendingApprovals(approval_window=60)
    slot = await admitted(admission(1), ALICE)
    run = Run(book, slot, mode="browser", worded=lambda pause: render_browser_paused(pause.id, f"/a/{pause.id}"))
    calls = []

    async def body() -> dict:
        await run.gate(a_call(), ASKED)
        calls.append("ran")
        return DONE

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run.drive, body, lambda: REFUSED)
        paused = await run.next.wait()
        structured = paused["structuredContent"]
        assert structured["status"] == "user_approval_required"
        (pause,) = book.pending(ALICE)
        assert pause.id == structured["executionId"]
        assert structured["approvalUrl"] == f"/a/{pause.id}"
        assert pause.mode == "browser"
        view = pause_view(pause)
        assert view["tool"] == "executor.coreTools.policies.list"
        assert view["question"] == ASKED.question
        assert view["arguments"] == "{}"
        assert view["policy"]["id"] == "pol_1"
        assert view["outcome"] == "pending"
        assert view["sessionMode"] == "browser"
        assert calls == []
        decided = book.decide(pause.id, ALICE, "accept")
        assert decided is not None
        assert await book.resume(pause.id, ALICE, None) == DONE
    assert calls == ["ran"]


async def test_a_declined_run_throws_at_its_gate() -> None:
    """The gate gives the answer (who gave it, and the execution's id, for the audit); the call throws from it."""
    book = PendingApprovals(approval_window=60)
    slot = await admitted(admission(1), ALICE)
    run = Run(book, slot, mode="browser", worded=lambda pause: render_browser_paused(pause.id, "u"))
    thrown, answers = [], []

    async def body() -> dict:
        answers.append(approval := await run.gate(a_call(), ASKED))
        try:
            refuse_unless_accepted(ASKED, approval.action)
        except ToolThrow as refused:
            thrown.append(str(refused))
        return REFUSED

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run.drive, body, lambda: REFUSED)
        execution = (await run.next.wait())["structuredContent"]["executionId"]
        book.decide(execution, ALICE, "decline")
        assert await book.resume(execution, ALICE, None) == REFUSED
    assert answers == [Approval("decline", "console", execution)]
    assert thrown == [
        'Tool "executor.coreTools.policies.list" requires approval but the request was declined by the user.'
    ]


async def test_an_unanswered_browser_pause_expires_with_the_window() -> None:
    book = PendingApprovals(approval_window=0.05)
    slot = await admitted(admission(1), ALICE)
    run = Run(book, slot, mode="browser", worded=lambda pause: render_browser_paused(pause.id, "u"))

    async def body() -> dict:
        await run.gate(a_call(), ASKED)
        return DONE

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run.drive, body, lambda: REFUSED)
        execution = (await run.next.wait())["structuredContent"]["executionId"]
        late = await book.resume(execution, ALICE, None)
    assert late["structuredContent"]["status"] == "execution_expired"
    assert book.pending(ALICE) == []


async def test_a_decision_as_the_window_closes_is_honoured_or_told_it_expired(autojump_clock: object) -> None:
    """A decision that lands after the window's deadline fired but before the run noticed must not be told
    "approved" while the run goes on to expire the pause (the tool would never run). Both orders are tried:
    the two wake-ups fall in one scheduler batch, which trio runs in either order."""
    window = 10.0
    for _ in range(40):
        book = PendingApprovals(approval_window=window)
        slot = await admitted(admission(1), ALICE)
        run = Run(book, slot, mode="browser", worded=lambda pause: render_browser_paused(pause.id, "u"))
        ran = []
        decided = []

        async def body(run: Run = run, ran: list = ran) -> dict:
            await run.gate(a_call(), ASKED)
            ran.append("ran")
            return DONE

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run.drive, body, lambda: REFUSED)
            execution = (await run.next.wait())["structuredContent"]["executionId"]
            await trio.sleep(window)  # wakes in the same batch as the gate's deadline
            decided.append(book.decide(execution, ALICE, "accept"))
        (decision,) = decided
        assert decision is not None
        told_approved = decision.first and decision.outcome == "approved"
        assert told_approved == (ran == ["ran"]), (decision, ran)


async def test_an_approved_pause_whose_execution_ends_early_still_reads_approved() -> None:
    """Approved, then the session closed while the tool ran: the page must not say nobody answered."""
    book = PendingApprovals(approval_window=60)
    slot = await admitted(admission(1), ALICE)
    run = Run(book, slot, mode="browser", worded=lambda pause: render_browser_paused(pause.id, "u"))
    running = trio.Event()

    async def body() -> dict:
        await run.gate(a_call(), ASKED)
        running.set()
        await trio.sleep_forever()
        return DONE

    async with trio.open_nursery() as session:
        session.start_soon(run.drive, body, lambda: REFUSED)
        execution = (await run.next.wait())["structuredContent"]["executionId"]
        assert book.decide(execution, ALICE, "accept") is not None
        await running.wait()
        session.cancel_scope.cancel()
    ended = book.lookup(execution, ALICE)
    assert isinstance(ended, Ended)
    assert ended.outcome == "approved"
    late = book.decide(execution, ALICE, "decline")
    assert late is not None
    assert already_answered(late) == "This approval was already answered: approved on the approvals page"
    assert (await book.resume(execution, ALICE, None))["structuredContent"]["status"] == "execution_expired"


async def test_an_ended_pause_does_not_keep_the_content_of_its_answer() -> None:
    """A book remembers 1024 ended pauses per owner: the model's `content` (up to a request body of JSON) must
    not be kept with each, only who answered and how."""
    book = PendingApprovals(approval_window=60)
    pause = opened(book, ALICE, "exec_1")
    bulky = {"blob": "x" * 100_000}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate, book, pause)
        assert await book.resume("exec_1", ALICE, ApprovalAnswer("accept", bulky)) == DONE
    ended = book.lookup("exec_1", ALICE)
    assert isinstance(ended, Ended)
    assert ended.answer == ApprovalAnswer("accept", None, by=AGENT)

"""The console's approvals pages: the visitor's pending approvals, and one approval to answer.

    GET  /approvals                 the signed-in account's pending approvals, newest first, each with its
                                    arguments and Approve and Decline (kept current by `static/approvals.js`,
                                    which polls `/api/approvals` and answers through `/api/approvals/<id>`)
    GET  /approvals/<executionId>   one approval: the tool, its arguments, the question and the policy that
                                    asked, with Approve and Decline (answered through `/api/approvals/<id>`)

The pages only read the book; every answer is a JSON POST from the page's script, carrying the CSRF token. An
id that is unknown, or another account's or organization's, is the same 404 page: a page never tells whether
someone else's pause exists.
"""

from quart import Quart, Response

from executor_mcp.execution.runs import Pause, PendingApprovals
from executor_mcp.transport.approvals_api import ended_view, pause_view
from executor_mcp.web.console import Console
from executor_mcp.web.signin import SignIn

LIST_PATH = "/approvals"
OUTCOME_WORDS = {
    "pending": "Waiting for your decision",
    "approved": "Approved",
    "declined": "Declined",
    "cancelled": "Cancelled",
    "expired": "Expired: nobody answered in time",
    "ended": "Ended before anyone answered",
}
LED_TO_WORDS = {"completed": "The execution has finished.", "error": "The execution ended with an error."}


class ApprovalsPages:
    def __init__(self, console: Console, book: PendingApprovals) -> None:
        self._console = console
        self._book = book

    def register(self, app: Quart) -> None:
        self._console.add_page(app, LIST_PATH, "console_approvals", self._list)
        self._console.add_page(app, LIST_PATH + "/<execution_id>", "console_approval", self._detail)

    async def _list(self) -> Response:
        async def build(visitor: SignIn) -> Response:
            pending = [pause_view(pause) for pause in self._book.pending(visitor.principal)]
            return self._console.view(
                visitor,
                "approvals.html",
                title="Approvals",
                page="approvals",
                scripts=("approvals.js",),
                styles=("approvals.css",),
                pending=pending,
            )

        return await self._console.page(build)

    async def _detail(self, execution_id: str) -> Response:
        async def build(visitor: SignIn) -> Response:
            found = self._book.lookup(execution_id, visitor.principal)
            if found is None:
                return self._console.message(
                    visitor,
                    404,
                    "Approval not found",
                    "There is no approval with this id for your account. It may have ended a while ago, or the "
                    "link may be wrong. Pending approvals are listed on the Approvals page.",
                )
            approval = pause_view(found) if isinstance(found, Pause) else ended_view(execution_id, found)
            return self._console.view(
                visitor,
                "approval.html",
                title="Approve?" if approval["outcome"] == "pending" else "Approval",
                page="approvals",
                scripts=("approvals.js",),
                styles=("approvals.css",),
                approval=approval,
                outcome_words=OUTCOME_WORDS,
                led_to_words=LED_TO_WORDS,
            )

        return await self._console.page(build)

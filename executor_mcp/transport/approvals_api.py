"""`/api/approvals`: the caller's paused executions, and a person's answer to one, over plain JSON HTTP.

    GET   /api/approvals                  the caller's pauses nobody has answered yet, newest first
    GET   /api/approvals/<executionId>    one of the caller's pauses: pending, answered, or what became of it
    POST  /api/approvals/<executionId>    {action: "accept" | "decline"} -> the decision

The console's approvals pages call this with the visitor's cookie and CSRF token; a bearer may call it too.
A decision answers the pause exactly as the model's `resume accept|decline` would: the first answer wins,
whoever gives it, and the gated call runs at most once. A later decision is answered 409 with the outcome that
counts. A pause of another account or organization is answered 404, exactly like an id that never existed.

Errors are `{"error": "<message>"}`: 400 (not an action), 401/403/503 (authentication, as `/mcp`; a cookie
without its CSRF token is 403), 404, 405, 409 (already answered), 413 or 415 (a body that is not JSON: a plain
HTML form cannot send one).
"""

from quart import Quart, Response, request

from executor_mcp.auth.principal import Authenticator
from executor_mcp.codec import JsonObject, dumps
from executor_mcp.execution.results import iso
from executor_mcp.execution.runs import Decided, Ended, Pause, PendingApprovals
from executor_mcp.tools.approval import AGENT, OUTCOMES, arguments_preview
from executor_mcp.transport import headers as rules
from executor_mcp.transport.discovery import API_PREFIX
from executor_mcp.transport.json_answers import admitted, json_body, json_error, json_ok

PATH = API_PREFIX + "/approvals"
# A decision is one short field.
MAX_DECISION_BODY_BYTES = 4 * 1024
DECISIONS = ("accept", "decline")
PENDING = "pending"
NOT_FOUND = "Paused execution not found"
_METHODS = ["GET", "POST", "OPTIONS"]


def pause_view(pause: Pause) -> JsonObject:
    """A live pause as the console shows it. The arguments are a bounded, indented preview; nothing from the
    rest of the execution (its code, other results) is shown."""
    interaction = pause.interaction
    preview, truncated = arguments_preview(interaction.args)
    answer = pause.answer.value
    return {
        "executionId": pause.id,
        "outcome": OUTCOMES[answer.action] if answer is not None else PENDING,
        "answeredBy": answer.by if answer is not None else None,
        "tool": interaction.address,
        "question": interaction.question or interaction.message,
        "arguments": preview,
        "argumentsTruncated": truncated,
        "policy": {**interaction.asked_by.as_json(), "words": interaction.asked_by.words()},
        "createdAt": iso(pause.created_at),
        "expiresAt": iso(pause.expires_at),
        "sessionMode": pause.mode,
    }


def ended_view(execution_id: str, ended: Ended) -> JsonObject:
    """A pause that is over: only how it was answered and what that led to (a status, never a result)."""
    return {
        "executionId": execution_id,
        "outcome": ended.outcome,
        "answeredBy": ended.answer.by if ended.answer is not None else None,
        "ledTo": ended.led_to,
        "nextExecutionId": ended.next_id,
    }


def decided_view(decided: Decided) -> JsonObject:
    return {
        "executionId": decided.execution_id,
        "outcome": decided.outcome,
        "answeredBy": decided.by,
        "alreadyAnswered": not decided.first,
    }


def already_answered(decided: Decided) -> str:
    """What a late decision is told: the answer that counts, and where it came from."""
    if decided.by is None:
        return f"This approval is no longer waiting: it {decided.outcome} before anyone answered"
    where = "by the agent's resume" if decided.by == AGENT else "on the approvals page"
    return f"This approval was already answered: {decided.outcome} {where}"


class ApprovalsApi:
    def __init__(self, book: PendingApprovals, authenticator: Authenticator) -> None:
        self._book = book
        self._auth = authenticator

    def register(self, app: Quart) -> None:
        app.add_url_rule(PATH, "approvals", self.collection, methods=_METHODS, provide_automatic_options=False)
        app.add_url_rule(
            PATH + "/<execution_id>", "approval", self.item, methods=_METHODS, provide_automatic_options=False
        )

    async def collection(self) -> Response:
        principal = await admitted(self._auth, ("GET",))
        if isinstance(principal, Response):
            return principal
        return json_ok([pause_view(pause) for pause in self._book.pending(principal)])

    async def item(self, execution_id: str) -> Response:
        principal = await admitted(self._auth, ("GET", "POST"))
        if isinstance(principal, Response):
            return principal
        if request.method == "GET":
            found = self._book.lookup(execution_id, principal)
            if found is None:
                return json_error(404, NOT_FOUND)
            return json_ok(pause_view(found) if isinstance(found, Pause) else ended_view(execution_id, found))
        body = await json_body(MAX_DECISION_BODY_BYTES)
        if isinstance(body, Response):
            return body
        action = body.get("action")
        if action not in DECISIONS:
            return json_error(400, 'Invalid approval response: action must be "accept" or "decline"')
        decided = self._book.decide(execution_id, principal, action)
        if decided is None:
            return json_error(404, NOT_FOUND)
        if not decided.first:
            return Response(
                dumps({"error": already_answered(decided), **decided_view(decided)}),
                status=409,
                content_type=rules.JSON,
            )
        return json_ok(decided_view(decided))

"""How a workspace's tool server answers stateless requests (MCP 2026-07-28: each request stands alone, with no
session handshake): `tools/list` and `tools/call`, shaped for that revision, with native-mode approvals as
multi-round-trip requests.

The tools are the session's own (`execute`, `skills`, `resume`, or passthrough's), run exactly as for a 2025
session. Only the ends differ. Every result gets `resultType` (and the list its cache hints). In native mode a
paused execution is not answered with its pause text but with `input_required`: the client asks its user and
retries the same call with the answer and the `requestState` it was given, which names the pause. The retry
answers the pause through the same `resume` as a model's (so a person on the console, or a model's `resume`,
may answer it first; the first answer counts), and gets what answering led to: the result, or the next pause
as a new `input_required`.
"""

import functools
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

from executor_mcp.codec import JsonObject, dumps, json_digest
from executor_mcp.execution.results import PAUSED_STATUS
from executor_mcp.execution.runs import Pause, PendingApprovals, model_worded
from executor_mcp.protocol.errors import Code, RpcError
from executor_mcp.protocol.jsonrpc import ErrorResponse, Request, Response
from executor_mcp.protocol.mcp import CallToolParams, structure_params
from executor_mcp.protocol.request_state import BadRequestState, RequestState, seal, unseal
from executor_mcp.protocol.stateless import (
    FORM_ELICITATION,
    MISSING_CAPABILITY,
    TOOLS_CALL,
    TOOLS_LIST,
    TOOLS_LIST_TTL_MS,
    complete,
    declares_form_elicitation,
    input_required,
)
from executor_mcp.storage.records import NATIVE_ELICITATION, Owner
from executor_mcp.tools.approval import CANCEL, elicited
from executor_mcp.toolserver.executor_tools import RESUME
from executor_mcp.toolserver.registry import ToolContext
from executor_mcp.toolserver.server import Send, Serve, ToolServer, answer

# Brings a pause kept elsewhere into the session of the context: why it cannot be, or None (adopted, or none).
Adopt = Callable[[str, ToolContext], Awaitable[JsonObject | None]]
# The tools whose call runs code, and so may pause for an approval.
RUNS_CODE = frozenset({"execute", "invoke"})
# The one question a paused call asks at a time, under this key.
APPROVAL_KEY = "approval"


class StatelessCalls:
    """The stateless (2026) ends of a workspace's tool server; `key` signs `requestState` (the control plane
    keeps it)."""

    def __init__(
        self,
        approvals: PendingApprovals,
        key: bytes,
        clock: Callable[[], float] = time.time,
        adopt: Adopt | None = None,
    ) -> None:
        """`adopt` brings a pause kept on another instance into the workspace (`ExecutorTools.adopt`), so a retry
        that reached another instance than the one that asked is treated as one that reached the asker."""
        self._approvals = approvals
        self._key = key
        self._clock = clock
        self._adopt = adopt

    def serving(self, capabilities: JsonObject) -> Serve:
        """How one request, whose client declared `capabilities`, is served by a workspace's tool server."""
        return functools.partial(self.handle, capabilities=capabilities)

    async def handle(
        self, server: ToolServer, request: Request, notify: Send, *, capabilities: JsonObject
    ) -> Response | ErrorResponse:
        return await answer(request, self._dispatch(server, request, notify, capabilities))

    async def _dispatch(
        self, server: ToolServer, request: Request, notify: Send, capabilities: JsonObject
    ) -> JsonObject:
        if request.method == TOOLS_LIST:
            return complete(await server.listing(max_age=TOOLS_LIST_TTL_MS / 1000), ttl_ms=TOOLS_LIST_TTL_MS)
        if request.method != TOOLS_CALL:
            raise RpcError(Code.METHOD_NOT_FOUND, "Method not found")
        raw = request.params or {}
        params: CallToolParams = structure_params(raw, CallToolParams)
        entry = server.entry(params.name)
        native = server.meta.elicitation_mode == NATIVE_ELICITATION
        context = server.context(notify)
        if "requestState" in raw:
            result = await self._answered(server, params, raw, context)
        else:
            if native and params.name in RUNS_CODE and not declares_form_elicitation(capabilities):
                # Refused before any code runs: it could pause, and this client could not be asked.
                raise RpcError(
                    MISSING_CAPABILITY,
                    "Missing required client capability: elicitation (form), to ask for approvals in native mode",
                    {"requiredCapabilities": FORM_ELICITATION},
                )
            result = await entry.handler(params.arguments, context)
        if native and declares_form_elicitation(capabilities):
            return self._shaped(result, server.meta.owner, params)
        # A client that cannot be asked (no form elicitation in this request) gets the pause as a model
        # would: its text names `resume`. The spec forbids an input request of a kind it did not declare.
        return complete(result)

    async def _answered(
        self, server: ToolServer, params: CallToolParams, raw: JsonObject, context: ToolContext
    ) -> JsonObject:
        """A retry with the answer to a pause: checked against its state, then given to the pause as a `resume`
        would give it. A missing or malformed answer to a pause still waiting is asked again."""
        owner = server.meta.owner
        try:
            state = unseal(
                self._key,
                raw.get("requestState"),
                self._clock(),
                principal=_principal(owner),
                tool=params.name,
                arguments=params.arguments,
            )
        except BadRequestState as exc:
            raise RpcError(Code.INVALID_PARAMS, f"Invalid params: {exc}") from None
        responses = raw.get("inputResponses")
        action, content = elicited(responses.get(state.key) if isinstance(responses, dict) else None)
        found = self._approvals.lookup(state.execution_id, owner)
        if action is None and found is None and self._adopt is not None:
            refused = await self._adopt(state.execution_id, context)
            if refused is not None:
                return refused
            found = self._approvals.lookup(state.execution_id, owner)
        if action is None and isinstance(found, Pause) and not found.answer.done:
            return model_worded(found)
        arguments = {"executionId": state.execution_id, "action": action or CANCEL, "content": dumps(content or {})}
        return await server.entry(RESUME.name).handler(arguments, context)

    def _shaped(self, result: JsonObject, owner: Owner, params: CallToolParams) -> JsonObject:
        """A native-mode result: a pause becomes the question for the client to ask, anything else is complete."""
        structured = result.get("structuredContent")
        if not isinstance(structured, dict) or structured.get("status") != PAUSED_STATUS:
            return complete(result)
        interaction = structured.get("interaction")
        if not isinstance(interaction, dict):
            return complete(result)
        state = RequestState(
            execution_id=structured["executionId"],
            account=owner.account_id,
            org=owner.org_id or "",  # a workspace's owner always has one (a principal without is refused)
            admin=owner.org_admin,
            tool=params.name,
            arguments=json_digest(params.arguments),
            key=APPROVAL_KEY,
            expires_at=datetime.fromisoformat(structured["expiresAt"]).timestamp(),
        )
        question = {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": interaction["message"],
                "requestedSchema": interaction["requestedSchema"],
            },
        }
        return input_required({APPROVAL_KEY: question}, seal(self._key, state))


def _principal(owner: Owner) -> tuple[str, str, bool]:
    return owner.account_id, owner.org_id or "", owner.org_admin

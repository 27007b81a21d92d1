"""A native-mode approval on the 2026 wire, abused: the `requestState` a client echoes is attacker-controlled, so a
tampered one, another principal's, one sent with other arguments and an expired one are each refused (`-32602`,
as a state is a protocol field), and none of them runs the gated tool. A duplicate of an accepted retry replays
its result without a second run, and a retry with no answer is asked again.

The gated tool is an upstream request (a `require_approval` policy on it), so the upstream's own record of what
reached it says whether it ran, and how often."""

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.integration.test_approvals import CREATE, LIST
from tests.integration.test_integrations_e2e import add_orders
from tests.integration.test_passthrough import GET_ORDER, add_policy
from tests.integration.test_passthrough import orders as orders
from tests.integration.test_passthrough import upstream as upstream
from tests.integration.test_stateless_wire import FORM, call_body, error_of, result_of, send
from tests.upstream import Upstream

NATIVE = "?elicitation_mode=native"
ORDER = f'return await tools.{GET_ORDER}({{ orderId: "9" }});'
SHIPPED = {"id": "9", "status": "shipped"}
ACCEPT = {"approval": {"action": "accept", "content": {}}}


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


@pytest.fixture
async def gated(orders: None, executor: ServerUnderTest, http: httpx.AsyncClient) -> str:
    """The orders integration with its `getOrder` behind an approval; the native-mode URL."""
    await add_policy(http, executor, GET_ORDER, "require_approval")
    return executor.url + NATIVE


async def call(
    http: httpx.AsyncClient, url: str, request_id: Any, code: str, headers: Any = None, **extra: Any
) -> httpx.Response:
    """A 2026 `execute` of `code` from a client that can be asked a form question; `extra` top-level params
    (`requestState`, `inputResponses`)."""
    message = call_body(request_id, "execute", {"code": code}, capabilities=FORM)
    message["params"].update(extra)
    return await send(http, url, message, **({} if headers is None else headers))


async def asked(http: httpx.AsyncClient, url: str, code: str = ORDER, headers: Any = None) -> str:
    """The `requestState` of the question a gated call is answered with (the question checked)."""
    result = result_of(await call(http, url, "ask", code, headers), "ask")
    assert result["resultType"] == "input_required", result
    (question,) = result["inputRequests"].values()
    assert question["method"] == "elicitation/create"
    assert question["params"]["mode"] == "form"
    assert question["params"]["message"].startswith("Approve ")
    return result["requestState"]


def refused(response: httpx.Response, request_id: Any) -> str:
    """The message of a `-32602` refusal of `request_id`."""
    assert error_of(response) == (400, -32602, request_id)
    return response.json()["error"]["message"]


def shipped(result: dict[str, Any]) -> None:
    assert result["resultType"] == "complete", result
    assert result["structuredContent"]["status"] == "completed"
    assert result["structuredContent"]["result"]["data"] == SHIPPED


async def test_the_round_trip(gated: str, upstream: Upstream, http: httpx.AsyncClient) -> None:
    """The baseline the refusals below are measured against: asked, nothing runs; answered, it runs once."""
    state = await asked(http, gated)
    assert upstream.calls("/orders") == []
    shipped(result_of(await call(http, gated, "answer", ORDER, requestState=state, inputResponses=ACCEPT), "answer"))
    assert len(upstream.calls("/orders")) == 1


async def test_a_tampered_state_is_refused(gated: str, upstream: Upstream, http: httpx.AsyncClient) -> None:
    state = await asked(http, gated)
    payload, mac = state.split(".")
    fields = json.loads(_unpadded_b64decode(payload))
    forged = _b64(json.dumps({**fields, "expires_at": fields["expires_at"] + 3600}, separators=(",", ":")).encode())
    for tampered in (f"{forged}.{mac}", state[:-1] + ("A" if state[-1] != "A" else "B"), state + "==", "garbage"):
        answer = await call(http, gated, "t", ORDER, requestState=tampered, inputResponses=ACCEPT)
        assert refused(answer, "t") == "Invalid params: requestState is not one this server issued", tampered
    assert upstream.calls("/orders") == []
    # The pause was not touched: its own state still answers it.
    shipped(result_of(await call(http, gated, "real", ORDER, requestState=state, inputResponses=ACCEPT), "real"))


async def test_a_state_with_other_arguments_or_another_tool_is_refused(
    gated: str, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    state = await asked(http, gated)
    other_code = ORDER.replace('"9"', '"10"')
    answer = await call(http, gated, "args", other_code, requestState=state, inputResponses=ACCEPT)
    words = "Invalid params: requestState was issued for another call: retry with the same tool and arguments"
    assert refused(answer, "args") == words
    # The same code with one more argument is another call too.
    message = call_body("more", "execute", {"code": ORDER, "timeoutMs": 5000}, capabilities=FORM)
    message["params"].update(requestState=state, inputResponses=ACCEPT)
    assert refused(await send(http, gated, message), "more") == words
    message = call_body("tool", "skills", {"code": ORDER}, capabilities=FORM)
    message["params"].update(requestState=state, inputResponses=ACCEPT)
    assert refused(await send(http, gated, message), "tool") == words
    assert upstream.calls("/orders") == []


async def test_an_expired_state_is_refused(
    nursery: trio.Nursery, data_dir: Path, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    """The state expires with its pause's window (1 s here); waited past it with a wide margin."""
    executor = await start_server(nursery, data_dir, allow_local_network=True, approval_window=1.0)
    await add_orders(http, executor, upstream)
    await add_policy(http, executor, GET_ORDER, "require_approval")
    url = executor.url + NATIVE
    state = await asked(http, url)
    await trio.sleep(2.5)
    answer = await call(http, url, "late", ORDER, requestState=state, inputResponses=ACCEPT)
    assert refused(answer, "late").startswith("Invalid params: requestState has expired")
    assert upstream.calls("/orders") == []


async def test_a_duplicate_retry_replays_the_result_without_a_second_run(
    gated: str, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    state = await asked(http, gated)
    first = result_of(await call(http, gated, "a", ORDER, requestState=state, inputResponses=ACCEPT), "a")
    shipped(first)
    again = result_of(await call(http, gated, "b", ORDER, requestState=state, inputResponses=ACCEPT), "b")
    assert again == first
    # The first answer counts: a later decline of the same pause replays the accepted result.
    decline = {"approval": {"action": "decline"}}
    assert result_of(await call(http, gated, "c", ORDER, requestState=state, inputResponses=decline), "c") == first
    assert len(upstream.calls("/orders")) == 1


async def test_concurrent_duplicate_retries_join_one_run(
    gated: str, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    state = await asked(http, gated)
    results: dict[str, dict[str, Any]] = {}

    async def retry(request_id: str) -> None:
        answer = await call(http, gated, request_id, ORDER, requestState=state, inputResponses=ACCEPT)
        results[request_id] = result_of(answer, request_id)

    async with trio.open_nursery() as retries:
        for request_id in ("x", "y", "z"):
            retries.start_soon(retry, request_id)
    assert results["x"] == results["y"] == results["z"]
    shipped(results["x"])
    assert len(upstream.calls("/orders")) == 1


@pytest.mark.parametrize(
    "responses",
    [None, {}, {"other": ACCEPT["approval"]}, {"approval": {"action": "maybe"}}, {"approval": "accept"}, "accept"],
    ids=["absent", "empty", "other key", "unknown action", "not an object", "not a map"],
)
async def test_a_retry_without_an_answer_is_asked_again(
    gated: str, upstream: Upstream, http: httpx.AsyncClient, responses: Any
) -> None:
    state = await asked(http, gated)
    extra = {} if responses is None else {"inputResponses": responses}
    again = result_of(await call(http, gated, "again", ORDER, requestState=state, **extra), "again")
    assert again["resultType"] == "input_required"
    assert list(again["inputRequests"]) == ["approval"]
    assert upstream.calls("/orders") == []
    # The question asked again is the same pause: its state answers it.
    answer = await call(http, gated, "now", ORDER, requestState=again["requestState"], inputResponses=ACCEPT)
    shipped(result_of(answer, "now"))
    assert len(upstream.calls("/orders")) == 1


async def test_another_principal_cannot_use_a_state(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """Bob (same org), Alice in another org, and Alice herself without her org-admin claim are each another
    principal (an admin's approval is not a member's to give)."""
    server = await jwt_server(nursery, data_dir, tmp_path, org_admin_claim=("role", "admin"))
    url = server.url + NATIVE
    alice = bearer(mint("alice", "acme", role="admin"))
    state = await asked(http, url, CREATE, alice)
    for token in (mint("bob", "acme", role="admin"), mint("alice", "other", role="admin"), mint("alice", "acme")):
        answer = await call(http, url, "x", CREATE, bearer(token), requestState=state, inputResponses=ACCEPT)
        assert refused(answer, "x") == "Invalid params: requestState was issued to another principal"
    assert await _policies(http, server.url, alice) == []
    answer = await call(http, url, "alice", CREATE, alice, requestState=state, inputResponses=ACCEPT)
    assert result_of(answer, "alice")["structuredContent"]["result"]["ok"] is True
    assert len(await _policies(http, server.url, alice)) == 1


async def _policies(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> list[Any]:
    """The org's policies, read in model mode (reading needs no approval)."""
    answer = await send(http, url, call_body("list", "execute", {"code": LIST}), **headers)
    return result_of(answer, "list")["structuredContent"]["result"]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unpadded_b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.mark.parametrize("capabilities", [{}, FORM], ids=["no elicitation", "form elicitation"])
async def test_a_resume_is_asked_a_question_only_if_its_request_can_be(
    executor: ServerUnderTest, http: httpx.AsyncClient, capabilities: dict[str, Any]
) -> None:
    """`resume` needs no capability in native mode (decision 407), so its next pause is sent as a question only
    to a request that declared form elicitation; any other hears it worded for a model, and resumes it so."""
    url = executor.url + NATIVE
    await asked(http, url, CREATE.removeprefix("return ") + "; " + CREATE.replace("github.*", "gitlab.*"))
    (pending,) = (await http.get(executor.running.url + "/api/approvals")).json()
    arguments = {"executionId": pending["executionId"], "action": "accept"}
    message = call_body("r", "resume", arguments, capabilities=capabilities)
    result = result_of(await send(http, url, message), "r")
    if capabilities:
        assert result["resultType"] == "input_required"
        message["params"].update(requestState=result["requestState"], inputResponses=ACCEPT)
    else:
        assert result["resultType"] == "complete"
        assert result["structuredContent"]["status"] == "waiting_for_interaction"
        second = {"executionId": result["structuredContent"]["executionId"], "action": "accept"}
        message = call_body("r", "resume", second)
    done = result_of(await send(http, url, message), "r")
    assert done["resultType"] == "complete"
    assert done["structuredContent"]["result"]["ok"] is True
    assert len(await _policies(http, executor.url, {})) == 2


async def test_a_state_outlives_a_restart(
    nursery: trio.Nursery, data_dir: Path, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    """Its key is the control plane's and its pause is durable: the next process honours it, once."""
    first = await start_server(nursery, data_dir, allow_local_network=True)
    await add_orders(http, first, upstream)
    await add_policy(http, first, GET_ORDER, "require_approval")
    state = await asked(http, first.url + NATIVE)
    await first.stop()
    second = await start_server(nursery, data_dir, allow_local_network=True)
    url = second.url + NATIVE
    shipped(result_of(await call(http, url, "after", ORDER, requestState=state, inputResponses=ACCEPT), "after"))
    shipped(result_of(await call(http, url, "again", ORDER, requestState=state, inputResponses=ACCEPT), "again"))
    assert len(upstream.calls("/orders")) == 1

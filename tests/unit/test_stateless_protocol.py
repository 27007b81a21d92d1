"""MCP 2026-07-28 as plain functions: which era a POST speaks, the spec's ladder row by row and in its order, the
status table, the result shapes, and the sealed `requestState` with each way a presented state is refused."""

import base64
import hashlib
import hmac
import json
import string
from typing import Any

import attrs
import pytest

from executor_mcp import __version__
from executor_mcp.codec import json_digest
from executor_mcp.protocol import request_state
from executor_mcp.protocol.errors import Code, RpcError
from executor_mcp.protocol.jsonrpc import Message, Notification, Request, Response
from executor_mcp.protocol.request_state import MAX_STATE, BadRequestState, RequestState, seal, unseal
from executor_mcp.protocol.stateless import (
    HANDSHAKE_VERSIONS,
    META_CAPABILITIES,
    META_SERVER_INFO,
    META_VERSION,
    STATELESS_VERSION,
    complete,
    declares_form_elicitation,
    discover_result,
    header_value,
    input_required,
    is_stateless,
    stateless_by_header,
    status_of,
    validate,
)

SERVER_INFO = {"name": "executor", "version": __version__}
META = {META_VERSION: STATELESS_VERSION, META_CAPABILITIES: {}}

CLIENT_INFO = "io.modelcontextprotocol/clientInfo"  # optional, and not read by the server


def call(name: str = "execute", meta: Any = META, request_id: int = 7, **params: Any) -> Request:
    """A `tools/call` of `name` whose `_meta` is `meta` (left out when None)."""
    body: dict[str, Any] = {"name": name, "arguments": {}, **params}
    if meta is not None:
        body["_meta"] = meta
    return Request(id=request_id, method="tools/call", params=body)


def routing(
    method: str = "tools/call", name: str | None = "execute", version: str = STATELESS_VERSION
) -> dict[str, str]:
    """The routing headers a conforming client sends for one request."""
    sent = {"mcp-protocol-version": version, "mcp-method": method}
    if name is not None:
        sent["mcp-name"] = name
    return sent


def refusal(headers: dict[str, str], request: Request, repeated: frozenset[str] = frozenset()) -> RpcError:
    with pytest.raises(RpcError) as refused:
        validate(headers, repeated, request)
    return refused.value


def b64_header(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


# -- which era -----------------------------------------------------------------------------------------


def with_meta(meta: Any = META) -> list[Message]:
    return [call(meta=meta)]


@pytest.mark.parametrize("version", [STATELESS_VERSION, "v999.0.0", "2026-01-01", " 2026-07-28 "])
def test_a_version_header_of_no_handshake_version_speaks_2026_without_any_meta(version: str) -> None:
    """Unknown versions too, so that they reach the ladder and hear `-32022` rather than a 2025 refusal."""
    assert stateless_by_header({"mcp-protocol-version": version})
    assert is_stateless({"mcp-protocol-version": version}, [call(meta=None)], batch=False)


def test_the_body_meta_alone_speaks_2026() -> None:
    assert not stateless_by_header({})
    assert is_stateless({}, with_meta(), batch=False)
    assert is_stateless({}, with_meta({META_VERSION: "v999.0.0"}), batch=False)
    # A notification claims the era the same way.
    assert is_stateless({}, [Notification(method="notifications/x", params={"_meta": META})], batch=False)


@pytest.mark.parametrize("version", sorted(HANDSHAKE_VERSIONS))
def test_a_handshake_version_header_stays_2025(version: str) -> None:
    headers = {"mcp-protocol-version": version}
    assert not stateless_by_header(headers)
    assert not is_stateless(headers, [call(meta=None)], batch=False)
    # A body claim still makes it 2026: the ladder then tells the client its header disagrees.
    assert is_stateless(headers, with_meta(), batch=False)


def test_a_session_id_keeps_a_2026_version_header_in_2025() -> None:
    """A request naming a 2025 session is that session's, whatever its version header (its bad header then
    hears the 2025 refusal); a blank session header names none."""
    named = {"mcp-protocol-version": STATELESS_VERSION, "mcp-session-id": "abc"}
    assert not stateless_by_header(named)
    assert not is_stateless(named, [call(meta=None)], batch=False)
    assert stateless_by_header({"mcp-protocol-version": STATELESS_VERSION, "mcp-session-id": "  "})
    # The body's own claim is 2026, and a 2026 request ignores any session header.
    assert is_stateless(named, with_meta(), batch=False)


def test_a_batch_is_2026_only_by_its_header() -> None:
    """A batch claims nothing by its bodies; with a 2026 header it is a 2026 POST (refused there as a batch)."""
    messages = [call(meta=META, request_id=1), call(meta=META, request_id=2)]
    assert not is_stateless({}, messages, batch=True)
    assert not is_stateless({}, with_meta(), batch=True)
    assert is_stateless({"mcp-protocol-version": STATELESS_VERSION}, messages, batch=True)


@pytest.mark.parametrize(
    "messages",
    [
        [call(meta=None)],
        [call(meta={META_CAPABILITIES: {}})],
        [call(meta="2026-07-28")],
        [Request(id=1, method="tools/list", params=None)],
        [Response(id=1, result={"_meta": META})],
        [],
    ],
)
def test_no_claim_and_no_header_is_2025(messages: list[Message]) -> None:
    assert not is_stateless({}, messages, batch=False)


# -- the ladder ----------------------------------------------------------------------------------------


def test_a_request_that_passes_gives_its_capabilities() -> None:
    capabilities = {"elicitation": {"form": {}}}
    info = {"name": "tests", "version": "1"}
    request = call(meta={META_VERSION: STATELESS_VERSION, META_CAPABILITIES: capabilities, CLIENT_INFO: info})
    validated = validate(routing(), frozenset(), request)
    assert (validated.request, validated.capabilities) == (request, capabilities)
    # `clientInfo` is optional: a request without it passes, and one with a malformed one too.
    assert validate(routing(), frozenset(), call()).capabilities == META[META_CAPABILITIES]
    assert validate(routing(), frozenset(), call(meta={**META, CLIENT_INFO: "tests"})).request.id == 7


@pytest.mark.parametrize(
    ("meta", "missing"),
    [
        (None, [META_VERSION, META_CAPABILITIES]),
        ("not an object", [META_VERSION, META_CAPABILITIES]),
        ({META_CAPABILITIES: {}}, [META_VERSION]),
        ({META_VERSION: STATELESS_VERSION}, [META_CAPABILITIES]),
        ({META_VERSION: 20260728, META_CAPABILITIES: {}}, [META_VERSION]),
        ({META_VERSION: STATELESS_VERSION, META_CAPABILITIES: ["elicitation"]}, [META_CAPABILITIES]),
    ],
)
def test_row_7_meta_must_carry_the_version_and_the_capabilities(meta: Any, missing: list[str]) -> None:
    # First in the ladder: no routing header at all is not what it reports.
    refused = refusal({}, call(meta=meta))
    assert refused.code == Code.INVALID_PARAMS
    assert refused.message == f"Invalid params: _meta must carry {' and '.join(missing)}"
    assert status_of(refused.code) == 400


def test_row_7_a_request_with_no_params_has_no_meta() -> None:
    refused = refusal(routing("tools/list", None), Request(id=1, method="tools/list", params=None))
    assert refused.code == Code.INVALID_PARAMS


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({"mcp-method": "tools/call", "mcp-name": "execute"}, "mcp-protocol-version is missing or malformed"),
        ({"mcp-protocol-version": STATELESS_VERSION, "mcp-name": "execute"}, "mcp-method is missing or malformed"),
        (routing(name=None), "mcp-name is missing or malformed"),
        ({**routing(), "mcp-name": "   "}, "mcp-name is missing or malformed"),
        ({**routing(), "mcp-protocol-version": "2025-11-25"}, "mcp-protocol-version does not match"),
        ({**routing(), "mcp-method": "tools/list"}, "mcp-method does not match"),
        ({**routing(), "mcp-method": "TOOLS/CALL"}, "mcp-method does not match"),
        ({**routing(), "mcp-name": "Execute"}, "mcp-name does not match"),
        ({**routing(), "mcp-name": "skills"}, "mcp-name does not match"),
    ],
)
def test_row_8_the_routing_headers_must_be_there_and_repeat_the_body(headers: dict[str, str], words: str) -> None:
    """Values compare case-sensitively (`TOOLS/CALL` is not `tools/call`)."""
    refused = refusal(headers, call())
    assert refused.code == -32020
    assert words in refused.message
    assert status_of(refused.code) == 400


@pytest.mark.parametrize("name", ["mcp-protocol-version", "mcp-method", "mcp-name"])
def test_row_8_a_routing_header_sent_twice_is_refused(name: str) -> None:
    refused = refusal(routing(), call(), frozenset({name}))
    assert (refused.code, refused.message) == (-32020, f"Header mismatch: {name} is sent more than once")


def test_row_8_a_repeated_header_that_is_not_routing_is_not_checked() -> None:
    assert validate(routing(), frozenset({"accept", "x-forwarded-for"}), call()).request.id == 7


def test_row_8_a_named_method_whose_name_is_not_a_string_mismatches_any_header() -> None:
    refused = refusal(routing(name="7"), Request(id=1, method="tools/call", params={"name": 7, "_meta": META}))
    assert (refused.code, refused.message) == (-32020, "Header mismatch: mcp-name does not match the request body")


def test_row_8_an_unnamed_method_needs_no_name_header() -> None:
    request = Request(id=1, method="tools/list", params={"_meta": META})
    assert validate(routing("tools/list", None), frozenset(), request).request is request


@pytest.mark.parametrize(
    "sent",
    [
        "=?base64?not base64!?=",  # not the alphabet
        "=?base64?ZXhlY3V0ZQ?=",  # unpadded
        "=?base64?ZXhlY3V0ZR==?=",  # non-canonical (trailing bits set): decodes, but not as sent
        "=?base64?" + base64.b64encode(b"\xff\xfe").decode() + "?=",  # not UTF-8
        "x" * 2049,  # longer than any method or tool name
    ],
)
def test_row_8_an_undecodable_header_is_malformed(sent: str) -> None:
    refused = refusal({**routing(), "mcp-name": sent}, call())
    assert (refused.code, refused.message) == (-32020, "Header mismatch: mcp-name is missing or malformed")


def test_row_8_the_base64_form_is_decoded_and_whitespace_is_trimmed() -> None:
    named = "ex\u00e9cute \u2192"  # not visible ASCII: a client sends it encoded
    assert header_value(b64_header(named)) == named
    assert validate({**routing(name=b64_header(named))}, frozenset(), call(named)).request.params["name"] == named
    # The value around the sentinel is trimmed; what the sentinel encodes is kept byte for byte.
    padded = {"mcp-protocol-version": f"  {STATELESS_VERSION}\t", "mcp-method": " tools/call ", "mcp-name": " execute"}
    assert validate(padded, frozenset(), call()).request.id == 7
    assert validate(routing(name=f"  {b64_header(' lead')}  "), frozenset(), call(" lead")).request.id == 7
    assert header_value(None) is None
    assert header_value("") is None


def test_row_8_comes_before_row_9() -> None:
    """A header of 2026 with a `_meta` of v999 is a mismatch (the conformance suite's case), not a version
    error; with both v999 it is the version."""
    future = {META_VERSION: "v999.0.0", META_CAPABILITIES: {}}
    assert refusal(routing(), call(meta=future)).code == -32020
    refused = refusal(routing(version="v999.0.0"), call(meta=future))
    assert refused.code == -32022
    assert refused.message == "Unsupported protocol version: v999.0.0"
    assert refused.data == {"supported": [STATELESS_VERSION], "requested": "v999.0.0"}
    assert status_of(refused.code) == 400


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-29", "2026-07-28 "])
def test_row_9_a_version_of_no_2026_revision_is_unsupported(version: str) -> None:
    """Even a handshake version, sent in `_meta`: the 2025 revisions are reached with `initialize` only. A
    version in `_meta` is not trimmed (its header is, so the header must carry the same text encoded)."""
    meta = {META_VERSION: version, META_CAPABILITIES: {}}
    refused = refusal(routing(version=b64_header(version)), call(meta=meta))
    assert (refused.code, refused.data) == (-32022, {"supported": [STATELESS_VERSION], "requested": version})


def test_row_9_comes_before_row_10() -> None:
    meta = {META_VERSION: "v999.0.0", META_CAPABILITIES: {}}
    request = Request(id=1, method="initialize", params={"_meta": meta})
    assert refusal(routing("initialize", None, "v999.0.0"), request).code == -32022


@pytest.mark.parametrize(
    ("method", "name_param"),
    [
        ("initialize", None),
        ("ping", None),
        ("logging/setLevel", None),
        ("resources/subscribe", None),
        ("subscriptions/listen", None),
        ("prompts/get", ("name", "greet")),
        ("resources/read", ("uri", "file:///x")),
        ("tasks/get", ("taskId", "task_1")),
    ],
)
def test_row_10_a_method_this_server_does_not_serve_is_not_found(method: str, name_param: Any) -> None:
    params: dict[str, Any] = {"_meta": META}
    if name_param is not None:
        params[name_param[0]] = name_param[1]
    name = name_param[1] if name_param else None
    refused = refusal(routing(method, name), Request(id=1, method=method, params=params))
    assert (refused.code, refused.message) == (Code.METHOD_NOT_FOUND, "Method not found")
    assert status_of(refused.code) == 404


def test_row_10_comes_after_the_headers_of_a_named_method() -> None:
    """`resources/read` is not served, but its `Mcp-Name` (the uri) is still checked first."""
    request = Request(id=1, method="resources/read", params={"uri": "file:///x", "_meta": META})
    assert refusal(routing("resources/read", None), request).code == -32020


# -- statuses and shapes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (-32700, 400),
        (-32600, 400),
        (-32602, 400),
        (-32601, 404),
        (-32020, 400),
        (-32021, 400),
        (-32022, 400),
        (-32603, 200),
        (-32001, 200),
        (-32000, 200),
        (1, 200),
    ],
)
def test_the_status_table(code: int, status: int) -> None:
    """404 is `-32601`'s alone on the 2026 wire."""
    assert status_of(code) == status


def test_a_complete_result_names_the_server_and_keeps_its_own_meta() -> None:
    result = {"content": [], "_meta": {"mine": 1}}
    shaped = complete(result)
    assert shaped == {"content": [], "resultType": "complete", "_meta": {"mine": 1, META_SERVER_INFO: SERVER_INFO}}
    assert result == {"content": [], "_meta": {"mine": 1}}  # not changed in place
    assert complete({"tools": []}, ttl_ms=0) == {
        "tools": [],
        "resultType": "complete",
        "_meta": {META_SERVER_INFO: SERVER_INFO},
        "ttlMs": 0,
        "cacheScope": "private",
    }
    assert complete({}, ttl_ms=5, scope="public")["cacheScope"] == "public"
    assert "ttlMs" not in complete({}, scope="public")


def test_input_required_carries_no_cache_hints() -> None:
    question = {"approval": {"method": "elicitation/create", "params": {}}}
    assert input_required(question, "s.t") == {
        "resultType": "input_required",
        "inputRequests": question,
        "requestState": "s.t",
        "_meta": {META_SERVER_INFO: SERVER_INFO},
    }


def test_discover_lists_2026_only_publicly_cacheable() -> None:
    assert discover_result() == {
        "supportedVersions": [STATELESS_VERSION],
        "capabilities": {"tools": {}},
        "resultType": "complete",
        "_meta": {META_SERVER_INFO: SERVER_INFO},
        "ttlMs": 3_600_000,
        "cacheScope": "public",
    }


@pytest.mark.parametrize(
    ("capabilities", "declared"),
    [
        ({}, False),
        ({"elicitation": {}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {}, "url": {}}}, True),
        ({"elicitation": {"url": {}}}, False),
        ({"elicitation": True}, False),
        ({"sampling": {}}, False),
    ],
)
def test_form_elicitation_is_declared_with_form_or_with_no_mode(capabilities: dict, declared: bool) -> None:
    assert declares_form_elicitation(capabilities) is declared


# -- requestState --------------------------------------------------------------------------------------

KEY = b"k" * 32
NOW = 1_800_000_000.0
ARGUMENTS = {"code": "return 1", "timeoutMs": 5000}
STATE = RequestState(
    execution_id="exec_1",
    account="alice",
    org="acme",
    admin=False,
    tool="execute",
    arguments=json_digest(ARGUMENTS),
    key="approval",
    expires_at=NOW + 240,
)
PRINCIPAL = ("alice", "acme", False)


def opened(token: Any, *, key: bytes = KEY, now: float = NOW, **overrides: Any) -> RequestState:
    checks: dict[str, Any] = {"principal": PRINCIPAL, "tool": "execute", "arguments": ARGUMENTS, **overrides}
    return unseal(key, token, now, **checks)


def refused_words(token: Any, **overrides: Any) -> str:
    with pytest.raises(BadRequestState) as refused:
        opened(token, **overrides)
    return str(refused.value)


NOT_ISSUED = "requestState is not one this server issued"
BASE64URL = string.ascii_letters + string.digits + "-_"


def test_a_sealed_state_opens_for_the_same_principal_and_call() -> None:
    token = seal(KEY, STATE)
    assert opened(token) == STATE
    # The arguments are compared by their canonical JSON: key order is not the call's.
    assert opened(token, arguments={"timeoutMs": 5000, "code": "return 1"}) == STATE
    assert len(token) < MAX_STATE // 4  # what a client echoes back is small


def test_every_one_character_change_is_refused() -> None:
    """Whatever byte of a state is changed, it is no longer one this server issued (the MAC's own text too,
    whose decoder would otherwise ignore characters outside its alphabet and its last character's spare bits)."""
    token = seal(KEY, STATE)
    for at in range(len(token)):
        for replacement in BASE64URL + "+/=!. ":
            if replacement == token[at]:
                continue
            tampered = token[:at] + replacement + token[at + 1 :]
            assert refused_words(tampered) == NOT_ISSUED, (at, replacement)
    for suffix in ("=", "==", "!!", "A"):
        assert refused_words(token + suffix) == NOT_ISSUED, suffix


def test_another_key_did_not_issue_it() -> None:
    assert refused_words(seal(b"j" * 32, STATE)) == NOT_ISSUED
    assert refused_words(seal(KEY, STATE), key=b"j" * 32) == NOT_ISSUED


@pytest.mark.parametrize(
    "principal", [("bob", "acme", False), ("alice", "other", False), ("alice", "acme", True), ("acme", "alice", False)]
)
def test_another_principal_is_refused(principal: tuple[str, str, bool]) -> None:
    """Account, org and the admin flag are all bound: an admin's state is not a member's, nor the reverse."""
    assert refused_words(seal(KEY, STATE), principal=principal) == "requestState was issued to another principal"


@pytest.mark.parametrize(
    "call_changed",
    [
        {"tool": "invoke"},
        {"arguments": {"code": "return 2", "timeoutMs": 5000}},
        {"arguments": {"code": "return 1"}},
        {"arguments": None},
    ],
)
def test_another_call_is_refused(call_changed: dict[str, Any]) -> None:
    words = refused_words(seal(KEY, STATE), **call_changed)
    assert words == "requestState was issued for another call: retry with the same tool and arguments"


def test_a_state_is_refused_from_its_expiry_on() -> None:
    token = seal(KEY, STATE)
    assert opened(token, now=STATE.expires_at - 0.001) == STATE
    for now in (STATE.expires_at, STATE.expires_at + 3600):
        assert refused_words(token, now=now).startswith("requestState has expired")


def test_an_over_long_state_is_refused_unread() -> None:
    """Refused for its length even though this very key sealed it."""
    long = attrs.evolve(STATE, tool="t" * MAX_STATE)
    assert refused_words(seal(KEY, long), tool=long.tool) == NOT_ISSUED


@pytest.mark.parametrize(
    "token",
    [
        None,
        42,
        ["a.b"],
        "",
        ".",
        "no-dot",
        "a.b.c",
        "!!!.???",
        "\u00e9t\u00e9.\u00e9t\u00e9",
        "\ud800.\ud800",
        base64.urlsafe_b64encode(b"not json").decode() + ".AAAA",
        # Nested past the JSON parser's recursion limit, within the length bound: refused by its MAC, unparsed.
        base64.urlsafe_b64encode(b"[" * 1400).decode().rstrip("=") + ".AAAA",
    ],
)
def test_garbage_is_not_a_state(token: Any) -> None:
    assert refused_words(token) == NOT_ISSUED


@pytest.mark.parametrize(
    "fields",
    [
        [1, 2],
        "text",
        {**attrs.asdict(STATE), "extra": 1},
        {k: v for k, v in attrs.asdict(STATE).items() if k != "key"},
        {**attrs.asdict(STATE), "expires_at": "tomorrow"},
        {**attrs.asdict(STATE), "expires_at": None},
    ],
)
def test_a_signed_payload_of_the_wrong_shape_is_refused(fields: Any) -> None:
    """A key leak aside, only this server signs; still, what it signs is read defensively."""
    assert _signed(attrs.asdict(STATE)) == seal(KEY, STATE)  # the helper signs as the server does
    with pytest.raises(BadRequestState):
        opened(_signed(fields))


def _signed(fields: Any) -> str:
    """`fields` sealed as `seal` seals a state (same payload encoding, same MAC), whatever their shape."""
    payload = base64.urlsafe_b64encode(json.dumps(fields, separators=(",", ":")).encode()).rstrip(b"=").decode()
    mac = hmac.new(KEY, request_state._PURPOSE + payload.encode(), hashlib.sha256).digest()
    return payload + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

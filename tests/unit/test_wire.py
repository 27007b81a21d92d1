"""SSE framing, client event ids and Accept weights, as plain functions."""

import pytest

from executor_mcp.protocol.errors import Refused
from executor_mcp.transport.headers import require_post_accept, require_stream_accept
from executor_mcp.transport.sse import PRIMING, event_id, message_event, parse_event_id

STREAM = "0123456789abcdef0123456789abcdef"


def test_event_ids_round_trip() -> None:
    assert parse_event_id(event_id(STREAM, 42)) == (STREAM, 42)
    assert parse_event_id(f" {STREAM}:0000000000000001 ") == (STREAM, 1)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        ":",
        f"{STREAM}:1",
        f"{STREAM}:zzzzzzzzzzzzzzzz",
        f"{STREAM.upper()}:0000000000000001",
        f"{'a' * 600}:0000000000000001",
        f"{STREAM}:0000000000000001:0000000000000001",
        f"{STREAM[:-1]}é:0000000000000001",
    ],
)
def test_anything_else_names_no_stream(text: str) -> None:
    assert parse_event_id(text) is None


def test_frames() -> None:
    assert message_event(PRIMING, f"{STREAM}:0000000000000001") == f"id: {STREAM}:0000000000000001\ndata: \n\n".encode()
    assert message_event(b"{}", "s:1") == b"event: message\nid: s:1\ndata: {}\n\n"
    assert message_event(b"{}") == b"event: message\ndata: {}\n\n"


@pytest.mark.parametrize(
    "accept",
    [
        "application/json;q=0, text/event-stream;q=0",
        "application/json, text/event-stream;q=0",
        "application/json;q=0.000, text/event-stream",
        "application/json",
    ],
)
def test_q_zero_is_not_acceptable(accept: str) -> None:
    with pytest.raises(Refused):
        require_post_accept({"accept": accept})


@pytest.mark.parametrize(
    "accept",
    [
        "application/json, text/event-stream",
        "application/json;q=0.1, text/event-stream;Q=1",
        "text/event-stream;q=x, application/json",
    ],
)
def test_other_weights_are_acceptable(accept: str) -> None:
    require_post_accept({"accept": accept})  # does not raise
    require_stream_accept({"accept": accept})

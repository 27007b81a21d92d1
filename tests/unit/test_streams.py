"""A stream's log: a live reader gets every event; a detached stream keeps the replay caps' worth."""

import json

from executor_mcp.protocol.jsonrpc import Notification, Response
from executor_mcp.sessions.streams import MAX_EVENTS, UNENCODABLE_ANSWER, Listener, Stream
from executor_mcp.transport.sse import PRIMING


def note(index: int, padding: str = "") -> Notification:
    return Notification(method="notifications/progress", params={"index": index, "padding": padding})


async def test_a_live_reader_gets_every_event() -> None:
    stream = Stream(expected=1)
    for index in range(MAX_EVENTS * 2):
        stream.send(note(index))
    stream.answer(Response(id=1, result={}))
    events = await stream.read(0)
    assert [event.seq for event in events] == list(range(1, MAX_EVENTS * 2 + 2))
    assert await stream.read(events[-1].seq) == []


async def test_a_detached_stream_keeps_the_newest_within_the_caps() -> None:
    stream = Stream(expected=1)
    for index in range(MAX_EVENTS * 2):
        stream.send(note(index))
    stream.detach()
    assert [event.seq for event in stream.events] == list(range(MAX_EVENTS + 1, MAX_EVENTS * 2 + 1))
    stream.send(note(0, padding="x" * (3 * 1024 * 1024)))  # alone over the byte cap: kept, as the newest
    assert [event.seq for event in stream.events] == [MAX_EVENTS * 2 + 1]


async def test_a_primed_stream_starts_with_an_empty_event() -> None:
    stream = Stream(expected=1, priming=PRIMING)
    stream.answer(Response(id=1, result={}))
    first, second = await stream.read(0)
    assert (first.seq, first.payload, first.answer) == (1, b"", False)
    assert json.loads(second.payload) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert second.answer


async def test_an_unencodable_answer_becomes_a_32603_for_the_same_request() -> None:
    stream = Stream(expected=1)
    stream.send(Notification(method="notifications/progress", params={"value": float("nan")}))  # dropped
    stream.answer(Response(id="r", result={"value": float("nan")}))
    assert stream.finished
    (event,) = await stream.read(0)
    assert event.answer
    assert json.loads(event.payload) == {
        "jsonrpc": "2.0",
        "id": "r",
        "error": {"code": -32603, "message": UNENCODABLE_ANSWER},
    }


async def test_a_listener_carries_bytes_and_drops_what_cannot_be_encoded() -> None:
    listener = Listener()
    listener.send(Notification(method="notifications/tools/list_changed", params={"x": float("nan")}))
    listener.send(Notification(method="notifications/tools/list_changed"))
    listener.close()
    assert json.loads(await listener.receive()) == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert await listener.receive() is None

"""A stream's log: a live reader gets every event; a detached stream keeps the replay caps' worth."""

from executor_mcp.protocol.jsonrpc import Notification, Response
from executor_mcp.sessions.streams import MAX_EVENTS, Stream


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

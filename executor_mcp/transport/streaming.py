"""The SSE bodies: a POST's answers, and the GET stream (replay, then listening).

The generators hold no nurseries or cancel scopes around a `yield`: they only read the session's
stream logs and listener, and every request on them is guaranteed an answer by the session's exit
handling. A client that goes away cancels the generator; its `finally` decides what happens to the
work it was reading.
"""

import contextlib

import trio

from executor_mcp.sessions.session import Session
from executor_mcp.sessions.streams import Call, Comment, Listener, Stream
from executor_mcp.transport.asgi import LastChunk
from executor_mcp.transport.sse import (
    KEEPALIVE,
    MAX_AGE_ROTATION,
    REPLAY_COMPLETE,
    comment,
    event_id,
    message_event,
)

KEEPALIVE_SECONDS = 25.0
LISTEN_MAX_AGE = 30 * 60.0
# How long a POST stream's first events (its priming event) wait for what follows them: most calls answer
# within it, and their head, priming event, answer and end then go out as one write, not two.
PRIMING_HOLD_SECONDS = 0.05


async def stream_events(session: Session, stream: Stream, calls: list[Call]):
    """A POST's answers as they come. If the client leaves before the end, a resumable stream's work goes
    on and its answers wait for a GET (at-least-once); anything else is abandoned."""
    cursor, complete = 0, False
    try:
        while events := await stream.read(cursor):
            if cursor == 0 and not stream.finished:
                with trio.move_on_after(PRIMING_HOLD_SECONDS):
                    await stream.read(events[-1].seq)
                # Read again, without a checkpoint before `finished` is looked at: an answer may have come
                # between the hold's timeout and this task running again.
                events = await stream.read(cursor)
            cursor = events[-1].seq
            frames = b"".join(message_event(event.payload, event_id(stream.id, event.seq)) for event in events)
            if stream.finished:  # nothing more will come: these end the body
                yield LastChunk(frames)
                break
            yield frames
        complete = True
    finally:
        if complete:
            with trio.CancelScope(shield=True):
                await session.delivered(stream.id)
        elif stream.id in session.streams:
            session.detach(stream)
        else:
            session.abandon(calls)


async def listen_events(session: Session, listener: Listener, resume_from: tuple[str, int] | None):
    """The GET stream: first what a dropped POST left undelivered (then `: replay-complete` and close, so
    the client reconnects to listen); otherwise server-initiated messages, keepalives, and a close after
    the maximum age so stalled clients do not pin the session forever."""
    try:
        replayed = False
        async with contextlib.aclosing(_replay(session, resume_from)) as frames:
            async for frame, stream_id, stored in frames:
                if frame is None:
                    with trio.CancelScope(shield=True):
                        await session.delivered(stream_id, stored=stored)
                else:
                    replayed = True
                    yield frame
        if replayed:
            yield REPLAY_COMPLETE
            return
        closes_at = trio.current_time() + LISTEN_MAX_AGE
        while True:
            timed_out = True
            with trio.move_on_after(min(KEEPALIVE_SECONDS, max(closes_at - trio.current_time(), 0))):
                item = await listener.receive()
                timed_out = False
            if timed_out and trio.current_time() >= closes_at:
                yield MAX_AGE_ROTATION
                return
            if timed_out:
                yield KEEPALIVE
            elif item is None:
                return
            elif isinstance(item, Comment):
                yield comment(item.text)
            else:
                yield message_event(item)
    finally:
        session.unlisten(listener)


async def _replay(session: Session, resume_from: tuple[str, int] | None):
    """Frames to replay, each stream followed by a `None` frame once it is fully sent (to acknowledge).

    With `Last-Event-ID`, that stream first: live if it is still running (its answers arrive here as
    they come), else from the session file. Then every other finished, undelivered stream.
    """
    done: set[str] = set()
    if resume_from is not None:
        stream_id, after = resume_from
        live = session.streams.get(stream_id)
        if live is not None:
            cursor = after
            while events := await live.read(cursor):
                for event in events:
                    yield message_event(event.payload, event_id(live.id, event.seq)), live.id, False
                cursor = events[-1].seq
            yield None, live.id, False
            done.add(stream_id)
        elif session.runtime is not None:
            stored = await session.runtime.file.events_after(stream_id, after)
            if stored:
                for seq, payload in stored:
                    yield message_event(payload, event_id(stream_id, seq)), stream_id, True
                yield None, stream_id, True
                done.add(stream_id)
    for live in [s for s in session.streams.values() if s.finished and s.id not in done]:
        for event in live.events:
            yield message_event(event.payload, event_id(live.id, event.seq)), live.id, False
        yield None, live.id, False
        done.add(live.id)
    if session.runtime is not None:
        for stream_id, stored in await session.runtime.file.undelivered():
            if stream_id not in done and stored:
                for seq, payload in stored:
                    yield message_event(payload, event_id(stream_id, seq)), stream_id, True
                yield None, stream_id, True

"""A proxy (nginx, HAProxy) as a child of the test: started, waited for until its port takes connections, and
ended with the block (its own graceful signal, then a kill)."""

import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

START_BOUND = 20
STOP_BOUND = 5


@asynccontextmanager
async def listening(
    argv: list[str], port: int, stop_signal: signal.Signals, why_not: Callable[[], str]
) -> AsyncIterator[str]:
    """`argv` running until the block ends, once 127.0.0.1:`port` accepts; its base URL. `why_not` says why it
    exited before listening (its error log)."""
    process = await trio.lowlevel.open_process(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(START_BOUND):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    if process.returncode is not None:
                        raise AssertionError(why_not()) from None
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.send_signal(stop_signal)
            with trio.CancelScope(shield=True), trio.move_on_after(STOP_BOUND):
                await process.wait()
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()

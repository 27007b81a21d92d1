"""Headless Chromium for tests, driven over the Chrome DevTools Protocol with `trio-websocket` (no new
dependency, no chromedriver): start it, open a page, evaluate JavaScript in it, wait for a condition.

Every wait is bounded. The browser runs in a process group of its own, started here, and only that group
is killed when the block ends (after asking it to close). `/usr/bin/chromium` comes from
`scripts/install-browser`; `CHROMIUM` names another binary.
"""

import base64
import itertools
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import trio
import trio_websocket

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Where `Page.screenshots` writes, for a reviewer to look at (a temp dir: never committed).
SCREENSHOTS = Path(
    os.environ.get("EXECUTOR_MCP_SCREENSHOTS") or Path(tempfile.gettempdir()) / "executor-mcp-screenshots"
)
# (name, width, height, device scale, mobile): a desk and a phone.
VIEWPORTS = (("desktop", 1280, 900, 1, False), ("phone", 390, 844, 2, True))
START_TIMEOUT = 30.0
COMMAND_TIMEOUT = 15.0
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
)


class BrowserError(Exception):
    """The browser did not start, answered a command with an error, or a wait ran out."""


class Page:
    """One tab, over its flattened CDP session on the browser's websocket."""

    def __init__(self, browser: "Browser", session_id: str) -> None:
        self._browser = browser
        self._session = session_id
        self.log: list[dict[str, Any]] = []  # `Log.entryAdded` and `Runtime.exceptionThrown` events

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._browser.send(method, params, session_id=self._session)

    async def navigate(self, url: str, timeout: float = COMMAND_TIMEOUT) -> None:  # noqa: ASYNC109
        """Go to `url` and return once its load event fired."""
        loaded = self._browser.expect("Page.loadEventFired", self._session)
        with trio.fail_after(timeout):
            answer = await self.send("Page.navigate", {"url": url})
            if answer.get("errorText"):
                raise BrowserError(f"navigation failed: {answer['errorText']}")
            await loaded.wait()

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of `expression` (promises awaited); a thrown exception is a `BrowserError`."""
        answer = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in answer:
            raise BrowserError(f"evaluation threw: {answer['exceptionDetails'].get('text')}")
        return answer["result"].get("value")

    async def screenshots(self, name: str) -> list[Path]:
        """The whole page at each of `VIEWPORTS`, as `SCREENSHOTS/<name>-<viewport>.png` (the paths)."""
        await trio.Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        paths = []
        for viewport, width, height, scale, mobile in VIEWPORTS:
            metrics = {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": mobile}
            await self.send("Emulation.setDeviceMetricsOverride", metrics)
            await self.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
            shot = await self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
            path = SCREENSHOTS / f"{name}-{viewport}.png"
            await trio.Path(path).write_bytes(base64.b64decode(shot["data"]))
            paths.append(path)
        await self.send("Emulation.clearDeviceMetricsOverride")
        return paths

    async def wait_for(self, expression: str, timeout: float = COMMAND_TIMEOUT) -> Any:  # noqa: ASYNC109
        """The first truthy value of `expression`, polled every 50 ms for at most `timeout` seconds."""
        with trio.move_on_after(timeout):
            while True:
                value = await self.evaluate(expression)
                if value:
                    return value
                await trio.sleep(0.05)
        raise BrowserError(f"timed out after {timeout}s waiting for {expression}")


class Browser:
    def __init__(self, websocket: trio_websocket.WebSocketConnection) -> None:
        self._ws = websocket
        self._ids = itertools.count(1)
        self._answers: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._waiters: list[tuple[str, str | None, trio.Event]] = []
        self._pages: dict[str, Page] = {}

    async def send(
        self, method: str, params: dict[str, Any] | None = None, *, session_id: str | None = None
    ) -> dict[str, Any]:
        message_id = next(self._ids)
        sender, receiver = trio.open_memory_channel[dict[str, Any]](1)
        self._answers[message_id] = sender
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        try:
            with trio.fail_after(COMMAND_TIMEOUT):
                await self._ws.send_message(json.dumps(message))
                answer = await receiver.receive()
        finally:
            self._answers.pop(message_id, None)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error'].get('message')}")
        return answer.get("result", {})

    def expect(self, event: str, session_id: str | None) -> trio.Event:
        """An event set when `event` next arrives (register before causing it)."""
        happened = trio.Event()
        self._waiters.append((event, session_id, happened))
        return happened

    async def new_page(self) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        self._pages[attached["sessionId"]] = page
        for domain in ("Page", "Runtime", "Log"):
            await page.send(f"{domain}.enable")
        return page

    async def read(self) -> None:
        """Route every message: answers to their senders, events to waiters and to the page's log."""
        while True:
            try:
                message = json.loads(await self._ws.get_message())
            except trio_websocket.ConnectionClosed:
                return
            if "id" in message:
                sender = self._answers.get(message["id"])
                if sender is not None:
                    sender.send_nowait(message)
                continue
            method, session = message.get("method"), message.get("sessionId")
            page = self._pages.get(session or "")
            if page is not None and method in ("Log.entryAdded", "Runtime.exceptionThrown"):
                page.log.append(message.get("params", {}))
            for waiter in [w for w in self._waiters if w[0] == method and w[1] in (None, session)]:
                self._waiters.remove(waiter)
                waiter[2].set()


async def _devtools_url(profile: Path, process: trio.Process) -> str:
    """Chromium writes its port and browser path to `DevToolsActivePort` once it listens."""
    active = profile / "DevToolsActivePort"
    with trio.move_on_after(START_TIMEOUT):
        while True:
            if process.returncode is not None:
                raise BrowserError(f"chromium exited at start with status {process.returncode}")
            lines = active.read_text().split("\n") if active.exists() else []
            if len(lines) >= 2 and lines[0].strip().isdigit() and lines[1].strip():
                return f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"
            await trio.sleep(0.05)
    raise BrowserError(f"chromium did not open its DevTools port within {START_TIMEOUT}s")


def _kill_group(process: trio.Process) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        raise BrowserError(f"{CHROMIUM} is missing: run scripts/install-browser")
    with tempfile.TemporaryDirectory(prefix="executor-mcp-chromium-", ignore_cleanup_errors=True) as scratch:
        profile = Path(scratch) / "profile"
        process = await trio.lowlevel.open_process(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the renderers go with it
        )
        try:
            url = await _devtools_url(profile, process)
            async with (
                trio_websocket.open_websocket_url(url, max_message_size=16 * 1024 * 1024) as websocket,
                trio.open_nursery() as nursery,
            ):
                browser = Browser(websocket)
                nursery.start_soon(browser.read)
                try:
                    yield browser
                finally:
                    with trio.move_on_after(5, shield=True):
                        with suppress(BrowserError, trio_websocket.ConnectionClosed, trio.TooSlowError):
                            await browser.send("Browser.close")
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(5):
                    await process.wait()
                _kill_group(process)
                await process.wait()

"""Exporting spans over OTLP/HTTP (`--otlp-endpoint`): the OpenTelemetry SDK makes them, a task of the server's own
nursery sends them.

The SDK's batch processor would send from a thread of its own, outside the server's structured concurrency; here
a finished span goes into a bounded queue (past `MAX_QUEUED` it is dropped and counted, so a receiver that is
down costs memory for a few thousand spans at most), and `Exporter.run` sends what is queued every
`EXPORT_SECONDS` (sooner when `BATCH` are waiting), encoded as OTLP protobuf by the SDK's own encoder, with httpx.
A failed send is logged once per run of failures and its spans are dropped: traces are best effort, never a
reason to slow a tool call. At shutdown what is queued is sent once more, within `FINAL_EXPORT_SECONDS`.
"""

import collections
import logging

import httpx
import trio
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import Tracer

from executor_mcp import __version__

log = logging.getLogger(__name__)

MAX_QUEUED = 4096
BATCH = 512
EXPORT_SECONDS = 1.0
SEND_SECONDS = 10.0
FINAL_EXPORT_SECONDS = 3.0
PROTOBUF = "application/x-protobuf"


class SpanQueue(SpanProcessor):
    """Finished spans, waiting to be sent; bounded."""

    def __init__(self, limit: int = MAX_QUEUED) -> None:
        self._spans: collections.deque[ReadableSpan] = collections.deque()
        self._limit = limit
        self.dropped = 0
        self.full = trio.Event()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if len(self._spans) >= self._limit:
            self.dropped += 1
            return
        self._spans.append(span)
        if len(self._spans) >= BATCH:
            self.full.set()

    def take(self) -> list[ReadableSpan]:
        taken = list(self._spans)
        self._spans.clear()
        self.full = trio.Event()
        return taken

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def traces_url(endpoint: str) -> str:
    """Where OTLP/HTTP traces go: the endpoint's `/v1/traces`, unless it names that path itself."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


class Exporter:
    """The server's tracer, and the task that sends its spans to `endpoint`."""

    def __init__(self, endpoint: str, instance: str, http: httpx.AsyncClient) -> None:
        self.url = traces_url(endpoint)
        self._http = http
        self.queue = SpanQueue()
        resource = Resource.create(
            {"service.name": "executor-mcp", "service.version": __version__, "service.instance.id": instance}
        )
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(self.queue)
        self.tracer: Tracer = self._provider.get_tracer("executor_mcp", __version__)
        self.sent = 0
        self._failing = False

    async def run(self) -> None:
        """Send what is queued, every `EXPORT_SECONDS` or sooner when a batch is waiting, for as long as the server
        runs; then once more."""
        try:
            while True:
                with trio.move_on_after(EXPORT_SECONDS):
                    await self.queue.full.wait()
                await self.export()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(FINAL_EXPORT_SECONDS):
                await self.export()

    async def export(self) -> None:
        spans = self.queue.take()
        if not spans:
            return
        body = encode_spans(spans).SerializeToString()
        try:
            with trio.fail_after(SEND_SECONDS):
                answer = await self._http.post(self.url, content=body, headers={"content-type": PROTOBUF})
            answer.raise_for_status()
        except (httpx.HTTPError, trio.TooSlowError) as exc:
            if not self._failing:
                log.warning(
                    "sending %d spans to %s failed (%s); spans are dropped until it works again",
                    len(spans),
                    self.url,
                    type(exc).__name__,
                )
            self._failing = True
            return
        if self._failing:
            log.info("sending spans to %s works again", self.url)
        self._failing = False
        self.sent += len(spans)

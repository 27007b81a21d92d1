"""Spans of what a request does: the request, its MCP method, an execution, each tool call, each outbound request.

Every layer opens its spans here, through the OpenTelemetry API, on the tracer of the server it runs in: a server
started with `--otlp-endpoint` installs one for its tasks (a context variable its root task sets, which every task
it starts inherits), so two servers in one process never share one, and one without it pays one variable lookup
per span and nothing else. Trace context is W3C `traceparent`/`tracestate` only, in and out (no baggage: an
incoming request's baggage would otherwise be handed to every upstream).

What a span may hold is decided where it is opened, and never an argument value, a result, a credential, a URL's
path or query, or a session id: method names, tool paths, integration slugs, outcomes, status codes and hosts.
"""

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

AttributeValue = str | int | bool
_TRACER: contextvars.ContextVar[Tracer | None] = contextvars.ContextVar("executor_mcp_tracer", default=None)
_W3C = TraceContextTextMapPropagator()
# The W3C fields a caller may hand us, in a header or in a request's `_meta`: anything longer is not one.
MAX_TRACEPARENT = 55
MAX_TRACESTATE = 512


def install(tracer: Tracer | None) -> None:
    """The tracer of the calling task and of every task it starts from now on (None: none)."""
    _TRACER.set(tracer)


def enabled() -> bool:
    return _TRACER.get() is not None


@contextlib.contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, AttributeValue] | None = None,
    parent: context.Context | None = None,
) -> Iterator[Span | None]:
    """A span around the block, current within it; None (and no cost) when tracing is off. An exception ending the
    block marks the span as an error by its type alone (its message may quote input)."""
    tracer = _TRACER.get()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as opened:
        try:
            yield opened
        except BaseException as exc:
            opened.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
            raise


def note(opened: Span | None, name: str, value: AttributeValue) -> None:
    """Set one attribute on `opened` (nothing when tracing is off)."""
    if opened is not None:
        opened.set_attribute(name, value)


def parent_from(fields: Mapping[str, Any]) -> context.Context | None:
    """The context a caller's W3C fields (`traceparent`, `tracestate`: headers, or a request's `_meta`) name; None
    when they name none, are malformed, or tracing is off."""
    if _TRACER.get() is None:
        return None
    carrier = {}
    for name, limit in (("traceparent", MAX_TRACEPARENT), ("tracestate", MAX_TRACESTATE)):
        value = fields.get(name)
        if isinstance(value, str) and len(value) <= limit:
            carrier[name] = value
    if "traceparent" not in carrier:
        return None
    extracted = _W3C.extract(carrier)
    return extracted if trace.get_current_span(extracted).get_span_context().is_valid else None


def outgoing(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`headers` with the current span's `traceparent` (and `tracestate`) in place of any the caller set."""
    if _TRACER.get() is None:
        return headers
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    if not carrier:
        return headers
    kept = [(name, value) for name, value in headers if name.lower() not in carrier]
    return kept + list(carrier.items())

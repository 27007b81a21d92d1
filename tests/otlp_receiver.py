"""An OTLP/HTTP trace receiver for tests: `POST /v1/traces` with an `ExportTraceServiceRequest` in protobuf, decoded
with the OpenTelemetry project's own message classes, answered as the spec says (200 and an empty
`ExportTraceServiceResponse`). It keeps every span it was sent, flattened."""

from typing import Any

import attrs
import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.upstream import Answer, Received, Upstream, start_upstream

SPAN_KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@attrs.frozen
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status: int
    resource: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@attrs.define
class OtlpReceiver:
    upstream: Upstream

    @property
    def endpoint(self) -> str:
        return self.upstream.url

    def spans(self) -> list[ReceivedSpan]:
        found = []
        for received in self.upstream.calls("/v1/traces"):
            assert received.headers["content-type"] == "application/x-protobuf"
            request = ExportTraceServiceRequest.FromString(received.body)
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append(
                            ReceivedSpan(
                                name=span.name,
                                kind=SPAN_KINDS.get(span.kind, str(span.kind)),
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                attributes=_attributes(span.attributes),
                                status=span.status.code,
                                resource=resource,
                            )
                        )
        return found

    def raw(self) -> bytes:
        return b"".join(received.body for received in self.upstream.calls("/v1/traces"))


def _answer(request: Received) -> Answer:
    if request.method != "POST" or request.path != "/v1/traces":
        return Answer(status=404, body=b"")
    return Answer(body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf")


async def start_otlp_receiver(nursery: trio.Nursery) -> OtlpReceiver:
    return OtlpReceiver(await start_upstream(nursery, _answer))

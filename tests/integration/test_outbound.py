"""`Outbound` against real loopback upstreams: what reaches them, deadlines, caps, redirects, the SSRF guard."""

import gzip
import json
import logging
from typing import Any

import attrs
import pytest
import trio

from executor_mcp.config import Settings
from executor_mcp.outbound.client import Outbound, OutboundSettings
from executor_mcp.outbound.model import OutboundFailure, OutboundRequest
from tests.recording_upstream import Received, Reply, free_port, start_upstream

LOCAL = OutboundSettings.of(Settings(allow_local_network=True))


def get(url: str, **fields: Any) -> OutboundRequest:
    return OutboundRequest(method="GET", url=url, **fields)


async def failure_of(outbound: Outbound, request: OutboundRequest) -> OutboundFailure:
    with pytest.raises(OutboundFailure) as caught:
        await outbound.send(request)
    return caught.value


async def test_a_request_reaches_the_upstream_exactly_as_built(nursery: trio.Nursery) -> None:
    async def answer(received: Received, reply: Reply) -> None:
        await reply.send(201, [("content-type", "application/json"), ("X-Custom", "a"), ("x-custom", "b")], b"{}")

    upstream = await start_upstream(nursery, answer)
    async with Outbound(LOCAL) as outbound:
        response = await outbound.send(
            OutboundRequest(
                method="POST",
                url=f"{upstream.origin}/orders/a%20b%2Fc?include=items&include=customer",
                headers=(("User-Agent", "executor-mcp/test"), ("Content-Type", "application/json")),
                body=b'{"a":1}',
            )
        )
    [received] = upstream.received
    assert (received.method, received.target, received.body) == (
        "POST",
        "/orders/a%20b%2Fc?include=items&include=customer",
        b'{"a":1}',
    )
    assert received.header("user-agent") == "executor-mcp/test"
    assert received.header("accept") is None  # nothing adds an Accept header
    assert response.status == 201
    assert response.headers["x-custom"] == "a, b"
    assert response.body == b"{}"


async def test_no_headers_within_the_deadline_is_a_headers_timeout(nursery: trio.Nursery) -> None:
    async def stall(received: Received, reply: Reply) -> None:
        await trio.sleep_forever()

    upstream = await start_upstream(nursery, stall)
    async with Outbound(attrs.evolve(LOCAL, headers_timeout=0.2)) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/logs"))
    assert failure.code == "upstream_response_headers_timeout"
    assert failure.message.startswith("Upstream returned no response headers within 200ms. The endpoint may be")


async def test_a_body_that_does_not_finish_is_a_body_timeout(nursery: trio.Nursery) -> None:
    async def trickle(received: Received, reply: Reply) -> None:
        await reply.start(200, [("content-type", "application/json")])
        await reply.data(b'{"partial":')
        await trio.sleep_forever()

    upstream = await start_upstream(nursery, trickle)
    async with Outbound(attrs.evolve(LOCAL, body_timeout=0.2)) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/slow"))
    assert failure.code == "upstream_response_body_timeout"
    assert failure.message.startswith("Upstream response body did not finish within 200ms. The request was aborted.")


@pytest.mark.parametrize("declared", [True, False])
async def test_a_body_over_the_cap_is_refused(nursery: trio.Nursery, declared: bool) -> None:
    async def big(received: Received, reply: Reply) -> None:
        if declared:
            await reply.send(200, [("content-type", "text/plain")], b"x" * 5000)
            return
        await reply.start(200, [("content-type", "text/plain")])
        for _ in range(10):
            await reply.data(b"x" * 1000)
        await reply.end()

    upstream = await start_upstream(nursery, big)
    async with Outbound(attrs.evolve(LOCAL, max_response_bytes=4096)) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/big"))
        assert failure.code == "upstream_response_too_large"
        assert "4096 bytes" in failure.message
        exact = await outbound.fetch(f"{upstream.origin}/big", max_bytes=10_000)
    assert len(exact) >= 5000


def gzipped(data: bytes, layers: int = 1) -> bytes:
    for _ in range(layers):
        data = gzip.compress(data)
    return data


async def test_a_gzip_body_is_decoded_and_a_gzip_bomb_stops_at_the_cap(nursery: trio.Nursery) -> None:
    bomb = gzipped(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in about 64 KiB

    async def answer(received: Received, reply: Reply) -> None:
        assert received.header("accept-encoding") == "gzip"
        body = gzipped(b'{"small": true}') if received.target == "/small" else bomb
        await reply.send(200, [("content-type", "application/json"), ("content-encoding", "gzip")], body)

    upstream = await start_upstream(nursery, answer)
    async with Outbound(attrs.evolve(LOCAL, max_response_bytes=1024 * 1024)) as outbound:
        small = await outbound.send(get(f"{upstream.origin}/small"))
        assert json.loads(small.body) == {"small": True}
        failure = await failure_of(outbound, get(f"{upstream.origin}/bomb"))
    assert failure.code == "upstream_response_too_large"


async def test_stacked_encodings_are_refused_not_expanded(nursery: trio.Nursery) -> None:
    async def answer(received: Received, reply: Reply) -> None:
        body = gzipped(b"\0" * (1024 * 1024), layers=2)
        await reply.send(200, [("content-type", "text/plain"), ("content-encoding", "gzip, gzip")], body)

    upstream = await start_upstream(nursery, answer)
    async with Outbound(LOCAL) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/stacked"))
    assert failure.message == "Upstream answered with an unsupported content encoding: gzip, gzip"


async def test_a_query_credential_never_reaches_the_log(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    upstream = await start_upstream(nursery)
    async with Outbound(LOCAL) as outbound:
        await outbound.send(
            get(f"{upstream.origin}/users?api_key=SUPERSECRET", credential_query=frozenset({"api_key"}))
        )
    assert "SUPERSECRET" not in caplog.text


async def test_an_ndjson_stream_is_cut_at_the_byte_cap(nursery: trio.Nursery) -> None:
    async def lines(received: Received, reply: Reply) -> None:
        await reply.start(200, [("content-type", "application/x-ndjson")])
        for index in range(50):
            await reply.data(json.dumps({"n": index}).encode() + b"\n")
        await reply.end()

    upstream = await start_upstream(nursery, lines)
    settings = attrs.evolve(LOCAL, stream_max_bytes=25)
    async with Outbound(settings) as outbound:
        response = await outbound.send(get(f"{upstream.origin}/events"))
    assert response.stream is not None
    assert response.stream.truncated
    assert response.stream.byte_count == 25
    assert len(response.body) == 25
    assert response.stream.headers()["x-executor-stream"] == "truncated"


async def test_a_stream_that_idles_is_cut_at_the_time_cap(nursery: trio.Nursery) -> None:
    async def idle(received: Received, reply: Reply) -> None:
        await reply.start(200, [("content-type", "application/stream+json")])
        await reply.data(b'{"level":"info","message":"build started"}\n')
        await trio.sleep_forever()

    upstream = await start_upstream(nursery, idle)
    async with Outbound(attrs.evolve(LOCAL, stream_max_seconds=0.2)) as outbound:
        response = await outbound.send(get(f"{upstream.origin}/logs"))
    assert response.stream is not None
    assert response.stream.truncated
    assert response.stream.duration_ms >= 200
    assert response.body == b'{"level":"info","message":"build started"}\n'


async def test_a_finished_stream_is_complete(nursery: trio.Nursery) -> None:
    async def three(received: Received, reply: Reply) -> None:
        await reply.start(200, [("content-type", "application/stream+json")])
        for index in range(3):
            await reply.data(json.dumps({"n": index}).encode() + b"\n")
        await reply.end()

    upstream = await start_upstream(nursery, three)
    async with Outbound(LOCAL) as outbound:
        response = await outbound.send(get(f"{upstream.origin}/logs"))
        buffered = await outbound.send(get(f"{upstream.origin}/logs"), collect_streams=False)
    assert response.stream is not None
    assert not response.stream.truncated
    assert response.body.count(b"\n") == 3
    assert buffered.stream is None


async def test_same_origin_redirects_are_followed_with_credentials(nursery: trio.Nursery) -> None:
    async def route(received: Received, reply: Reply) -> None:
        if received.target.startswith("/old"):
            await reply.send(302, [("location", "/new?x=1")])
        else:
            await reply.send(200, [("content-type", "text/plain")], b"moved here")

    upstream = await start_upstream(nursery, route)
    async with Outbound(LOCAL) as outbound:
        response = await outbound.send(
            get(f"{upstream.origin}/old", headers=(("Authorization", "Bearer t"),), credential_headers=frozenset())
        )
    assert response.body == b"moved here"
    assert [r.target for r in upstream.received] == ["/old", "/new?x=1"]
    assert upstream.received[1].header("authorization") == "Bearer t"


async def test_a_cross_origin_redirect_drops_every_credential(nursery: trio.Nursery) -> None:
    elsewhere = await start_upstream(nursery)

    async def bounce(received: Received, reply: Reply) -> None:
        # A hostile upstream copies the query (with its credential) into the redirect.
        query = received.target.split("?", 1)[1]
        await reply.send(307, [("location", f"{elsewhere.origin}/landing?{query}")])

    upstream = await start_upstream(nursery, bounce)
    request = OutboundRequest(
        method="POST",
        url=f"{upstream.origin}/start?api_key=SECRET1&page=2",
        headers=(
            ("Authorization", "Bearer SECRET2"),
            ("Cookie", "sid=SECRET3"),
            ("X-Api-Key", "SECRET4"),
            ("Proxy-Authorization", "Basic SECRET5"),
            ("X-Trace", "kept"),
        ),
        body=b"payload",
        credential_headers=frozenset({"x-api-key"}),
        credential_query=frozenset({"api_key"}),
    )
    async with Outbound(LOCAL) as outbound:
        response = await outbound.send(request)
    assert response.status == 200
    [landed] = elsewhere.received
    assert landed.target == "/landing?page=2"
    assert landed.method == "POST"
    assert landed.body == b"payload"
    assert landed.header("x-trace") == "kept"
    assert not {"authorization", "cookie", "x-api-key", "proxy-authorization"} & landed.names()
    assert "SECRET" not in repr(landed)


async def test_a_303_becomes_a_get_without_body(nursery: trio.Nursery) -> None:
    async def route(received: Received, reply: Reply) -> None:
        if received.target == "/submit":
            await reply.send(303, [("location", "/result")])
        else:
            await reply.send(200, [], b"done")

    upstream = await start_upstream(nursery, route)
    async with Outbound(LOCAL) as outbound:
        await outbound.send(
            OutboundRequest(
                method="POST", url=f"{upstream.origin}/submit", headers=(("Content-Type", "text/plain"),), body=b"x"
            )
        )
    follow = upstream.received[1]
    assert (follow.method, follow.body, follow.header("content-type")) == ("GET", b"", None)


async def test_more_than_ten_redirects_are_refused(nursery: trio.Nursery) -> None:
    async def loop(received: Received, reply: Reply) -> None:
        hop = int(received.target.rsplit("/", 1)[1])
        await reply.send(302, [("location", f"/hop/{hop + 1}")])

    upstream = await start_upstream(nursery, loop)
    async with Outbound(LOCAL) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/hop/0"))
    assert failure.code == "upstream_unreachable"
    assert "redirected more than 10 times" in failure.message
    assert len(upstream.received) == 11  # the request and ten followed hops


async def test_ten_redirects_are_followed(nursery: trio.Nursery) -> None:
    async def loop(received: Received, reply: Reply) -> None:
        hop = int(received.target.rsplit("/", 1)[1])
        if hop == 10:
            await reply.send(200, [], b"arrived")
        else:
            await reply.send(301, [("location", f"/hop/{hop + 1}")])

    upstream = await start_upstream(nursery, loop)
    async with Outbound(LOCAL) as outbound:
        response = await outbound.send(get(f"{upstream.origin}/hop/0"))
    assert response.body == b"arrived"


async def test_a_redirect_to_a_metadata_address_is_blocked_even_on_the_local_network(nursery: trio.Nursery) -> None:
    async def to_metadata(received: Received, reply: Reply) -> None:
        await reply.send(302, [("location", "http://169.254.169.254/latest/meta-data/")])

    upstream = await start_upstream(nursery, to_metadata)
    async with Outbound(LOCAL) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/go"))
        other = await failure_of(outbound, get("http://metadata.google.internal/computeMetadata/v1/"))
    assert failure.code == other.code == "upstream_blocked"
    assert failure.message == "Metadata service addresses are not allowed: 169.254.169.254"


async def test_a_redirect_to_another_scheme_is_blocked(nursery: trio.Nursery) -> None:
    async def to_file(received: Received, reply: Reply) -> None:
        await reply.send(302, [("location", "file:///etc/passwd")])

    upstream = await start_upstream(nursery, to_file)
    async with Outbound(LOCAL) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/go"))
    assert failure.code == "upstream_blocked"
    assert failure.message.startswith("Only HTTP and HTTPS outbound requests are allowed")


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "api.localhost", "169.254.169.254", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"]
)
async def test_the_guard_blocks_local_destinations_before_connecting(nursery: trio.Nursery, host: str) -> None:
    upstream = await start_upstream(nursery)
    async with Outbound(OutboundSettings.of(Settings())) as outbound:
        failure = await failure_of(outbound, get(f"http://{host}:{upstream.port}/x?token=SECRET"))
    assert failure.code == "upstream_blocked"
    assert "SECRET" not in failure.message
    assert upstream.received == []


async def test_a_name_resolving_to_a_private_address_is_blocked(nursery: trio.Nursery) -> None:
    upstream = await start_upstream(nursery)
    lookups: list[tuple[str, int]] = []

    async def resolver(host: str, port: int) -> list[str]:
        lookups.append((host, port))
        return ["93.184.216.34", "127.0.0.1"]  # one public answer does not excuse a private one

    async with Outbound(OutboundSettings.of(Settings()), resolver=resolver) as outbound:
        failure = await failure_of(outbound, get(f"http://rebind.test:{upstream.port}/x"))
    assert failure.code == "upstream_blocked"
    assert failure.message == (
        "Resolved address is local or private: 127.0.0.1 (rebind.test); "
        "the server allows local addresses with --allow-local-network"
    )
    assert lookups == [("rebind.test", upstream.port)]
    assert upstream.received == []


async def test_the_vetted_address_is_the_one_connected_to(nursery: trio.Nursery) -> None:
    upstream = await start_upstream(nursery)
    answers = iter([["127.0.0.1"], ["10.9.9.9"]])  # a second lookup would get another address
    lookups: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return next(answers)

    async with Outbound(LOCAL, resolver=resolver) as outbound:
        first = await outbound.send(get(f"http://api.upstream.test:{upstream.port}/one"))
        second = await outbound.send(get(f"http://api.upstream.test:{upstream.port}/two"))
    assert (first.status, second.status) == (200, 200)
    # `api.upstream.test` exists in no DNS: reaching the upstream proves the injected answer was dialled.
    assert [r.header("host") for r in upstream.received] == [f"api.upstream.test:{upstream.port}"] * 2
    assert lookups == ["api.upstream.test"]  # one connection, one lookup; kept alive for the second call


async def test_an_unresolvable_name_is_unreachable() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        raise OSError("no such host")

    async with Outbound(LOCAL, resolver=resolver) as outbound:
        failure = await failure_of(outbound, get("http://nowhere.test/x?key=SECRET"))
    assert failure.code == "upstream_unreachable"
    assert failure.message == "Could not resolve upstream host nowhere.test."


async def test_a_refused_port_is_unreachable() -> None:
    port = free_port()
    async with Outbound(LOCAL) as outbound:
        failure = await failure_of(outbound, get(f"http://127.0.0.1:{port}/x?key=SECRET"))
    assert failure.code == "upstream_unreachable"
    assert failure.message == f"Could not connect to upstream http://127.0.0.1:{port}."


async def test_a_connection_dropped_mid_body_is_unreachable(nursery: trio.Nursery) -> None:
    async def drop(received: Received, reply: Reply) -> None:
        await reply.start(200, [("content-type", "application/json"), ("content-length", "100")])
        await reply.data(b"partial")
        await reply.stream.aclose()

    upstream = await start_upstream(nursery, drop)
    async with Outbound(LOCAL) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/x"))
    assert failure.code == "upstream_unreachable"


async def test_fetch_gets_a_document_and_names_a_non_2xx_status(nursery: trio.Nursery) -> None:
    async def spec(received: Received, reply: Reply) -> None:
        if received.target == "/openapi.json":
            await reply.send(200, [("content-type", "application/json")], b'{"openapi":"3.0.0"}')
        else:
            await reply.send(404, [], b"nope")

    upstream = await start_upstream(nursery, spec)
    async with Outbound(LOCAL) as outbound:
        document = await outbound.fetch(f"{upstream.origin}/openapi.json")
        with pytest.raises(OutboundFailure) as caught:
            await outbound.fetch(f"{upstream.origin}/missing.json")
    assert document == b'{"openapi":"3.0.0"}'
    assert upstream.received[0].header("accept") == "application/json, application/yaml, text/yaml, */*"
    assert (upstream.received[0].header("user-agent") or "").startswith("executor-mcp")
    assert caught.value.message == "Failed to fetch OpenAPI document: HTTP 404"


async def test_fetch_is_guarded_too(nursery: trio.Nursery) -> None:
    upstream = await start_upstream(nursery)
    async with Outbound(OutboundSettings.of(Settings())) as outbound:
        with pytest.raises(OutboundFailure) as caught:
            await outbound.fetch(f"{upstream.origin}/openapi.json")
    assert caught.value.code == "upstream_blocked"
    assert upstream.received == []


async def test_outbound_outside_its_block_refuses_to_send() -> None:
    outbound = Outbound(LOCAL)
    with pytest.raises(RuntimeError):
        await outbound.send(get("http://127.0.0.1:1/"))


@pytest.mark.parametrize(
    "location", ["http:127.0.0.1/", "http://[::1", "http://[zz]/", "https:", "https://:0/", "http://"]
)
async def test_a_redirect_that_names_no_valid_target_is_an_invalid_redirect(
    nursery: trio.Nursery, location: str
) -> None:
    async def malformed(received: Received, reply: Reply) -> None:
        await reply.send(302, [("location", location)])

    upstream = await start_upstream(nursery, malformed)
    async with Outbound(LOCAL) as outbound:
        failure = await failure_of(outbound, get(f"{upstream.origin}/go"))
    assert failure.code == "upstream_unreachable"
    assert failure.message == f"Upstream {upstream.origin} sent an invalid redirect."
    assert len(upstream.received) == 1


async def test_no_cookie_an_upstream_sets_is_sent_again(nursery: trio.Nursery) -> None:
    # One `Outbound` serves every caller: a cookie jar would hand one caller's upstream session to the next.
    async def sets_a_cookie(received: Received, reply: Reply) -> None:
        await reply.send(200, [("set-cookie", "session=first-caller; Path=/")], b"{}")

    upstream = await start_upstream(nursery, sets_a_cookie)
    async with Outbound(LOCAL) as outbound:
        await outbound.send(get(f"{upstream.origin}/a"))
        await outbound.send(get(f"{upstream.origin}/b"))
    assert [received.header("cookie") for received in upstream.received] == [None, None]

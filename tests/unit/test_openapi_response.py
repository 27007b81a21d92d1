"""Response classification: envelopes, bodies, files, and the failure codes with their exact messages."""

import base64
from typing import Any

import pytest

from executor_mcp.integrations.credentials import credential_missing_result
from executor_mcp.integrations.openapi.binding import ResponseShape
from executor_mcp.integrations.openapi.response import (
    classify,
    parse_ndjson,
    sniff_mime,
    upstream_message,
)
from executor_mcp.outbound.model import OutboundResponse, StreamStats

JSON = {"content-type": "application/json"}


def answer(
    status: int, body: bytes = b"", headers: dict[str, str] | None = None, stream: StreamStats | None = None
) -> OutboundResponse:
    return OutboundResponse(
        status=status, headers=headers if headers is not None else dict(JSON), body=body, stream=stream
    )


def result(response: OutboundResponse, shape: ResponseShape | None = None) -> dict[str, Any]:
    return classify(shape or ResponseShape(), response, integration="orders", owner="org", connection="myMainKey")


def test_success_envelope_carries_all_lowercased_headers() -> None:
    headers = {"content-type": "application/json", "x-request-id": "r1", "set-cookie": "a=b"}
    assert result(answer(200, b'{"id":"1"}', headers)) == {
        "ok": True,
        "data": {"id": "1"},
        "http": {"status": 200, "headers": headers},
    }


def test_bodies_by_content_type() -> None:
    assert result(answer(204, b""))["data"] is None
    assert result(answer(200, b"not json <<<"))["data"] == "not json <<<"
    assert result(answer(200, b"NaN"))["data"] == "NaN"  # not JSON, as JSON.parse says
    assert result(answer(200, b"plain", {"content-type": "text/plain"}))["data"] == "plain"
    assert result(answer(200, b"<a/>", {}))["data"] == "<a/>"
    assert result(answer(200, b'{"a":1}', {"content-type": "application/problem+json; charset=utf-8"}))["data"] == {
        "a": 1
    }
    deep = b"[" * 200 + b"]" * 200
    assert result(answer(200, deep))["data"] == deep.decode()


def test_ndjson_streams_become_arrays_with_stream_headers() -> None:
    stats = StreamStats(truncated=False, byte_count=60, duration_ms=5)
    body = b'{"level":"info","message":"build started"}\n{"n":2}\n\n{"n":3}\n'
    response = result(answer(200, body, {"content-type": "application/stream+json"}, stats))
    assert response["data"] == [{"level": "info", "message": "build started"}, {"n": 2}, {"n": 3}]
    assert response["http"]["headers"]["x-executor-stream"] == "complete"
    assert response["http"]["headers"]["x-executor-stream-bytes"] == "60"
    assert response["http"]["headers"]["x-executor-stream-duration-ms"] == "5"
    sse = result(answer(200, b"data: x\n\n", {"content-type": "text/event-stream"}, stats))
    assert sse["data"] == "data: x\n\n"


def test_a_truncated_partial_line_is_dropped_and_a_bad_line_gives_text() -> None:
    assert parse_ndjson('{"a":1}\n{"a":', truncated=True) == [{"a": 1}]
    assert parse_ndjson('{"a":1}\n{"a":', truncated=False) == '{"a":1}\n{"a":'
    assert parse_ndjson('{"a":1}\nnope\n{"a":2}', truncated=True) == '{"a":1}\nnope\n{"a":2}'


def test_binary_responses_become_tool_files_sniffed_when_generic() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
    file = result(answer(200, png, {"content-type": "application/octet-stream"}), ResponseShape(file="binary"))["data"]
    assert file == {
        "_tag": "ToolFile",
        "mimeType": "image/png",
        "encoding": "base64",
        "data": base64.b64encode(png).decode(),
        "byteLength": 16,
    }
    pdf = result(answer(200, b"%PDF-1.7", {"content-type": "application/pdf"}), ResponseShape(file="binary"))["data"]
    assert pdf["mimeType"] == "application/pdf"


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (b"\xff\xd8\xff\xe0", "image/jpeg"),
        (b"GIF89a..", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8", "image/webp"),
        (b"PK\x03\x04", "application/zip"),
        (b"hello, world\n", "text/plain"),
        (b"\x00\x01\x02", None),
        (b"", None),
    ],
)
def test_sniffing(data: bytes, mime: str | None) -> None:
    assert sniff_mime(data) == mime


def test_byte_fields_become_tool_files() -> None:
    shape = ResponseShape(media_type="application/json", file="byteField", byte_encoding="base64url")
    encoded = base64.urlsafe_b64encode(b"%PDF-1.4 ...").decode().rstrip("=")
    file = result(answer(200, f'{{"data":"{encoded}","size":12}}'.encode()), shape)["data"]
    assert file["_tag"] == "ToolFile"
    assert file["mimeType"] == "application/pdf"
    assert file["byteLength"] == 12
    assert base64.b64decode(file["data"]) == b"%PDF-1.4 ..."
    assert result(answer(200, b'{"other":1}'), shape)["data"] == {"other": 1}


def test_401_is_connection_rejected_with_the_recovery_block() -> None:
    error = result(answer(401, b'{"error":{"message":"invalid token"}}'))["error"]
    assert error["code"] == "connection_rejected"
    assert error["status"] == 401
    assert error["retryable"] is False
    assert error["message"] == (
        'Upstream rejected credentials for "orders" with HTTP 401. Re-authenticate or update the connection '
        '"myMainKey" before retrying this tool.'
    )
    details = error["details"]
    assert details["category"] == "authentication"
    assert details["integration"] == {"id": "orders", "scope": "org"}
    assert details["credential"] == {"kind": "upstream", "label": "Upstream authorization"}
    assert details["upstream"] == {"status": 401, "details": {"error": {"message": "invalid token"}}}
    recovery = details["recovery"]
    assert recovery["createConnectionTool"] == "executor.coreTools.connections.createHandoff"
    assert recovery["startOAuthTool"] == "executor.coreTools.oauth.start"
    assert recovery["listConnectionsTool"] == "executor.coreTools.connections.list"
    assert recovery["connectionInstructions"].startswith("For API keys and tokens, call createConnectionTool")
    assert recovery["connectionInstructions"].endswith("before retrying this tool.")
    assert recovery["oauthInstructions"].startswith("For OAuth credentials, call startOAuthTool")
    assert recovery["oauthInstructions"].endswith("then retry the tool.")


def test_an_ordinary_403_stays_connection_rejected() -> None:
    body = b'{"error":{"status":"PERMISSION_DENIED","message":"Caller lacks permission"}}'
    assert result(answer(403, body))["error"]["code"] == "connection_rejected"


@pytest.mark.parametrize(
    ("headers", "body", "named"),
    [
        (
            {**JSON, "www-authenticate": 'Bearer realm="api", error="insufficient_scope", scope="files.read"'},
            b'{"message":"forbidden"}',
            "files.read",
        ),
        (JSON, b'{"error":{"code":403,"details":[{"reason":"ACCESS_TOKEN_SCOPE_INSUFFICIENT"}]}}', None),
        (JSON, b'{"error":"insufficient_scope"}', None),
    ],
)
def test_a_403_with_a_scope_signal_is_scope_insufficient(
    headers: dict[str, str], body: bytes, named: str | None
) -> None:
    error = result(answer(403, body, headers))["error"]
    assert error["code"] == "oauth_scope_insufficient"
    assert "does not cover the scope" in error["message"]
    if named:
        assert named in error["message"]
    assert "startOAuthTool" not in error["details"]["recovery"]
    assert error["details"]["recovery"]["scopeInstructions"]
    assert error["details"]["upstream"]["status"] == 403


def test_declared_scope_alternatives_are_named_when_the_challenge_names_none() -> None:
    response = answer(403, b'{"error":{"details":[{"reason":"ACCESS_TOKEN_SCOPE_INSUFFICIENT"}]}}')
    error = classify(
        ResponseShape(),
        response,
        integration="g",
        owner="user",
        connection="c",
        required_scopes=(("things.read",), ("admin",)),
    )["error"]
    assert "things.read, or admin" in error["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": {"message": "db timeout"}}, "db timeout"),
        ({"message": "m", "detail": "d"}, "m"),
        ({"errorMessage": "em"}, "em"),
        ({"errors": [{"code": 1}, {"title": "t", "detail": "first"}]}, "first"),
        ({"detail": "d", "title": "t"}, "d"),
        ({"title": "t"}, "t"),
        ({"description": "desc"}, "desc"),
        ({"error": {"field": "name", "reason": "too_short"}}, '{"error":{"field":"name","reason":"too_short"}}'),
        ("", "Upstream returned HTTP 422"),
        (None, "Upstream returned HTTP 422"),
        ("<html>oops</html>", "<html>oops</html>"),
    ],
)
def test_upstream_message_extraction_order(body: Any, message: str) -> None:
    assert upstream_message(body, 422) == message


def test_long_messages_are_clamped() -> None:
    assert upstream_message("x" * 5000, 500) == "x" * 1024 + "…"
    assert upstream_message({"k": "v" * 2000}, 500).endswith("…")
    assert len(upstream_message({"k": "v" * 2000}, 500)) == 1025


def test_other_statuses_are_upstream_http_errors_with_the_body_as_details() -> None:
    error = result(answer(500, b'{"error":{"code":"internal","message":"db timeout"}}'))["error"]
    assert error == {
        "code": "upstream_http_error",
        "status": 500,
        "message": "db timeout",
        "details": {"error": {"code": "internal", "message": "db timeout"}},
    }
    assert result(answer(404, b"", {}))["error"] == {
        "code": "upstream_http_error",
        "status": 404,
        "message": "Upstream returned HTTP 404",
        "details": "",
    }


def test_credential_missing_result() -> None:
    outcome = credential_missing_result(integration="orders", owner="user", connection="main", oauth=False)
    error = outcome["error"]
    assert outcome["ok"] is False
    assert error["code"] == "connection_value_missing"
    assert error["message"] == (
        'Connection "main" for "orders" has no resolvable credential value. Re-authenticate or update the connection.'
    )
    assert error["details"]["category"] == "authentication"
    assert error["details"]["integration"] == {"id": "orders", "scope": "user"}
    assert "status" not in error
    oauth = credential_missing_result(integration="orders", owner="org", connection="main", oauth=True)
    assert oauth["error"]["code"] == "oauth_connection_missing"

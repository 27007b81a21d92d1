"""A downstream MCP server built with the official SDK, run by tests as a subprocess (asyncio + uvicorn):

    python tests/mcp_downstream.py --transport streamable|sse [--port N] [--token T] [--extra]
        [--oauth-issuer URL] --state DIR

It binds 127.0.0.1 (port 0 unless given, so a restart can take the same port back), prints `PORT <n>` once it
listens, and serves until SIGTERM. With `--token`, every request without `Authorization: Bearer <token>` is
answered 401. With `--oauth-issuer`, it is an OAuth protected resource as the MCP authorization spec has it
(the SDK's own: protected-resource metadata naming that issuer, 401 with `resource_metadata`), accepting only
the issuer's JWT access tokens for its own URL with `orders:read` (verified against the issuer's JWKS with PyJWT).
`--state` is a directory where the destructive tool counts its runs.
"""

import argparse
import base64
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import jwt
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ImageContent, TextContent, ToolAnnotations, ToolListChangedNotification

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n-not-really-a-png").decode()


class JwtVerifier:
    """The issuer's RS256 JWTs whose audience is this server, their scopes as granted."""

    def __init__(self, issuer: str, resource: str) -> None:
        discovery = httpx.get(issuer + "/.well-known/openid-configuration", timeout=10).json()
        self.keys = jwt.PyJWKSet.from_dict(httpx.get(discovery["jwks_uri"], timeout=10).json())
        self.issuer, self.resource = issuer, resource

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = next(k for k in self.keys.keys if k.key_id == kid)
            claims = jwt.decode(token, key.key, algorithms=["RS256"], audience=self.resource, issuer=self.issuer)
        except Exception:
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=claims.get("exp"),
            resource=self.resource,
            subject=claims.get("sub"),
        )


def build(state: Path, *, extra: bool = False, oauth: tuple[str, str] | None = None) -> MCPServer:
    """`oauth`: (issuer, this server's URL) to require that issuer's tokens."""
    auth = verifier = None
    if oauth is not None:
        issuer, resource = oauth
        auth = AuthSettings(
            issuer_url=issuer,
            resource_server_url=resource,
            required_scopes=["orders:read"],
            validate_token_resource=False,
        )
        verifier = JwtVerifier(issuer, resource)
    server = MCPServer("downstream", version="1.2.3", auth=auth, token_verifier=verifier)

    if extra:

        @server.tool(description="Only on servers started with --extra.")
        def extra_tool() -> str:
            return "extra"

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(
        name="Delete Everything!",
        annotations=ToolAnnotations(destructiveHint=True, title="Delete every record"),
        description="Deletes records.",
    )
    def delete_everything(target: str) -> str:
        runs = state / "deletes"
        count = int(runs.read_text()) + 1 if runs.exists() else 1
        runs.write_text(str(count))
        return f"deleted {target} ({count})"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=True))
    def peek() -> str:
        runs = state / "deletes"
        return runs.read_text() if runs.exists() else "0"

    @server.tool(description="A picture and its numbers.")
    def picture() -> CallToolResult:
        return CallToolResult(
            content=[
                TextContent(type="text", text="a pixel"),
                ImageContent(type="image", data=PIXEL, mimeType="image/png"),
            ],
            structured_content={"width": 1, "height": 1},
        )

    @server.tool()
    def fail() -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="it broke")], is_error=True)

    @server.tool(description="Adds the tool late_arrival and says so.")
    async def grow(ctx: Context) -> str:
        def late_arrival() -> str:
            return "I am new"

        server.add_tool(late_arrival, name="late_arrival")
        await ctx.session.send_notification(ToolListChangedNotification(), related_request_id=ctx.request_id)
        return "grown"

    return server


class RequireBearer:
    """401 for any request without the bearer token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})
            return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("streamable", "sse"), default="streamable")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token")
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--extra", action="store_true", help="one more tool, extra_tool")
    parser.add_argument("--oauth-issuer", help="require this authorization server's tokens")
    options = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", options.port))
    sock.listen(128)  # connections queue from now on, before uvicorn serves
    port = sock.getsockname()[1]
    oauth = (options.oauth_issuer, f"http://127.0.0.1:{port}/mcp") if options.oauth_issuer else None
    server = build(options.state, extra=options.extra, oauth=oauth)
    app = server.streamable_http_app() if options.transport == "streamable" else server.sse_app()
    if options.token:
        app = RequireBearer(app, options.token)
    print(f"PORT {port}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()

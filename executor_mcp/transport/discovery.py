"""Where clients find the server: its paths, its public URL, and the OAuth protected-resource metadata
(RFC 9728) built from that URL. No I/O.

The public URL is `--public-url`, or `http://HOST:PORT` of the actual bind (known only once listening,
so `--port 0` shows the real port). `offline_access` stays in `scopes_supported`: clients request
exactly the advertised scopes, and without it they get no refresh token.
"""

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.protocol.resources import MCP_PATH

METADATA_PATH = "/.well-known/oauth-protected-resource"
# The JSON APIs (policies, integrations, sessions, audit, approvals) live under it.
API_PREFIX = "/api"
SCOPES = ["openid", "profile", "email", "offline_access"]


@attrs.define
class PublicUrl:
    """Where clients reach this server; set once the listener is bound."""

    value: str = attrs.field(default="", converter=lambda url: url.rstrip("/"))

    @property
    def resource(self) -> str:
        return self.value + MCP_PATH

    @property
    def metadata_url(self) -> str:
        return self.metadata_url_for(MCP_PATH)

    def metadata_url_for(self, resource: str) -> str:
        """Where the metadata of the endpoint at `resource` (`/mcp`, `/mcp/toolkits/<slug>`) is (RFC 9728)."""
        return self.value + METADATA_PATH + resource


def protected_resource_metadata(
    public: PublicUrl, authorization_servers: tuple[str, ...], resource: str = MCP_PATH
) -> JsonObject:
    return {
        "resource": public.value + resource,
        "authorization_servers": list(authorization_servers),
        "bearer_methods_supported": ["header"],
        "scopes_supported": SCOPES,
    }

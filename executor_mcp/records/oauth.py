"""OAuth clients and the sign-in flows in progress, as plain records (no I/O).

A client is an application registered with an authorization server: by an org admin (its id and, for a
confidential client, its secret), by the server itself (RFC 7591 dynamic registration, reused per authorization
server and redirect URI), or as a client ID metadata document (its id is a URL we serve). Its secret is never
here: `secret_item` names the sealed item that holds it in the default secret store.

A flow is one sign-in between `start` and the callback: bound to the principal who started it, single use
(taken by the callback, never read twice), and short-lived. Its PKCE verifier is the one secret it holds, and
only until the callback takes it; the flow is found by a digest of its `state`, so a copy of the store cannot
answer a callback.
"""

import attrs

# Grants a client may use.
AUTHORIZATION_CODE = "authorization_code"
CLIENT_CREDENTIALS = "client_credentials"
GRANTS = (AUTHORIZATION_CODE, CLIENT_CREDENTIALS)

# How a client was made.
MANUAL = "manual"
DYNAMIC = "dynamic_client_registration"
METADATA_DOCUMENT = "client_id_metadata_document"

# How a client proves itself at the token endpoint (RFC 7591 `token_endpoint_auth_method`).
AUTH_NONE = "none"
AUTH_POST = "client_secret_post"
AUTH_BASIC = "client_secret_basic"
TOKEN_AUTH_METHODS = (AUTH_NONE, AUTH_POST, AUTH_BASIC)


@attrs.frozen
class OAuthClientRecord:
    """An OAuth application of an org (`owner` "org", `account_id` "") or of one account in it."""

    org_id: str
    owner: str  # "org" | "user"
    account_id: str
    slug: str
    grant: str  # AUTHORIZATION_CODE | CLIENT_CREDENTIALS
    authorization_url: str  # "" for client credentials
    token_url: str
    client_id: str
    token_auth_method: str  # AUTH_NONE | AUTH_POST | AUTH_BASIC
    created_at: float
    secret_item: str | None = None  # the sealed item holding its secret; None for a public client
    resource: str | None = None  # RFC 8707: sent on the authorization and every token request
    origin: str = MANUAL  # MANUAL | DYNAMIC | METADATA_DOCUMENT
    origin_integration: str | None = None
    origin_issuer: str | None = None  # for DYNAMIC: the authorization server it was registered with
    origin_redirect_uri: str | None = None  # for DYNAMIC: the redirect URI it was registered for
    issuer: str | None = None  # the authorization server's issuer, when known: its callback's `iss` must match


@attrs.frozen
class OAuthFlowRecord:
    """One sign-in in progress, from `start` to the callback that takes it."""

    state_digest: str  # SHA-256 of the `state` sent to the authorization server, hex
    org_id: str
    account_id: str  # who started it: only they may complete it
    org_admin: bool
    client_owner: str  # the client's owner ("org" | "user") and slug
    client_slug: str
    owner: str  # the connection's owner ("org" | "user")
    integration: str
    name: str  # the connection's name
    template: str
    redirect_uri: str
    code_verifier: str = attrs.field(repr=False)  # PKCE (S256); held only until the callback takes the flow
    scopes: tuple[str, ...]  # requested
    created_at: float
    expires_at: float
    resource: str | None = None
    issuer: str | None = None  # the authorization server's issuer, when known: a callback's `iss` must match it
    iss_required: bool = False  # the server says it always sends `iss` (RFC 9207): a callback without it is refused
    identity_label: str | None = None

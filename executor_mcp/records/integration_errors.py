"""The integration layer's failures, each with the envelope it becomes at every boundary.

One table: the HTTP API answers `{"_tag": tag, "message": ...}` with `status` (upstream §3.1), and the
sandbox's core tools answer `{ok: false, error: {code, message}}` with `code` (upstream §2.6). Messages
never hold a secret value.
"""

from typing import ClassVar


class IntegrationError(Exception):
    tag: ClassVar[str] = "InvalidInputError"
    status: ClassVar[int] = 400
    code: ClassVar[str] = "invalid_input"

    def __init__(self, message: str, **fields: object) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields  # extra JSON fields of the HTTP error body (e.g. `slug`)


class InvalidInput(IntegrationError):
    """A request that does not fit its shape (an unknown field, a bad slug, a wrong type)."""


class SpecRefused(IntegrationError):
    """A source that cannot become an integration: unparseable, not OpenAPI 3.x, too large, hostile."""

    tag = "OpenApiParseError"
    code = "openapi_parse_failed"


class SourceUnavailable(IntegrationError):
    """A source URL that could not be fetched (blocked, unreachable, non-2xx, too large)."""

    tag = "OpenApiFetchError"
    code = "openapi_fetch_failed"


class IntegrationNotFound(IntegrationError):
    tag = "IntegrationNotFoundError"
    status = 404
    code = "integration_not_found"


class IntegrationExists(IntegrationError):
    tag = "IntegrationAlreadyExistsError"
    status = 409
    code = "integration_already_exists"


class RemovalNotAllowed(IntegrationError):
    tag = "IntegrationRemovalNotAllowedError"
    status = 409
    code = "integration_removal_not_allowed"


class ConnectionNotFound(IntegrationError):
    tag = "ConnectionNotFoundError"
    status = 404
    code = "connection_not_found"


class InvalidConnectionInput(IntegrationError):
    tag = "InvalidConnectionInputError"
    code = "invalid_connection_input"


class ProviderNotRegistered(IntegrationError):
    tag = "CredentialProviderNotRegisteredError"
    status = 409
    code = "provider_not_registered"


class NotAdmin(IntegrationError):
    """A change of the org's integrations or connections by a member who is not its admin."""

    tag = "ForbiddenError"
    status = 403
    code = "forbidden"


class ArgumentsRefused(ValueError):
    """A tool call's arguments that cannot make a request (pre-flight): `invalid_tool_arguments` (or a kind's
    own `code`, as GraphQL's `graphql_invalid_selection`), and nothing is sent. The message is upstream's
    (`Unknown argument "x". This operation accepts: ...`)."""

    code: ClassVar[str] = "invalid_tool_arguments"


class DiscoveryFailed(IntegrationError):
    """A connection whose tools could not be listed (the server is unreachable, refused the credential, or
    answered something that is not a tool list). The connection keeps the tools it last had."""

    tag = "ToolDiscoveryError"
    status = 502
    code = "tool_discovery_failed"


class OAuthStartFailed(IntegrationError):
    """A sign-in that cannot start: no such client, a template that is not OAuth, a client-credentials exchange
    the server refused, too many sign-ins in progress."""

    tag = "OAuthStartError"
    code = "oauth_start_failed"


class OAuthCompleteFailed(IntegrationError):
    """A callback that does not complete its sign-in; `restartRequired` says whether only a new one can."""

    tag = "OAuthCompleteError"
    code = "oauth_complete_failed"


class OAuthSessionNotFound(IntegrationError):
    """No sign-in in progress has this state for this caller: unknown, taken already, expired, or another's."""

    tag = "OAuthSessionNotFoundError"
    status = 404
    code = "oauth_session_not_found"


class OAuthProbeFailed(IntegrationError):
    tag = "OAuthProbeError"
    code = "oauth_probe_failed"


class OAuthRegistrationFailed(IntegrationError):
    tag = "OAuthRegisterDynamicError"
    code = "oauth_register_dynamic_failed"

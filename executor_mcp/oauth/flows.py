"""A sign-in's callback, checked against the flow it answers (no I/O): RFC 6749 §4.1.2, RFC 9207.

The flow itself was found by its state's digest and taken (single use) by the caller, who checked that the
principal completing it is the one who started it; what is left is what the authorization server sent back.
"""

from collections.abc import Mapping

import attrs

from executor_mcp.oauth.grants import MAX_DESCRIPTION
from executor_mcp.records.oauth import OAuthFlowRecord

FLOW_TTL = 600.0  # seconds a sign-in may take, from start to callback
MAX_FLOWS_PER_ACCOUNT = 20  # sign-ins one account may have in progress at once
MAX_CODE_LENGTH = 4096


@attrs.frozen
class CallbackRefused:
    """Why a callback does not complete its flow; `provider` when the authorization server itself refused."""

    message: str
    provider: bool = False


def check_callback(flow: OAuthFlowRecord, params: Mapping[str, str]) -> str | CallbackRefused:
    """The authorization code the callback carries, or why it is refused. `iss` must name the flow's server
    when the server sends it, and must be there when the server said it always sends it."""
    error = params.get("error")
    if error is not None or "error_description" in params:
        described = params.get("error_description", "")
        words = " ".join(part[:MAX_DESCRIPTION] for part in (error or "", described) if part)
        return CallbackRefused(f"The OAuth provider refused the sign-in: {_printable(words)}", provider=True)
    issuer = params.get("iss")
    if issuer is None and flow.iss_required:
        return CallbackRefused("The sign-in answer does not say which authorization server sent it (no iss)")
    if issuer is not None and flow.issuer is not None and issuer != flow.issuer:
        return CallbackRefused("The sign-in answer came from another authorization server (iss mismatch)")
    code = params.get("code")
    if not code or len(code) > MAX_CODE_LENGTH:
        return CallbackRefused("The sign-in answer holds no authorization code")
    return code


def _printable(text: str) -> str:
    return "".join(char if char.isprintable() else " " for char in text) or "no reason given"

"""The `requestState` of a 2026 approval: which paused execution a retried `tools/call` answers. No I/O.

The client echoes the state back byte for byte, so whatever it holds is attacker-controlled. It is signed
(HMAC-SHA256 under a key kept in the control plane, so a state outlives a restart as the pause does) and
binds what the spec asks it to: the principal it was issued to, the tool and a digest of its arguments (the
retry must be the same call), the input request it answers and an expiry (the pause's own window end). It
names the execution and carries no secret: the pause itself stays on the server, so a state is only ever a
reference, checked on every use, and exactly-once is the pause book's job, not the state's.
"""

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any

import attrs

from executor_mcp.codec import json_digest

_PURPOSE = b"executor-mcp request state v1\x00"
# Far more than a state this server issues (about 400 bytes): a longer one is refused unread.
MAX_STATE = 2048


class BadRequestState(Exception):
    """A state that is not one this server issued for this call, in words for the client."""


@attrs.frozen
class RequestState:
    execution_id: str
    account: str
    org: str
    admin: bool
    tool: str
    arguments: str  # SHA-256 of the arguments' canonical JSON
    key: str  # the `inputRequests` key it answers
    expires_at: float  # epoch seconds


def seal(key: bytes, state: RequestState) -> str:
    payload = _b64(json.dumps(attrs.asdict(state), separators=(",", ":")).encode())
    return f"{payload}.{_b64(_mac(key, payload))}"


def unseal(
    key: bytes, token: Any, now: float, *, principal: tuple[str, str, bool], tool: str, arguments: Any
) -> RequestState:
    """The state a retry carries, if this server issued it for this principal (account, org, admin) and this
    very call and it has not expired; else `BadRequestState`."""
    if not isinstance(token, str) or len(token) > MAX_STATE or token.count(".") != 1:
        raise BadRequestState("requestState is not one this server issued")
    payload, mac = token.split(".")
    # The MAC is compared as the very text `seal` wrote, before the payload is read: a decoder would ignore
    # characters outside its alphabet and the spare bits of a last character, so other texts would pass.
    if not (payload.isascii() and mac.isascii()) or not hmac.compare_digest(mac, _b64(_mac(key, payload))):
        raise BadRequestState("requestState is not one this server issued")
    try:
        state = RequestState(**json.loads(_unb64(payload)))
    except (binascii.Error, ValueError, TypeError):  # signed by this key, so only a different format's
        raise BadRequestState("requestState is not one this server issued") from None
    if (state.account, state.org, state.admin) != principal:
        raise BadRequestState("requestState was issued to another principal")
    if state.tool != tool or state.arguments != json_digest(arguments):
        raise BadRequestState("requestState was issued for another call: retry with the same tool and arguments")
    if not isinstance(state.expires_at, int | float) or state.expires_at <= now:
        raise BadRequestState("requestState has expired: the approval window closed; run the call again")
    return state


def _mac(key: bytes, payload: str) -> bytes:
    return hmac.new(key, _PURPOSE + payload.encode(), hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """Strict: one spelling per value (no stray characters skipped), as `_b64` writes it."""
    if not text or not text.isascii():
        raise ValueError("empty or not ASCII")
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)

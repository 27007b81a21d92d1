"""Tool calls per minute, per org, per account and per connection, as a generic cell rate algorithm (GCRA). No I/O.

A limit of N calls a minute lets one call through every 60/N seconds and tolerates a burst of N: a fresh key takes
N calls at once, then one every 60/N seconds. A key's whole state is one number, its theoretical arrival time
(TAT): the time its next call would be on schedule. A key whose TAT has passed holds nothing a key never seen
would not, so a store may forget it at any moment without letting one call more through: memory is bounded by
the keys active in the last minute (and a store caps even that). A call is admitted only if every one of its
keys admits it, and then every key is charged; a refused call charges none, so a caller over its account's limit
spends none of its org's.
"""

import attrs

WINDOW = 60.0
# Between the parts of a key: a control character, which no org, account, slug or connection name holds
# (`auth/identity.py`, `integrations/addresses.py`), so no key of one scope or org can be another's; and not NUL,
# which PostgreSQL text cannot hold.
KEY_SEPARATOR = "\x1f"


@attrs.frozen
class Limit:
    """One key's limit for one call: `scope` (org, account, connection), the key it is counted under (unique
    across scopes, and across orgs), and calls per minute (positive)."""

    scope: str
    key: str
    per_minute: int

    @property
    def interval(self) -> float:
        return WINDOW / self.per_minute


@attrs.frozen
class RateLimited:
    """The call was refused: the limit that refused it (the one whose wait is longest) and how long until it fits."""

    limit: Limit
    retry_after: float


def take(tats: dict[str, float], limits: list[Limit], now: float) -> dict[str, float] | RateLimited:
    """The keys' new TATs if one more call fits every limit, else the refusal. `tats` holds the known keys' TATs
    (an unknown key is a fresh one)."""
    charged: dict[str, float] = {}
    refused: RateLimited | None = None
    for limit in limits:
        tat = max(tats.get(limit.key, now), now) + limit.interval
        if tat - now > WINDOW:
            wait = tat - now - WINDOW
            if refused is None or wait > refused.retry_after:
                refused = RateLimited(limit, wait)
        charged[limit.key] = tat
    return refused if refused is not None else charged


def expired(tat: float, now: float) -> bool:
    """Whether a key's state is no longer worth keeping: a fresh key would be admitted exactly as it is."""
    return tat <= now


def limits_for(
    org_id: str,
    account_id: str,
    connection: str | None,
    *,
    org: int | None,
    account: int | None,
    per_connection: int | None,
) -> list[Limit]:
    """The limits one call is counted against (a limit of None or 0 is none), keyed by their parts joined by
    `KEY_SEPARATOR`."""
    limits = []
    if org:
        limits.append(Limit("org", KEY_SEPARATOR.join(("org", org_id)), org))
    if account:
        limits.append(Limit("account", KEY_SEPARATOR.join(("account", org_id, account_id)), account))
    if per_connection and connection is not None:
        limits.append(Limit("connection", KEY_SEPARATOR.join(("connection", org_id, connection)), per_connection))
    return limits


def message(refused: RateLimited) -> str:
    scope = {"org": "this organization", "account": "your account", "connection": "this connection"}
    seconds = max(refused.retry_after, 0.001)
    return (
        f"Rate limit exceeded: at most {refused.limit.per_minute} tool calls a minute for {scope[refused.limit.scope]}."
        f" Retry in {seconds:.3f} s (error.details.retryAfterMs)."
    )

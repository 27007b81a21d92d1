"""Executions in progress at once, per org and per account: the ceilings one execution is counted against, and
whether one more fits them. No I/O.

A place is held from the moment an execution is admitted until it ends, running or paused on a human: a paused
execution keeps its sandbox worker, so it counts. Unlike tool calls per minute, nothing here decays with time: a
place is given back by its execution's end, so a store must know which places still have an execution behind them
(`storage/interfaces.InFlightStore`).
"""

import attrs

from executor_mcp.ratelimits.model import KEY_SEPARATOR

ORG = "org"
ACCOUNT = "account"


@attrs.frozen
class Ceiling:
    """At most `most` executions at once under `key` (unique across scopes and orgs), for `scope` (org, account)."""

    scope: str
    key: str
    most: int


@attrs.frozen
class Held:
    """What one key holds now: its running and paused executions, and the ids a `resume` takes for the paused
    ones that have one (native-mode pauses have none)."""

    running: int = 0
    paused: int = 0
    pause_ids: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return self.running + self.paused


@attrs.frozen
class Full:
    """One more execution does not fit `ceiling`, which holds `held`."""

    ceiling: Ceiling
    held: Held


def ceilings_for(org_id: str, account_id: str, *, org: int | None, account: int | None) -> list[Ceiling]:
    """The ceilings an execution of this account is counted against (None or 0 is none; a principal of no org has
    no org's); the account's first, so that a refusal names the narrowest one that is full."""
    ceilings = []
    if account:
        ceilings.append(Ceiling(ACCOUNT, KEY_SEPARATOR.join(("executions", ACCOUNT, org_id, account_id)), account))
    if org and org_id:
        ceilings.append(Ceiling(ORG, KEY_SEPARATOR.join(("executions", ORG, org_id)), org))
    return ceilings


def first_full(ceilings: list[Ceiling], held: dict[str, Held]) -> Full | None:
    """The first ceiling one more execution would go over, given what each key holds now; None if it fits all."""
    for ceiling in ceilings:
        now = held.get(ceiling.key, Held())
        if now.total >= ceiling.most:
            return Full(ceiling, now)
    return None

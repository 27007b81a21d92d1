"""Connect handoffs: one-time links that let a person paste a credential the agent must never see.

`connections.createHandoff` issues a token bound to everything the connection will be (the caller's org,
account and org-admin role, the owner, the integration and the template) and answers a URL to the connect
page (`/connect/<token>`); the page's POST redeems the token once and creates the connection as that
principal. No I/O here: the book is a dict behind an injected clock, so expiry and the bounds are tested
directly.

Tokens are 32 bytes from `secrets` (a CSPRNG), URL-safe. The book keys them by their SHA-256, so memory
never holds a live token and what is logged (`handoff_id`, a digest prefix) cannot be replayed. It is
bounded twice: an account holding `MAX_PER_ACCOUNT` pending links loses its oldest to a new one (a flood
only ever evicts the flooder's own), and the whole book refuses new links at `MAX_PENDING` (the links
already handed out keep working). Expired entries are pruned whenever the book is touched.
"""

import hashlib
import re
import secrets
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Sequence

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.addresses import OWNERS, connection_identifier
from executor_mcp.records.integration_errors import InvalidConnectionInput, NotAdmin
from executor_mcp.records.integrations import NO_AUTH, AuthMethod, IntegrationRecord
from executor_mcp.storage.records import Owner as Principal

HANDOFF_TTL_SECONDS = 600.0
TOKEN_BYTES = 32
MAX_PER_ACCOUNT = 16
MAX_PENDING = 4096
MAX_LABEL_LENGTH = 200
CONNECT_PATH = "/connect/"
DEFAULT_OWNER = "user"
INSTRUCTIONS = (
    "Ask the user to open this URL and add the account in the Executor web UI. Do not ask them to paste the "
    "credential value into chat. After they finish, call connections.list for the integration to discover the "
    "created connection."
)
# `token_urlsafe(32)` is 43 characters of the URL-safe alphabet; anything else is not worth a lookup.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


class HandoffsExhausted(InvalidConnectionInput):
    """The server holds as many pending connect links as it will; new ones wait for old ones to go."""


@attrs.frozen
class Handoff:
    """What a connect link creates, and as whom: fixed when it is issued, never taken from the page."""

    principal: Principal
    owner: str
    integration: str
    template: str
    label: str | None
    expires_at: float

    @property
    def account_key(self) -> tuple[str | None, str]:
        return self.principal.org_id, self.principal.account_id


def handoff_id(token: str) -> str:
    """A name for a token that logs can carry: a prefix of its digest, useless to anyone reading them."""
    return _digest(token)[:8]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class HandoffBook:
    """The pending connect links, in issue order."""

    def __init__(
        self,
        *,
        ttl: float = HANDOFF_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_per_account: int = MAX_PER_ACCOUNT,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._max_per_account = max_per_account
        self._max_pending = max_pending
        self._pending: OrderedDict[str, Handoff] = OrderedDict()  # token digest → handoff, oldest first

    def pending(self) -> int:
        """How many links are live (a book is never falsy: no `__len__`)."""
        self._prune()
        return len(self._pending)

    def issue(self, principal: Principal, owner: str, integration: str, template: str, label: str | None) -> str:
        """A new token for this handoff; `HandoffsExhausted` when the book is full."""
        self._prune()
        handoff = Handoff(principal, owner, integration, template, label, self._clock() + self.ttl)
        mine = [digest for digest, held in self._pending.items() if held.account_key == handoff.account_key]
        for digest in mine[: max(0, len(mine) - self._max_per_account + 1)]:
            del self._pending[digest]
        if len(self._pending) >= self._max_pending:
            raise HandoffsExhausted("Too many connect links are pending; try again in a few minutes.")
        token = secrets.token_urlsafe(TOKEN_BYTES)
        self._pending[_digest(token)] = handoff
        return token

    def peek(self, token: str) -> Handoff | None:
        """The live handoff of `token`, left in place (the page is shown, nothing is created yet)."""
        if not TOKEN_SHAPE.fullmatch(token):
            return None
        self._prune()
        return self._pending.get(_digest(token))

    def redeem(self, token: str) -> Handoff | None:
        """The live handoff of `token`, taken out: of concurrent redeemers exactly one gets it (there is no
        await between the lookup and the removal)."""
        if not TOKEN_SHAPE.fullmatch(token):
            return None
        self._prune()
        return self._pending.pop(_digest(token), None)

    def remaining(self, handoff: Handoff) -> float:
        return max(0.0, handoff.expires_at - self._clock())

    def _prune(self) -> None:
        now = self._clock()
        # Issue order is expiry order (one ttl for all), so the expired ones are a prefix.
        while self._pending:
            digest, oldest = next(iter(self._pending.items()))
            if oldest.expires_at > now:
                break
            del self._pending[digest]


@attrs.frozen
class Handoffs:
    """The book and where the connect page is served (known once the listener is bound, hence a callable)."""

    book: HandoffBook
    base_url: Callable[[], str]


@attrs.frozen
class HandoffTerms:
    """A checked `createHandoff` request: what the link will create."""

    owner: str
    integration: str
    template: str
    label: str | None


def handoff_terms(principal: Principal, values: JsonObject, integration: IntegrationRecord) -> HandoffTerms:
    """`{integration, owner?, template?, label?}` checked against who asks and what the integration accepts.

    The owner defaults to `user` (a personal connection needs no admin). The template defaults to the
    integration's only method; with several it must be named. A template that takes no pasted value (`none`,
    an OAuth method, one of literals only) has nothing to hand off.
    """
    unknown = sorted(set(values) - {"integration", "owner", "template", "label"})
    if unknown:
        raise InvalidConnectionInput(f"Unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown[:10])}")
    owner = values.get("owner", DEFAULT_OWNER)
    if owner is None:
        owner = DEFAULT_OWNER
    if owner not in OWNERS:
        raise InvalidConnectionInput('owner must be "org" or "user"')
    if owner == "org" and not principal.org_admin:
        raise NotAdmin("Only an organization admin can add, change or remove org integrations and connections")
    if owner == "user" and not principal.account_id:
        raise InvalidConnectionInput(
            "Cannot create a personal connection: this context has no user subject. Create it with owner "
            '"org", or connect as a signed-in user.'
        )
    label = values.get("label")
    if label is not None and (not isinstance(label, str) or len(label) > MAX_LABEL_LENGTH):
        raise InvalidConnectionInput(f"label must be a string of at most {MAX_LABEL_LENGTH} characters")
    method = choose_method(integration, values.get("template"))
    return HandoffTerms(owner=owner, integration=integration.slug, template=method.slug, label=label or None)


def choose_method(integration: IntegrationRecord, template: object) -> AuthMethod:
    methods = integration.auth_methods
    if template is None:
        if len(methods) != 1:
            listed = ", ".join(method.slug for method in methods) or "none"
            raise InvalidConnectionInput(
                f"Integration {integration.slug} has {len(methods)} auth templates ({listed}): name one as template"
            )
        method = methods[0]
    else:
        if not isinstance(template, str):
            raise InvalidConnectionInput("template must be a string")
        if template == NO_AUTH:
            raise InvalidConnectionInput(
                'A no-auth connection (template "none") needs no handoff: create it with connections.create'
            )
        found = integration.auth_method(template)
        if found is None:
            raise InvalidConnectionInput(f"Integration {integration.slug} has no auth template {template[:200]!r}")
        method = found
    if method.kind != "apikey" or not method.inputs:
        raise InvalidConnectionInput(
            f"Auth template {method.slug} takes no pasted credential, so it has nothing to hand off"
        )
    return method


def connect_url(base_url: str, token: str, terms: HandoffTerms) -> str:
    """`<public-url>/connect/<token>?addAccount=1&owner=..&template=..[&label=..]`: the token carries the
    terms; the query repeats them for people and for grep-compatibility with upstream's
    `?addAccount=1[&owner][&template][&label]`, and the page never reads it."""
    query: list[tuple[str, str]] = [("addAccount", "1"), ("owner", terms.owner), ("template", terms.template)]
    if terms.label:
        query.append(("label", terms.label))
    return f"{base_url.rstrip('/')}{CONNECT_PATH}{token}?{urllib.parse.urlencode(query)}"


def free_name(wanted: str, taken: Sequence[str]) -> str:
    """`wanted`, or `wanted 2`, `wanted 3`, ...: the first whose connection identifier is not `taken` (names
    are shown as people wrote them; connections are named by their normalized identifiers)."""
    names = set(taken)
    candidate, suffix = wanted, 2
    while connection_identifier(candidate) in names:
        candidate, suffix = f"{wanted} {suffix}", suffix + 1
    return candidate


def connection_request(handoff: Handoff, body: JsonObject, method: AuthMethod, default_name: str) -> JsonObject:
    """The connect page's `{name?, values: {input: value}}` as the `create_connection` request it stands for:
    owner, integration and template from the handoff, exactly the template's inputs from the page. Messages
    name inputs, never values."""
    unknown = sorted(set(body) - {"name", "values"})
    if unknown:
        raise InvalidConnectionInput(f"Unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown[:10])}")
    name = body.get("name")
    if name is None or (isinstance(name, str) and not name.strip()):
        name = default_name
    if not isinstance(name, str):
        raise InvalidConnectionInput("name must be a string")
    values = body.get("values")
    if not isinstance(values, dict):
        raise InvalidConnectionInput("values must be an object of {input: value}")
    extra = sorted(str(key)[:64] for key in set(values) - set(method.inputs))
    if extra:
        raise InvalidConnectionInput(f"Unknown credential input: {', '.join(extra[:10])}")
    for variable in method.inputs:
        value = values.get(variable)
        if not isinstance(value, str) or not value:
            raise InvalidConnectionInput(f"Enter a value for {variable}")
    request: JsonObject = {
        "owner": handoff.owner,
        "name": name,
        "integration": handoff.integration,
        "template": handoff.template,
        "values": {variable: values[variable] for variable in method.inputs},
    }
    if handoff.label:
        request["identityLabel"] = handoff.label
    return request

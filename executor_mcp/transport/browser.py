"""Browser safety with `--auth none`: the `Origin` and `Host` checks (PRODUCT "Browser safety").

Without authentication the only thing standing between a web page the user visits and the server is
the browser itself: a page can send simple requests (no preflight) to `127.0.0.1`, and a DNS-rebound
name can make the server look same-origin. So with `--auth none` a request whose `Origin` is present
and not allowed, or whose `Host` is not one of the server's own names, is refused, and no `*` CORS
headers go out (an allowed origin is echoed instead, so a configured console still works). Requests
without `Origin` (every non-browser client) pass the origin check. With bearer auth nothing here
applies: a page has no bearer to send, so CORS stays `*`.

Pure functions of the configured names and the bound address; the guard learns the bound port once
the listener is up (`--port 0`), and works out then (not per request) which names and origins are its own.
"""

import urllib.parse

import attrs

from executor_mcp.protocol.errors import Refusal
from executor_mcp.protocol.http import HeaderLookup

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalized_origin(text: str) -> str | None:
    """`scheme://host[:port]` in lower case without a default port, or None if it is no such origin."""
    try:
        parsed = urllib.parse.urlsplit(text.strip())
        port = parsed.port
    except ValueError:
        return None
    scheme = parsed.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parsed.hostname or parsed.path not in {"", "/"}:
        return None
    if parsed.query or parsed.fragment or parsed.username is not None:
        return None
    host = _bracketed(parsed.hostname.lower())
    return f"{scheme}://{host}" if port in {None, _DEFAULT_PORTS[scheme]} else f"{scheme}://{host}:{port}"


def _bracketed(hostname: str) -> str:
    return f"[{hostname}]" if ":" in hostname and not hostname.startswith("[") else hostname


def _host_and_port(text: str) -> tuple[str, int | None] | None:
    """A `Host` value (or an `--allowed-host`) as (name, port or None)."""
    try:
        parsed = urllib.parse.urlsplit("//" + text.strip())
        port = parsed.port
    except ValueError:
        return None
    if not parsed.hostname or parsed.path or parsed.query or parsed.fragment or parsed.username is not None:
        return None
    return _bracketed(parsed.hostname.lower()), port


@attrs.define
class BrowserGuard:
    """What a browser may reach when there is no authentication; `enabled` only with `--auth none`."""

    enabled: bool
    loopback: bool = False
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    public_url: str = ""
    bound_url: str = ""
    _hosts: list[tuple[str, int | None]] = attrs.field(init=False, factory=list)
    _exact_hosts: frozenset[str] = attrs.field(init=False, factory=frozenset)
    _origin_set: frozenset[str] = attrs.field(init=False, factory=frozenset)

    def __attrs_post_init__(self) -> None:
        self._learn()

    def listening(self, public_url: str, bound_url: str) -> None:
        self.public_url, self.bound_url = public_url, bound_url
        self._learn()

    def _learn(self) -> None:
        configured = [_host_and_port(allowed) for allowed in self.allowed_hosts]
        self._hosts = [host for host in [*configured, *self._own_hosts()] if host is not None]
        # The `Host` values every request of a well-configured client sends, answered without parsing.
        self._exact_hosts = frozenset(f"{name}:{port}" if port is not None else name for name, port in self._hosts)
        self._origin_set = frozenset(self._origins())

    def refusal(self, headers: HeaderLookup) -> Refusal | None:
        """Why a request may not be served, or None."""
        if not self.enabled:
            return None
        if not self._host_allowed(headers.get("host", "")):
            return Refusal.FORBIDDEN_HOST
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin):
            return Refusal.FORBIDDEN_ORIGIN
        return None

    def cors_origin(self, headers: HeaderLookup) -> str | None:
        """The `Access-Control-Allow-Origin` to send: `*` with auth, else the allowed origin or nothing."""
        if not self.enabled:
            return "*"
        origin = headers.get("origin")
        return origin if origin is not None and self.origin_allowed(origin) else None

    def origin_allowed(self, origin: str) -> bool:
        normalized = normalized_origin(origin)
        return normalized is not None and normalized in self._origin_set

    def _origins(self) -> set[str]:
        urls = [self.public_url, self.bound_url, *self.allowed_origins]
        port = self._bound_port()
        if self.loopback and port is not None:
            urls.extend(f"http://{name}:{port}" for name in LOOPBACK_NAMES)
        return {origin for url in urls if (origin := normalized_origin(url)) is not None}

    def _host_allowed(self, host: str) -> bool:
        """The name must be ours; so must the port when both sides name one (a TLS-terminating proxy
        forwards `Host` without the port it was reached on)."""
        if host in self._exact_hosts:
            return True
        received = _host_and_port(host)
        if received is None:
            return False
        for allowed in self._hosts:
            if allowed[0] == received[0] and None in {allowed[1], received[1]}:
                return True
            if allowed == received:
                return True
        return False

    def _own_hosts(self) -> set[tuple[str, int | None]]:
        hosts = set()
        for url in (self.public_url, self.bound_url):
            parsed = urllib.parse.urlsplit(url)
            if parsed.hostname:
                hosts.add((_bracketed(parsed.hostname.lower()), parsed.port or _DEFAULT_PORTS.get(parsed.scheme)))
        port = self._bound_port()
        if self.loopback and port is not None:
            hosts.update((name, port) for name in LOOPBACK_NAMES)
        return hosts

    def _bound_port(self) -> int | None:
        try:
            return urllib.parse.urlsplit(self.bound_url).port
        except ValueError:
            return None

"""Which outbound destinations are allowed: the SSRF rules, with no I/O.

The caller (the network backend in `client.py`) resolves names itself and asks about every address it
would connect to, so the rules here see exactly what gets dialled. The block lists are upstream's
(`hosted-http-client.ts`), plus the IPv4 addresses embedded in IPv6 (mapped, NAT64, 6to4), which name an
IPv4 host as surely as the dotted form does.
"""

import enum
import ipaddress

import attrs

ALLOWED_SCHEMES = frozenset({"http", "https"})

# Cloud metadata services hand out instance credentials: refused even when the local network is allowed.
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data", "169.254.169.254"})
METADATA_ADDRESSES = frozenset({ipaddress.IPv4Address("169.254.169.254"), ipaddress.IPv6Address("fd00:ec2::254")})

# Upstream's list, written as networks. `192.0/16` is upstream's (it compares only two octets); it covers the
# IETF and documentation blocks 192.0.0/24 and 192.0.2/24 and some public space besides.
BLOCKED_IPV4 = tuple(
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "127.0.0.0/8",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/16",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "224.0.0.0/3",  # 224/4 multicast and everything above it
    )
)
# Upstream's list, plus the IPv4-compatible block (`::a.b.c.d`, deprecated but routable by some stacks), the
# local-use NAT64 prefix and the deprecated site-local block, which all reach what their IPv4 or local twins do.
BLOCKED_IPV6 = tuple(
    ipaddress.IPv6Network(net)
    for net in ("::/96", "::1/128", "fe80::/10", "fec0::/10", "fc00::/7", "ff00::/8", "64:ff9b:1::/48")
)
IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")


class BlockReason(enum.Enum):
    """Why a destination is refused; the value is the (non-secret) message upstream gives."""

    SCHEME = "Only HTTP and HTTPS outbound requests are allowed"
    METADATA = "Metadata service addresses are not allowed"
    LOCAL = "Local and private network addresses are not allowed"
    RESOLVED_LOCAL = "Resolved address is local or private"


# What a refusal of a local address adds: the option that lifts it, whoever reads it (an operator running an admin
# command, an agent relaying a failed call).
LOCAL_NETWORK_HINT = "the server allows local addresses with --allow-local-network"


@attrs.frozen
class Blocked:
    reason: BlockReason
    target: str  # the host or address refused: never a path, query or credential

    @property
    def message(self) -> str:
        return self.described()

    def described(self, name: str | None = None) -> str:
        """Upstream's reason and the target (with the `name` it was resolved from), and for a local address
        the option that allows it."""
        text = f"{self.reason.value}: {self.target}" + (f" ({name})" if name else "")
        if self.reason in (BlockReason.LOCAL, BlockReason.RESOLVED_LOCAL):
            text += f"; {LOCAL_NETWORK_HINT}"
        return text


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_address(host: str) -> Address | None:
    """The IP literal `host` spells (brackets and an IPv6 zone allowed), or None for a name."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        # A zone only picks the interface: the address it qualifies is what the rules judge.
        return ipaddress.IPv6Address(text.split("%", 1)[0])
    return address


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 host an IPv6 address reaches through a translation scheme, if any."""
    if address in IPV4_MAPPED or address in NAT64 or address in IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF)
    return None


def _is_metadata(address: Address) -> bool:
    if address in METADATA_ADDRESSES:
        return True
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        return inner is not None and inner in METADATA_ADDRESSES
    return False


def _is_local(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv4Address):
        return any(address in net for net in BLOCKED_IPV4)
    if address in IPV4_MAPPED:
        return True  # upstream refuses every mapped address outright
    if any(address in net for net in BLOCKED_IPV6):
        return True
    inner = embedded_ipv4(address)
    return inner is not None and _is_local(inner)


def check_address(address: Address, *, allow_local_network: bool, resolved: bool = False) -> Blocked | None:
    """Whether connecting to `address` is refused. `resolved`: it came from a name lookup (another message)."""
    if _is_metadata(address):
        return Blocked(BlockReason.METADATA, str(address))
    if not allow_local_network and _is_local(address):
        return Blocked(BlockReason.RESOLVED_LOCAL if resolved else BlockReason.LOCAL, str(address))
    return None


def normalize_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def check_host(host: str, *, allow_local_network: bool) -> Blocked | None:
    """Whether a URL's host is refused before any lookup: metadata names, `localhost`, blocked IP literals.

    A name that passes here still has every address it resolves to checked with `check_address`.
    """
    name = normalize_host(host)
    address = parse_address(name)
    if address is not None:
        return check_address(address, allow_local_network=allow_local_network)
    if name in METADATA_HOSTS:
        return Blocked(BlockReason.METADATA, name)
    if not allow_local_network and (name == "localhost" or name.endswith(".localhost")):
        return Blocked(BlockReason.LOCAL, name)
    return None


def check_scheme(scheme: str) -> Blocked | None:
    if scheme.lower() not in ALLOWED_SCHEMES:
        return Blocked(BlockReason.SCHEME, scheme.lower() or "(none)")
    return None


def check_target(scheme: str, host: str, *, allow_local_network: bool) -> Blocked | None:
    """Whether a URL (by its scheme and host) is refused before it is resolved."""
    return check_scheme(scheme) or check_host(host, allow_local_network=allow_local_network)

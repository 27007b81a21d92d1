"""The SSRF rules, as pure functions: upstream's block lists, metadata always refused, embedded IPv4."""

import ipaddress

import pytest

from executor_mcp.outbound import guard
from executor_mcp.outbound.guard import BlockReason
from executor_mcp.outbound.model import format_seconds


@pytest.mark.parametrize(
    "address",
    [
        "0.1.2.3",
        "10.0.0.1",
        "127.0.0.1",
        "127.255.255.254",
        "100.64.0.1",
        "100.127.255.255",
        "169.254.1.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.0.2.1",
        "192.0.200.1",  # upstream's two-octet check covers all of 192.0/16
        "192.168.1.1",
        "198.18.0.1",
        "198.19.255.255",
        "224.0.0.1",
        "239.255.255.255",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "fe80::1",
        "febf::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "::ffff:8.8.8.8",  # every IPv4-mapped address, as upstream
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "64:ff9b:1::a00:1",  # local-use NAT64
        "fec0::1",  # site-local
    ],
)
def test_local_and_private_addresses_are_refused(address: str) -> None:
    blocked = guard.check_address(ipaddress.ip_address(address), allow_local_network=False)
    assert blocked is not None
    assert blocked.reason is BlockReason.LOCAL
    assert guard.check_address(ipaddress.ip_address(address), allow_local_network=True) is None


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",
        "100.128.0.1",
        "172.15.0.1",
        "172.32.0.1",
        "192.1.0.1",
        "198.17.255.255",
        "198.20.0.1",
        "223.255.255.255",
        "2606:4700::1111",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert guard.check_address(ipaddress.ip_address(address), allow_local_network=False) is None


@pytest.mark.parametrize(
    "address", ["169.254.169.254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "::a9fe:a9fe", "fd00:ec2::254"]
)
def test_metadata_addresses_are_refused_even_with_the_local_network_allowed(address: str) -> None:
    blocked = guard.check_address(ipaddress.ip_address(address), allow_local_network=True)
    assert blocked is not None
    assert blocked.reason is BlockReason.METADATA
    assert blocked.message.startswith("Metadata service addresses are not allowed")


@pytest.mark.parametrize(
    "host", ["metadata.google.internal", "METADATA", "instance-data", "instance-data.", "169.254.169.254"]
)
def test_metadata_hosts_are_refused_by_name(host: str) -> None:
    blocked = guard.check_host(host, allow_local_network=True)
    assert blocked is not None
    assert blocked.reason is BlockReason.METADATA


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST",
        "api.localhost",
        "localhost.",
        "127.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[fe80::1%eth0]",
    ],
)
def test_local_hosts_are_refused_unless_allowed(host: str) -> None:
    blocked = guard.check_host(host, allow_local_network=False)
    assert blocked is not None
    assert blocked.reason is BlockReason.LOCAL
    assert blocked.message.startswith("Local and private network addresses are not allowed: ")
    assert blocked.message.endswith("; the server allows local addresses with --allow-local-network")
    assert guard.check_host(host, allow_local_network=True) is None


def test_a_name_passes_before_resolution_and_its_addresses_are_judged_after() -> None:
    assert guard.check_host("api.example.com", allow_local_network=False) is None
    assert guard.check_host("notlocalhost.com", allow_local_network=False) is None
    resolved = guard.check_address(ipaddress.ip_address("10.1.2.3"), allow_local_network=False, resolved=True)
    assert resolved is not None
    assert resolved.described("intranet.test") == (
        "Resolved address is local or private: 10.1.2.3 (intranet.test); "
        "the server allows local addresses with --allow-local-network"
    )


@pytest.mark.parametrize("scheme", ["file", "ftp", "gopher", "", "javascript"])
def test_only_http_and_https_schemes_pass(scheme: str) -> None:
    blocked = guard.check_target(scheme, "example.com", allow_local_network=True)
    assert blocked is not None
    assert blocked.reason is BlockReason.SCHEME
    assert blocked.message.startswith("Only HTTP and HTTPS outbound requests are allowed")
    assert guard.check_target("HTTPS", "example.com", allow_local_network=False) is None


def test_parse_address_reads_literals_only() -> None:
    assert guard.parse_address("[::1]") == ipaddress.ip_address("::1")
    assert guard.parse_address("fe80::1%eth0") == ipaddress.ip_address("fe80::1")
    assert guard.parse_address("10.0.0.1") == ipaddress.ip_address("10.0.0.1")
    assert guard.parse_address("example.com") is None
    assert guard.parse_address("0x7f.1") is None  # not a literal here: resolved, then judged by address


def test_timeouts_are_named_as_upstream_names_them() -> None:
    assert format_seconds(110) == "110s"
    assert format_seconds(60.0) == "60s"
    assert format_seconds(0.2) == "200ms"
    assert format_seconds(1.5) == "1500ms"

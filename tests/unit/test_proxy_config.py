"""`executor-mcp proxy-config`: what it prints is accepted by nginx itself, routes by the session id's home, and
answers the restart envelope from the one refusal table; bad input is refused in words."""

import json
import re

import pytest

from executor_mcp.protocol.errors import Refusal
from executor_mcp.proxy_config import Instance, ProxyConfigError, render, restart_answer
from tests.haproxy import check_config as haproxy_check
from tests.nginx import check_config

TWO = [Instance.parse("a=http://127.0.0.1:8001"), Instance.parse("eu-2=127.0.0.1:8002")]


def test_nginx_accepts_what_it_is_given() -> None:
    done = check_config(render("nginx", TWO, "127.0.0.1:8080"))
    assert done.returncode == 0, done.stderr
    assert "syntax is ok" in done.stderr


def test_nginx_routes_each_home_by_its_prefix_and_the_rest_anywhere() -> None:
    text = render("nginx", TWO, "127.0.0.1:8080")
    assert '"~^a_"  executor_mcp_a;' in text
    assert '"~^eu-2_"  executor_mcp_eu_2;' in text
    assert "default  executor_mcp_any;" in text
    anywhere = text[text.index("upstream executor_mcp_any") :].split("}")[0]
    assert "127.0.0.1:8001" in anywhere
    assert "127.0.0.1:8002" in anywhere
    assert "proxy_buffering off;" in text
    assert "listen 127.0.0.1:8080;" in text


def test_the_restart_answer_is_the_refusal_tables() -> None:
    status, headers, body = restart_answer()
    envelope = Refusal.RESTARTING.value
    assert (status, headers) == (envelope.status, {"Retry-After": "2"})
    assert json.loads(body) == {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": envelope.message}}
    text = render("nginx", TWO, "127.0.0.1:8080")
    assert f"return 503 '{body}';" in text
    assert "add_header Retry-After 2 always;" in text


def test_haproxy_accepts_what_it_is_given() -> None:
    done = haproxy_check(render("haproxy", TWO, "127.0.0.1:8080"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Configuration file is valid" in done.stdout + done.stderr


def test_haproxy_names_each_home_and_the_same_answer() -> None:
    text = render("haproxy", TWO, "127.0.0.1:8080")
    assert "use_backend executor_mcp_eu_2 if { req.hdr(mcp-session-id) -m beg eu-2_ }" in text
    assert text.count("hdr Retry-After 2 string") == 2
    assert "default_backend executor_mcp_any" in text


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("A=http://127.0.0.1:1", "instance id"),
        ("a", "http://HOST:PORT"),
        ("a=https://x:1", "http://HOST:PORT"),
        ("a=http://x", "http://HOST:PORT"),
        ("a=http://x:1/path", "http://HOST:PORT"),
        ("a=http://x:1 y", "http://HOST:PORT"),
    ],
)
def test_a_bad_instance_is_refused_in_words(given: str, said: str) -> None:
    with pytest.raises(ProxyConfigError, match=re.escape(said)):
        Instance.parse(given)


def test_the_set_of_instances_and_the_listen_address_are_checked() -> None:
    with pytest.raises(ProxyConfigError, match="at least one"):
        render("nginx", [], "127.0.0.1:8080")
    with pytest.raises(ProxyConfigError, match="its own id"):
        render("nginx", [TWO[0], TWO[0]], "127.0.0.1:8080")
    with pytest.raises(ProxyConfigError, match="HOST:PORT"):
        render("nginx", TWO, "8080; evil")

"""The handoff book and the pure rules around it: tokens, expiry, bounds, terms, URLs, the page's request."""

import re
import urllib.parse

import attrs
import pytest

from executor_mcp.integrations.handoff import (
    TOKEN_SHAPE,
    HandoffBook,
    HandoffsExhausted,
    HandoffTerms,
    choose_method,
    connect_url,
    connection_request,
    free_name,
    handoff_id,
    handoff_terms,
)
from executor_mcp.records.integration_errors import InvalidConnectionInput, NotAdmin
from executor_mcp.records.integrations import AuthMethod, IntegrationRecord, Placement
from executor_mcp.storage.records import Owner
from executor_mcp.web.connect import NOT_VALID, ConnectView, connect_page, not_valid_page
from executor_mcp.web.render import page_headers

ALICE = Owner("alice", "acme", org_admin=False)
ADMIN = Owner("root", "acme", org_admin=True)
KEY = AuthMethod("apikey-0", "apikey", placements=(Placement("header", "x-api-key"),))
PAIR = AuthMethod(
    "pair",
    "apikey",
    label="Key and secret",
    placements=(
        Placement("header", "x-key", variable="key"),
        Placement("header", "x-secret", variable="secret"),
        Placement("query", "key", variable="key"),
        Placement("header", "x-client", literal="executor"),
    ),
)
OAUTH = AuthMethod("oauth", "oauth2")


@attrs.define
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def integration(*methods: AuthMethod) -> IntegrationRecord:
    return IntegrationRecord(
        org_id="acme",
        slug="orders",
        kind="openapi",
        name="Orders",
        description="",
        source_hash="0" * 64,
        config={},
        auth_methods=tuple(methods),
        created_at=0.0,
        updated_at=0.0,
    )


def test_a_token_is_redeemed_once_and_peeking_leaves_it() -> None:
    book = HandoffBook(clock=Clock())
    token = book.issue(ALICE, "user", "orders", "apikey-0", None)
    assert TOKEN_SHAPE.fullmatch(token)
    assert book.peek(token) == book.peek(token)
    handoff = book.redeem(token)
    assert handoff is not None
    assert (handoff.principal, handoff.owner, handoff.integration, handoff.template) == (
        ALICE,
        "user",
        "orders",
        "apikey-0",
    )
    assert handoff.principal.org_admin is False
    assert book.redeem(token) is None
    assert book.peek(token) is None


def test_tokens_are_distinct_and_the_logged_id_is_not_the_token() -> None:
    book = HandoffBook(clock=Clock(), max_per_account=1000)
    tokens = {book.issue(ALICE, "user", "orders", "apikey-0", None) for _ in range(200)}
    assert len(tokens) == 200
    token = next(iter(tokens))
    assert len(handoff_id(token)) == 8
    assert handoff_id(token) not in token


def test_a_token_expires_after_the_ttl_and_expired_ones_are_pruned() -> None:
    clock = Clock()
    book = HandoffBook(ttl=600, clock=clock)
    early = book.issue(ALICE, "user", "orders", "apikey-0", None)
    clock.now = 300
    late = book.issue(ADMIN, "org", "orders", "apikey-0", None)
    clock.now = 599.9
    assert book.peek(early) is not None
    assert book.remaining(book.peek(early)) == pytest.approx(0.1)
    clock.now = 600
    assert book.peek(early) is None
    assert book.pending() == 1
    assert book.redeem(late) is not None
    clock.now = 10_000
    assert book.pending() == 0


def test_a_flooding_account_only_evicts_its_own_oldest_links() -> None:
    book = HandoffBook(clock=Clock(), max_per_account=3)
    other = book.issue(ADMIN, "org", "orders", "apikey-0", None)
    mine = [book.issue(ALICE, "user", "orders", "apikey-0", None) for _ in range(5)]
    assert [book.peek(token) is not None for token in mine] == [False, False, True, True, True]
    assert book.peek(other) is not None
    assert book.pending() == 4


def test_a_full_book_refuses_new_links_and_keeps_the_old_ones() -> None:
    clock = Clock()
    book = HandoffBook(clock=clock, max_pending=3)
    held = [book.issue(Owner(f"user{index}", "acme"), "user", "orders", "apikey-0", None) for index in range(3)]
    with pytest.raises(HandoffsExhausted):
        book.issue(ALICE, "user", "orders", "apikey-0", None)
    assert all(book.peek(token) is not None for token in held)
    clock.now = 601
    book.issue(ALICE, "user", "orders", "apikey-0", None)


def test_malformed_tokens_are_never_looked_up() -> None:
    book = HandoffBook(clock=Clock())
    for token in ("", "short", "x" * 44, "é" * 43, "a/" * 21 + "a"):
        assert book.peek(token) is None
        assert book.redeem(token) is None


def test_terms_default_to_a_personal_connection_on_the_only_template() -> None:
    assert handoff_terms(ALICE, {"integration": "orders"}, integration(KEY)) == HandoffTerms(
        "user", "orders", "apikey-0", None
    )
    terms = handoff_terms(ADMIN, {"integration": "orders", "owner": "org", "label": "Ops"}, integration(KEY))
    assert (terms.owner, terms.label) == ("org", "Ops")


def test_terms_refuse_what_the_link_could_not_create() -> None:
    with pytest.raises(NotAdmin):
        handoff_terms(ALICE, {"integration": "orders", "owner": "org"}, integration(KEY))
    with pytest.raises(InvalidConnectionInput, match="no user subject"):
        handoff_terms(Owner("", "acme", org_admin=True), {"integration": "orders"}, integration(KEY))
    with pytest.raises(InvalidConnectionInput, match="Unknown field: value"):
        handoff_terms(ALICE, {"integration": "orders", "value": "sk"}, integration(KEY))
    with pytest.raises(InvalidConnectionInput, match="label"):
        handoff_terms(ALICE, {"integration": "orders", "label": 7}, integration(KEY))


def test_the_template_is_named_when_there_are_several_and_must_take_a_pasted_value() -> None:
    with pytest.raises(InvalidConnectionInput, match=r"has 2 auth templates \(apikey-0, pair\): name one"):
        choose_method(integration(KEY, PAIR), None)
    assert choose_method(integration(KEY, PAIR), "pair") == PAIR
    with pytest.raises(InvalidConnectionInput, match="has 0 auth templates"):
        choose_method(integration(), None)
    with pytest.raises(InvalidConnectionInput, match="needs no handoff"):
        choose_method(integration(KEY), "none")
    with pytest.raises(InvalidConnectionInput, match="takes no pasted credential"):
        choose_method(integration(OAUTH), None)
    literal_only = AuthMethod("fixed", "apikey", placements=(Placement("header", "x", literal="y"),))
    with pytest.raises(InvalidConnectionInput, match="takes no pasted credential"):
        choose_method(integration(literal_only), None)


def test_the_url_carries_the_token_in_the_path_and_repeats_the_terms_in_the_query() -> None:
    url = connect_url("http://127.0.0.1:8080/", "t" * 43, HandoffTerms("org", "orders", "pair", "A & B"))
    parsed = urllib.parse.urlsplit(url)
    assert parsed.path == "/connect/" + "t" * 43
    assert urllib.parse.parse_qs(parsed.query) == {
        "addAccount": ["1"],
        "owner": ["org"],
        "template": ["pair"],
        "label": ["A & B"],
    }
    assert parsed.query.startswith("addAccount=1&")


def test_free_name_appends_the_first_number_whose_identifier_is_free() -> None:
    assert free_name("main", []) == "main"
    assert free_name("main", ["main", "main2", "other"]) == "main 3"
    assert free_name("Shop key", ["shopKey"]) == "Shop key 2"


def test_the_page_request_takes_exactly_the_templates_inputs() -> None:
    book = HandoffBook(clock=Clock())
    handoff = book.peek(book.issue(ADMIN, "org", "orders", "pair", "Ops"))
    assert handoff is not None
    request = connection_request(handoff, {"values": {"secret": "s", "key": "k"}}, PAIR, "ops")
    assert request == {
        "owner": "org",
        "name": "ops",
        "integration": "orders",
        "template": "pair",
        "values": {"key": "k", "secret": "s"},
        "identityLabel": "Ops",
    }
    assert connection_request(handoff, {"name": "  ", "values": {"key": "k", "secret": "s"}}, PAIR, "d")["name"] == "d"
    for body, message in (
        ({"values": {"key": "k"}}, "Enter a value for secret"),
        ({"values": {"key": "k", "secret": ""}}, "Enter a value for secret"),
        ({"values": {"key": "k", "secret": 5}}, "Enter a value for secret"),
        ({"values": {"key": "k", "secret": "s", "token": "t"}}, "Unknown credential input: token"),
        ({"values": "k"}, "values must be an object"),
        ({"values": {"key": "k", "secret": "s"}, "template": "none"}, "Unknown field: template"),
        ({"name": 3, "values": {"key": "k", "secret": "s"}}, "name must be a string"),
    ):
        with pytest.raises(InvalidConnectionInput, match=message) as raised:
            connection_request(handoff, body, PAIR, "d")
        assert "'k'" not in str(raised.value)


def test_the_page_escapes_what_it_shows_and_has_one_field_per_input() -> None:
    view = ConnectView(
        integration_name="<script>alert(1)</script>",
        integration_slug="orders",
        method=PAIR,
        owner="user",
        account='a"b',
        org="acme",
        default_name='x" onfocus="y',
        minutes_left=10,
    )
    page = connect_page(view)
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'value="x&#34; onfocus=&#34;y"' in page
    assert "a&#34;b" in page
    assert page.count('type="password"') == 2
    assert 'data-input="key"' in page
    assert 'data-input="secret"' in page
    assert "header x-key, query key" in page
    assert "Key and secret" in page
    assert re.findall(r"<script[^>]*>", page) == [
        '<script src="/static/console.js" defer>',
        '<script src="/static/connect.js" defer>',
    ]
    assert "<style" not in page
    assert " style=" not in page
    assert 'name="csrf-token" content=""' in page  # nobody is signed in: the page sends no cookie
    assert "<nav" not in page
    csp = page_headers()["Content-Security-Policy"]
    assert "script-src 'self';" in csp
    assert "'unsafe-inline'" not in csp


def test_the_not_valid_page_explains_and_runs_no_page_script() -> None:
    page = not_valid_page()
    assert "<title>Connect link not valid" in page
    assert NOT_VALID in page
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/console.js" defer>']

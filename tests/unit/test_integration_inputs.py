"""What the service refuses before it touches storage: names, slugs, pasted values (pure checks)."""

import pytest

from executor_mcp.integrations.addresses import connection_identifier, valid_slug
from executor_mcp.integrations.errors import InvalidConnectionInput, SpecRefused
from executor_mcp.integrations.openapi.document import parse
from executor_mcp.integrations.service import check_connection_request
from executor_mcp.storage.records import Owner

ADMIN = Owner(account_id="alice", org_id="acme", org_admin=True)


@pytest.mark.parametrize("slug", ["orders", "my-api", "A_1"])
def test_slugs_that_make_addresses(slug: str) -> None:
    assert valid_slug(slug)


@pytest.mark.parametrize("slug", ["", "a.b", "abc\n", "a b", "x" * 65, None])
def test_slugs_that_would_break_addresses(slug: object) -> None:
    assert not valid_slug(slug)


@pytest.mark.parametrize(
    ("name", "identifier"), [("My Main Key", "myMainKey"), ("public-bad", "publicBad"), ("main", "main")]
)
def test_connection_names_are_normalized_as_upstream_does(name: str, identifier: str) -> None:
    assert connection_identifier(name) == identifier


@pytest.mark.parametrize("value", ["line\nbreak", "tab\tinside", "caf\u00e9", "\x00"])
def test_a_pasted_value_must_fit_in_a_header(value: str) -> None:
    request = {"owner": "org", "name": "main", "integration": "orders", "template": "apikey-0", "value": value}
    with pytest.raises(InvalidConnectionInput) as refused:
        check_connection_request(ADMIN, request, pasted=True)
    assert value not in refused.value.message
    assert refused.value.message == "value must be printable ASCII, as API keys and tokens are"


def test_a_number_past_pythons_conversion_limit_is_a_refusal_not_a_crash() -> None:
    for text in (
        '{"openapi": "3.0.0", "paths": {}, "x": ' + "9" * 5000 + "}",
        "openapi: 3.0.0\npaths: {}\nx: " + "9" * 5000,
    ):
        with pytest.raises(SpecRefused):
            parse(text)

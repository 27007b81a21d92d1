"""What the service refuses before it touches storage: names, slugs, pasted values (pure checks)."""

import pytest

from executor_mcp.integrations.addresses import connection_identifier, default_slug, slug_problem, valid_slug
from executor_mcp.integrations.connections import check_connection_request
from executor_mcp.integrations.openapi.document import parse
from executor_mcp.records.integration_errors import InvalidConnectionInput, SpecRefused
from executor_mcp.storage.records import Owner

ADMIN = Owner(account_id="alice", org_id="acme", org_admin=True)


@pytest.mark.parametrize("slug", ["orders", "my-api", "A_1"])
def test_slugs_that_make_addresses(slug: str) -> None:
    assert valid_slug(slug)


@pytest.mark.parametrize("slug", ["", "a.b", "abc\n", "a b", "x" * 65, None])
def test_slugs_that_would_break_addresses(slug: object) -> None:
    assert not valid_slug(slug)


@pytest.mark.parametrize("slug", ["orders", "my-api", "A_1", "_private", "x" * 64])
def test_slugs_a_new_integration_may_take(slug: str) -> None:
    assert slug_problem(slug) is None


@pytest.mark.parametrize("slug", ["127_0_0_1", "1password", "-x", "", "a.b", "x" * 65, 7, None])
def test_slugs_that_are_no_javascript_path_segment_are_refused_for_new_integrations(slug: object) -> None:
    problem = slug_problem(slug)
    assert problem is not None
    assert problem.startswith("Invalid slug ")
    assert "start with a letter or '_'" in problem


@pytest.mark.parametrize(
    ("text", "kind", "slug"),
    [
        ("127.0.0.1", "graphql", "graphql_127_0_0_1"),
        ("1Password", "mcp", "mcp_1password"),
        ("2FA Service API", "openapi", "openapi_2fa_service_api"),
        ("Shop API", "openapi", "shop_api"),
        ("!!", "mcp", ""),
        ("9" * 70, "graphql", "graphql_" + "9" * 56),
    ],
)
def test_derived_slugs_are_javascript_identifiers(text: str, kind: str, slug: str) -> None:
    assert default_slug(text, kind) == slug


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

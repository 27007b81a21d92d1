"""Reading a bearer and judging ids, without I/O; and the `--org-admin-claim` setting."""

import pytest

from executor_mcp.auth.bearer import bearer_token
from executor_mcp.auth.identity import MAX_IDENTITY_BYTES, identity_problem
from executor_mcp.config import ConfigError, load_settings


@pytest.mark.parametrize(
    ("authorization", "token"),
    [
        (None, None),
        ("Basic YWxpY2U6c2VjcmV0", None),
        ("Bearerx abc", None),
        ("Bearer abc", "abc"),
        ("bearer abc ", "abc"),
        ("BEARER  abc", "abc"),
        ("Bearer ", ""),
        ("Bearer", ""),
    ],
)
def test_bearer_token(authorization: str | None, token: str | None) -> None:
    assert bearer_token({} if authorization is None else {"authorization": authorization}) == token


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("alice", None),
        ("ü" * (MAX_IDENTITY_BYTES // 2), None),
        ("ü" * (MAX_IDENTITY_BYTES // 2 + 1), f"is longer than {MAX_IDENTITY_BYTES} bytes"),
        ("", "is empty"),
        ("al\ud800ice", "is not valid Unicode"),
        ("a\x00b", "contains control characters"),
        ("a\nb", "contains control characters"),
    ],
)
def test_identity_problem(value: str, problem: str | None) -> None:
    assert identity_problem(value) == problem


def test_org_admin_claim_setting() -> None:
    jwt = {"auth": "jwt", "jwt_secret_file": "/k"}
    assert load_settings({**jwt, "org_admin_claim": " org_role = admin "}, environ={}).org_admin_claim == (
        "org_role",
        "admin",
    )
    environ = {"EXECUTOR_MCP_ORG_ADMIN_CLAIM": "roles=owner"}
    assert load_settings(jwt, environ=environ).org_admin_claim == ("roles", "owner")
    assert load_settings(jwt, environ={}).org_admin_claim is None
    with pytest.raises(ConfigError, match="must be NAME=VALUE"):
        load_settings({**jwt, "org_admin_claim": "org_role"}, environ={})
    with pytest.raises(ConfigError, match="--org-admin-claim needs --auth jwt"):
        load_settings({"org_admin_claim": "org_role=admin"}, environ={})

"""Session ids name their home instance, so a proxy routes by them and an instance knows a stray request."""

import pytest

from executor_mcp.sessions.ids import home_of, is_session_id, new_session_id, workspace_id


def test_an_instance_less_server_mints_bare_hex_as_before() -> None:
    session_id = new_session_id("")
    assert len(session_id) == 64
    assert set(session_id) <= set("0123456789abcdef")
    assert home_of(session_id) == ""


def test_an_instance_names_itself_in_its_ids() -> None:
    session_id = new_session_id("eu-1")
    assert session_id.startswith("eu-1_")
    assert home_of(session_id) == "eu-1"
    assert is_session_id(session_id)
    assert new_session_id("eu-1") != session_id


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a" * 63,
        "a" * 65,
        "A" * 64,
        "g" * 64,
        "_" + "a" * 64,  # an empty home with a separator
        "EU_" + "a" * 64,  # upper case is no instance id
        "-eu_" + "a" * 64,
        "eu-_" + "a" * 64,
        "x" * 33 + "_" + "a" * 64,  # too long
        "eu_1_" + "a" * 64,  # the separator once only
        "eu_" + "a" * 63 + "é",
    ],
)
def test_anything_else_names_no_session(text: str) -> None:
    assert home_of(text) is None
    assert not is_session_id(text)


def test_workspaces_are_per_instance_and_per_principal() -> None:
    key = b"k" * 32
    alice = ["alice", "acme", False]
    here = workspace_id(key, "a", alice, "/mcp", "model", "execute")
    assert home_of(here) == "a"
    assert here == workspace_id(key, "a", alice, "/mcp", "model", "execute")
    assert here != workspace_id(key, "b", alice, "/mcp", "model", "execute")
    assert here != workspace_id(key, "a", ["bob", "acme", False], "/mcp", "model", "execute")
    assert home_of(workspace_id(key, "", alice, "/mcp", "model", "execute")) == ""

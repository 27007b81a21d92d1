"""The secret store's contract: sealed items partitioned by (org, account), on every backend."""

from executor_mcp.storage.interfaces import SecretStore


async def test_secret_items_are_partitioned_by_org_and_account(secrets: SecretStore) -> None:
    partitions = [("acme", ""), ("acme", "alice"), ("acme", "bob"), ("evil", ""), ("evil", "alice")]
    for org, account in partitions:
        await secrets.put_secret_items(org, account, {"token": f"{org}/{account}".encode(), "other": b"x"})
    for org, account in partitions:
        assert await secrets.get_secret_item(org, account, "token") == f"{org}/{account}".encode()
        assert await secrets.secret_items(org, account) == ["other", "token"]
    await secrets.delete_secret_items("acme", "alice", ["token", "never-there"])
    assert await secrets.get_secret_item("acme", "alice", "token") is None
    assert await secrets.secret_items("acme", "alice") == ["other"]
    assert await secrets.get_secret_item("acme", "", "token") == b"acme/"
    assert await secrets.get_secret_item("evil", "alice", "token") == b"evil/alice"


async def test_a_put_replaces_and_an_absent_item_is_none(secrets: SecretStore) -> None:
    await secrets.put_secret_items("acme", "alice", {"token": b"one"})
    await secrets.put_secret_items("acme", "alice", {"token": b"two", "extra": b"x"})
    assert await secrets.get_secret_item("acme", "alice", "token") == b"two"
    assert await secrets.get_secret_item("acme", "alice", "never") is None
    assert await secrets.secret_items("nobody", "") == []
    await secrets.delete_secret_items("acme", "alice", [])
    await secrets.delete_secret_items("nobody", "", ["token"])
    assert await secrets.secret_items("acme", "alice") == ["extra", "token"]

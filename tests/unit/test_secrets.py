"""Secret providers, the encrypted store's cipher and key file, and the CLI's value prompt."""

import base64
import hashlib
import io
import logging
import os
import re
import stat
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from executor_mcp.config import Settings
from executor_mcp.records.integration_errors import InvalidConnectionInput, ProviderNotRegistered
from executor_mcp.records.integrations import ConnectionRecord
from executor_mcp.secrets.cipher import (
    KEY_FILE,
    SALT,
    SecretCipher,
    SecretKeyUnusable,
    SecretUnreadable,
    master_key,
    open_cipher,
)
from executor_mcp.secrets.prompt import SecretInputRefused, read_secret_value
from executor_mcp.secrets.providers import (
    MAX_VALUE_BYTES,
    EnvProvider,
    FileProvider,
    SecretItem,
    SecretPartition,
    SecretProviders,
    pasted_item_id,
    standard_providers,
)
from executor_mcp.storage.control import ControlPlane

VALUE = "s3cr3t-VALUE-do-not-leak"
ACME = SecretPartition("acme", "")
ALICE = SecretPartition("acme", "alice")
CIPHER = SecretCipher(bytes(range(32)))
PAYLOAD_PART = r"[A-Za-z0-9+/]*={0,2}"


@pytest.fixture
async def control(tmp_path: Path):
    plane = await ControlPlane.open(tmp_path / "data")
    try:
        yield plane
    finally:
        await plane.close()


def connection(owner: str = "org", account: str = "", item_ids: dict | None = None, **changes) -> ConnectionRecord:
    name, slug = changes.pop("name", "main"), changes.pop("integration", "github")
    return ConnectionRecord(
        org_id="acme",
        owner=owner,
        account_id=account,
        integration=slug,
        name=name,
        template="apikey-0",
        provider=changes.pop("provider", "encrypted"),
        item_ids=item_ids if item_ids is not None else {"token": pasted_item_id(owner, slug, name, "token")},
        created_at=1.0,
        updated_at=1.0,
    )


# -- the cipher ------------------------------------------------------------------------------------------


def test_a_payload_is_upstreams_format_and_round_trips() -> None:
    payload = CIPHER.encrypt(VALUE)
    assert re.fullmatch(rf"v1\.{PAYLOAD_PART}\.{PAYLOAD_PART}\.{PAYLOAD_PART}", payload.decode())
    iv, tag, ciphertext = payload.split(b".")[1:]
    assert len(base64.b64decode(iv)) == 12
    assert len(base64.b64decode(tag)) == 16
    assert len(base64.b64decode(ciphertext)) == len(VALUE.encode())
    assert CIPHER.decrypt(payload) == VALUE
    assert CIPHER.encrypt(VALUE) != payload  # a fresh IV every time
    assert CIPHER.decrypt(CIPHER.encrypt("ünïcode ✓")) == "ünïcode ✓"


def test_the_key_is_scrypt_of_the_master_with_nodes_defaults() -> None:
    """An independent scrypt (hashlib's) and AES-GCM open what the cipher sealed: the format is portable."""
    payload = SecretCipher.derive(b"master text").encrypt(VALUE)
    key = hashlib.scrypt(b"master text", salt=SALT, n=2**14, r=8, p=1, dklen=32)
    iv, tag, ciphertext = (base64.b64decode(part) for part in payload.split(b".")[1:])
    assert AESGCM(key).decrypt(iv, ciphertext + tag, None).decode() == VALUE


def test_a_tampered_payload_or_another_key_is_a_typed_failure() -> None:
    payload = CIPHER.encrypt(VALUE)
    version, iv, tag, ciphertext = payload.split(b".")
    flipped = base64.b64encode(bytes([base64.b64decode(ciphertext)[0] ^ 1]) + base64.b64decode(ciphertext)[1:])
    for bad in (
        b".".join([version, iv, tag, flipped]),
        b".".join([version, iv, base64.b64encode(bytes(16)), ciphertext]),
        b".".join([version, base64.b64encode(bytes(12)), tag, ciphertext]),
        b".".join([b"v2", iv, tag, ciphertext]),
        b".".join([version, iv, tag]),
        b".".join([version, iv, tag, b"!!not base64!!"]),
        b".".join([version, base64.b64encode(bytes(8)), tag, ciphertext]),
        b"",
    ):
        with pytest.raises(SecretUnreadable) as caught:
            CIPHER.decrypt(bad)
        assert VALUE not in str(caught.value)
    with pytest.raises(SecretUnreadable, match="could not be decrypted"):
        SecretCipher(bytes(32)).decrypt(payload)


def test_the_key_file_is_made_once_with_mode_0600_and_reused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        first = master_key(tmp_path / "data", {})
        second = master_key(tmp_path / "data", {})
    path = tmp_path / "data" / KEY_FILE
    assert first == second == path.read_bytes().strip()
    assert len(base64.b64decode(first, validate=True)) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1
    assert "generated a new master key" in warnings[0]
    assert first.decode() not in warnings[0]
    assert sorted(os.listdir(tmp_path / "data")) == [KEY_FILE]  # no temporary left behind


async def test_processes_starting_at_once_agree_on_one_key(tmp_path: Path) -> None:
    keys: list[bytes] = []

    async def start() -> None:
        keys.append(await trio.to_thread.run_sync(master_key, tmp_path, {}))

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(start)
    assert len(set(keys)) == 1
    assert keys[0] == (tmp_path / KEY_FILE).read_bytes().strip()


def test_the_environment_key_wins_and_must_not_be_empty(tmp_path: Path) -> None:
    assert master_key(tmp_path, {"EXECUTOR_MCP_SECRET_KEY": "  from the env \n"}) == b"from the env"
    assert not (tmp_path / KEY_FILE).exists()
    with pytest.raises(SecretKeyUnusable, match="set but empty"):
        master_key(tmp_path, {"EXECUTOR_MCP_SECRET_KEY": " "})


def test_an_unusable_key_file_is_refused_and_a_loose_one_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / KEY_FILE
    path.write_text("\n")
    with pytest.raises(SecretKeyUnusable, match="is empty"):
        master_key(tmp_path, {})
    path.write_text("operator key\n")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        assert master_key(tmp_path, {}) == b"operator key"
    assert any("readable by other users" in record.getMessage() for record in caplog.records)


async def test_open_cipher_uses_the_key_file(tmp_path: Path) -> None:
    sealed = (await open_cipher(tmp_path, {})).encrypt(VALUE)
    assert (await open_cipher(tmp_path, {})).decrypt(sealed) == VALUE
    with pytest.raises(SecretUnreadable):
        (await open_cipher(tmp_path, {"EXECUTOR_MCP_SECRET_KEY": "another"})).decrypt(sealed)


# -- the encrypted provider -------------------------------------------------------------------------------


async def test_the_encrypted_store_seals_values_per_partition(control: ControlPlane, tmp_path: Path) -> None:
    providers = standard_providers(control.secrets, CIPHER, Settings(), environ={})
    store = providers.default_writable
    assert store.key == "encrypted"
    assert store.writable
    await store.set(ACME, {"token": VALUE, "other": "two"})
    await store.set(ALICE, {"token": "alice's"})
    assert await store.get(ACME, "token") == VALUE
    assert await store.get(ALICE, "token") == "alice's"
    assert await store.get(SecretPartition("evil", ""), "token") is None
    assert await store.get(ACME, "never-made") is None
    assert await store.items(ACME) == [SecretItem("other", "other"), SecretItem("token", "token")]
    raw = await control.secrets.get_secret_item("acme", "", "token")
    assert raw is not None
    assert raw.startswith(b"v1.")
    assert VALUE.encode() not in raw
    await store.delete(ACME, ["token"])
    assert await store.get(ACME, "token") is None

    # A record sealed under another key is a typed failure, not a crash and not a value.
    await control.secrets.put_secret_items("acme", "", {"foreign": SecretCipher(bytes(32)).encrypt(VALUE)})
    with pytest.raises(SecretUnreadable):
        await store.get(ACME, "foreign")


@pytest.mark.parametrize("value", ["", "x" * (MAX_VALUE_BYTES + 1)])
async def test_the_encrypted_store_refuses_empty_and_oversized_values(control: ControlPlane, value: str) -> None:
    providers = standard_providers(control.secrets, CIPHER, Settings(), environ={})
    with pytest.raises(InvalidConnectionInput) as caught:
        await providers.default_writable.set(ACME, {"token": value})
    assert "x" * 20 not in str(caught.value)
    assert await control.secrets.secret_items("acme", "") == []


# -- the env provider -------------------------------------------------------------------------------------


async def test_the_env_provider_reads_only_allowed_names() -> None:
    environ = {
        "EXECUTOR_MCP_SECRET_GITHUB": "gh",
        "EXECUTOR_MCP_SECRET_KEY": "the master key",
        "EXECUTOR_MCP_SECRET_ENV": "HOME",
        "EXECUTOR_MCP_JWT_SECRET_FILE": "/etc/jwt",
        "EXECUTOR_MCP_SECRETS_DIR": "/run/secrets",
        "HOME": "/root",
        "DEPLOY_TOKEN": "deploy",
        "EXECUTOR_MCP_SECRET_EMPTY": "",
    }
    provider = EnvProvider(environ, listed=("DEPLOY_TOKEN", "NOT_SET"))
    assert not provider.writable
    assert await provider.get(ACME, "EXECUTOR_MCP_SECRET_GITHUB") == "gh"
    assert await provider.get(ACME, "DEPLOY_TOKEN") == "deploy"
    for refused in (
        "EXECUTOR_MCP_SECRET_KEY",
        "EXECUTOR_MCP_SECRET_ENV",
        "EXECUTOR_MCP_JWT_SECRET_FILE",
        "EXECUTOR_MCP_SECRETS_DIR",
        "HOME",
        "NOT_SET",
        "EXECUTOR_MCP_SECRET_EMPTY",
        "",
        "executor_mcp_secret_github",
        "EXECUTOR_MCP_SECRET_GITHUB\x00",
        "1ABC",
    ):
        assert await provider.get(ACME, refused) is None, refused
    assert await provider.items(ALICE) == [
        SecretItem("DEPLOY_TOKEN", "DEPLOY_TOKEN"),
        SecretItem("EXECUTOR_MCP_SECRET_EMPTY", "EXECUTOR_MCP_SECRET_EMPTY"),
        SecretItem("EXECUTOR_MCP_SECRET_GITHUB", "EXECUTOR_MCP_SECRET_GITHUB"),
    ]
    with pytest.raises(InvalidConnectionInput, match='"env" is read-only'):
        await provider.set(ACME, {"EXECUTOR_MCP_SECRET_GITHUB": VALUE})


async def test_the_env_provider_cannot_be_listed_into_the_servers_own_variables() -> None:
    environ = {"EXECUTOR_MCP_SECRET_KEY": "k", "EXECUTOR_MCP_JWT_SECRET_FILE": "/etc/jwt", "EXECUTOR_MCP_CONFIG": "c"}
    provider = EnvProvider(environ, listed=tuple(environ))
    for name in environ:
        assert await provider.get(ACME, name) is None
    assert await provider.items(ACME) == []


# -- the file provider ------------------------------------------------------------------------------------


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "run-secrets"
    directory.mkdir()
    (directory / "github").write_text(VALUE + "\n")
    (directory / "crlf").write_bytes(b"windows\r\n")
    (directory / "two-newlines").write_text("kept\n\n")
    (directory / "big").write_bytes(b"x" * (MAX_VALUE_BYTES + 1))
    (directory / "binary").write_bytes(b"\xff\xfe")
    (directory / "empty").write_text("")
    (directory / ".hidden").write_text("hidden")
    (directory / "sub").mkdir()
    (directory / "sub" / "inner").write_text("inner")
    # Kubernetes' layout: each key a symlink into a timestamped directory through `..data`.
    (directory / "..2024_01_01").mkdir()
    (directory / "..2024_01_01" / "k8s").write_text("from kubernetes")
    (directory / "..data").symlink_to("..2024_01_01")
    (directory / "k8s").symlink_to("..data/k8s")
    outside = tmp_path / "outside"
    outside.write_text("outside the directory")
    (directory / "escape").symlink_to(outside)
    (directory / "to-passwd").symlink_to("/etc/passwd")
    os.mkfifo(directory / "fifo")
    return directory


async def test_the_file_provider_reads_files_of_its_directory(
    secrets_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = FileProvider(secrets_dir)
    assert not provider.writable
    assert await provider.get(ACME, "github") == VALUE
    assert await provider.get(ALICE, "github") == VALUE  # files are the operator's, for every partition
    assert await provider.get(ACME, "crlf") == "windows"
    assert await provider.get(ACME, "two-newlines") == "kept\n"
    assert await provider.get(ACME, "k8s") == "from kubernetes"
    with caplog.at_level(logging.DEBUG):
        for refused in (
            "big",
            "binary",
            "empty",
            ".hidden",
            "sub",
            "sub/inner",
            "../outside",
            str(secrets_dir / "github"),
            "/etc/passwd",
            "escape",
            "to-passwd",
            "fifo",
            "..",
            ".",
            "",
            "missing",
            "github\x00",
            "..data",
        ):
            with trio.fail_after(5):
                assert await provider.get(ACME, refused) is None, refused
    assert all(VALUE not in record.getMessage() for record in caplog.records)
    assert [item.id for item in await provider.items(ACME)] == [
        "big",
        "binary",
        "crlf",
        "empty",
        "github",
        "k8s",
        "two-newlines",
    ]
    with pytest.raises(InvalidConnectionInput, match='"file" is read-only'):
        await provider.delete(ACME, ["github"])


async def test_a_missing_secrets_dir_finds_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    provider = FileProvider(tmp_path / "absent")
    assert await provider.get(ACME, "github") is None
    assert await provider.items(ACME) == []


# -- the registry -----------------------------------------------------------------------------------------


async def test_the_registry_lists_encrypted_first_and_types_unknown_providers(
    control: ControlPlane, secrets_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert standard_providers(control.secrets, CIPHER, Settings(), environ={}).keys() == ["encrypted", "env"]
    with caplog.at_level(logging.WARNING):
        missing = standard_providers(control.secrets, CIPHER, Settings(secrets_dir=secrets_dir / "nope"), environ={})
    assert missing.keys() == ["encrypted", "env", "file"]
    assert any("is not a directory" in record.getMessage() for record in caplog.records)

    providers = standard_providers(
        control.secrets, CIPHER, Settings(secrets_dir=secrets_dir), environ={"EXECUTOR_MCP_SECRET_X": "x"}
    )
    assert providers.keys() == ["encrypted", "env", "file"]
    assert providers.default_writable.key == "encrypted"
    assert await providers.get("env", ACME, "EXECUTOR_MCP_SECRET_X") == "x"
    assert await providers.get("file", ACME, "github") == VALUE
    assert await providers.get("encrypted", ACME, "2f6c0b9e-random") is None
    assert await providers.items("env", ACME) == [SecretItem("EXECUTOR_MCP_SECRET_X", "EXECUTOR_MCP_SECRET_X")]
    with pytest.raises(ProviderNotRegistered, match=r'Credential provider "onepassword" is not registered\.') as caught:
        await providers.get("onepassword", ACME, "x")
    assert caught.value.fields == {"provider": "onepassword"}
    with pytest.raises(ProviderNotRegistered):
        await providers.items("keychain", ACME)
    with pytest.raises(ValueError, match="share a key"):
        SecretProviders([FileProvider(secrets_dir), FileProvider(secrets_dir)])
    with pytest.raises(ValueError, match="no writable"):
        SecretProviders([FileProvider(secrets_dir)])


async def test_pasted_values_are_stored_and_forgotten_with_their_connection(control: ControlPlane) -> None:
    providers = standard_providers(control.secrets, CIPHER, Settings(), environ={})
    record = connection(owner="user", account="alice", item_ids={})
    ids = {
        variable: pasted_item_id(record.owner, record.integration, record.name, variable)
        for variable in ("token", "secret")
    }
    assert ids["token"] == "connection:user:github:main:token"
    stored = await providers.store_values(ALICE, ids, {"token": VALUE, "secret": "two"})
    assert stored == "encrypted"
    assert await providers.get(stored, ALICE, ids["token"]) == VALUE
    assert await providers.get(stored, ACME, ids["token"]) is None
    with pytest.raises(InvalidConnectionInput, match="needs a value and an item id"):
        await providers.store_values(ALICE, ids, {"token": VALUE})

    # An item the connection only references (`from`) outlives it; what it pasted does not.
    await providers.default_writable.set(ALICE, {"shared": "someone else's"})
    pasted = connection(owner="user", account="alice", item_ids={**ids, "extra": "shared"})
    replacement = connection(owner="user", account="alice", item_ids={"token": ids["token"]})
    await providers.forget(pasted, replaced_by=replacement)
    assert await control.secrets.secret_items("acme", "alice") == [ids["token"], "shared"]
    await providers.forget(replacement)
    assert await control.secrets.secret_items("acme", "alice") == ["shared"]
    # A connection on another provider forgets nothing of the store's.
    await providers.forget(connection(owner="user", account="alice", item_ids={"token": "shared"}, provider="env"))
    await providers.forget(connection(owner="user", account="alice", item_ids={"token": "shared"}))
    assert await control.secrets.secret_items("acme", "alice") == ["shared"]


async def test_no_value_reaches_a_log_line_or_an_error(
    control: ControlPlane, secrets_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    providers = standard_providers(
        control.secrets, CIPHER, Settings(secrets_dir=secrets_dir), environ={"EXECUTOR_MCP_SECRET_X": VALUE}
    )
    errors: list[Exception] = []

    async def failing(attempt) -> None:
        with pytest.raises((InvalidConnectionInput, SecretUnreadable)) as caught:
            await attempt
        errors.append(caught.value)

    with caplog.at_level(logging.DEBUG):
        await providers.store_values(ACME, {"token": "t"}, {"token": VALUE})
        assert await providers.get("encrypted", ACME, "t") == VALUE
        assert await providers.get("env", ACME, "EXECUTOR_MCP_SECRET_X") == VALUE
        assert await providers.get("file", ACME, "github") == VALUE
        await failing(providers.store_values(ACME, {"token": "t"}, {"token": VALUE * 5000}))
        await failing(providers.store_values(ACME, {}, {"token": VALUE}))
        await failing(providers.provider("env").set(ACME, {"x": VALUE}))
        await control.secrets.put_secret_items("acme", "", {"t": CIPHER.encrypt(VALUE).replace(b"v1.", b"v1.A", 1)})
        await failing(providers.get("encrypted", ACME, "t"))
    assert len(errors) == 4
    texts = [text for error in errors for text in (str(error), repr(error), repr(vars(error)))]
    texts += [record.getMessage() for record in caplog.records]
    assert [text for text in texts if VALUE in text] == []


# -- the CLI prompt ---------------------------------------------------------------------------------------


def test_a_tty_value_comes_from_getpass() -> None:
    prompts: list[str] = []

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return VALUE

    assert read_secret_value("Token: ", io.BytesIO(b"ignored"), tty=True, ask=ask) == VALUE
    assert prompts == ["Token: "]
    with pytest.raises(SecretInputRefused, match="empty"):
        read_secret_value("Token: ", io.BytesIO(), tty=True, ask=lambda _: "")
    with pytest.raises(SecretInputRefused, match="larger than 64 KiB"):
        read_secret_value("Token: ", io.BytesIO(), tty=True, ask=lambda _: "x" * (MAX_VALUE_BYTES + 1))


@pytest.mark.parametrize(
    ("piped", "value"),
    [(b"token\n", "token"), (b"token", "token"), (b"token\r\n", "token"), (b"two\n\n", "two\n"), (b" sp ", " sp ")],
)
def test_a_piped_value_loses_one_trailing_newline(piped: bytes, value: str) -> None:
    assert read_secret_value("Token: ", io.BytesIO(piped), tty=False) == value


@pytest.mark.parametrize(
    ("piped", "message"),
    [
        (b"", "empty"),
        (b"\n", "empty"),
        (b"x" * (MAX_VALUE_BYTES + 1), "larger than 64 KiB"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_piped_value_is_refused_when_it_cannot_be_a_credential(piped: bytes, message: str) -> None:
    with pytest.raises(SecretInputRefused, match=message) as caught:
        read_secret_value("Token: ", io.BytesIO(piped), tty=False)
    assert "x" * 100 not in str(caught.value)

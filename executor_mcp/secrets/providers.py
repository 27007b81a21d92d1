"""Secret providers: where a connection's `(provider, item id)` references resolve to values.

A provider sees opaque ids inside a partition (the org and, for a user-owned connection, the account), as
upstream's do; the connection record says which provider and ids it uses. `encrypted` is the one writable
provider and the default store for pasted values; `env` and `file` read what the operator put on the machine
and ignore the partition, so they are restricted to what the operator allowed: an agent tricked into an
approval can bind a connection to any id, and the upstream the connection talks to would receive the value.

An id that resolves to nothing is None, never an error: a connection may reference an item that does not
exist yet (the call then fails with `connection_value_missing`).
"""

import logging
import os
import stat
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import attrs
import trio

from executor_mcp.config import ENV_NAME, SECRET_ENV_PREFIX, Settings, is_reserved_env
from executor_mcp.records.integration_errors import InvalidConnectionInput, ProviderNotRegistered
from executor_mcp.records.integrations import ConnectionRecord
from executor_mcp.secrets.cipher import SecretCipher
from executor_mcp.storage.interfaces import ORG_OWNER, SecretStore

log = logging.getLogger(__name__)

ENCRYPTED = "encrypted"
ENV = "env"
FILE = "file"
MAX_VALUE_BYTES = 64 * 1024
MAX_LISTED_FILES = 1000


@attrs.frozen
class SecretPartition:
    """Whose items a provider reads or writes: the org's (`account_id` "") or one account's in the org."""

    org_id: str
    account_id: str

    @classmethod
    def of(cls, connection: ConnectionRecord) -> "SecretPartition":
        return cls(connection.org_id, "" if connection.owner == ORG_OWNER else connection.account_id)


@attrs.frozen
class SecretItem:
    """An item as `GET /api/providers/:key/items` lists it: its id and a display name, never its value."""

    id: str
    name: str


class SecretProvider(Protocol):
    key: str
    writable: bool

    async def get(self, partition: SecretPartition, item_id: str) -> str | None: ...

    async def set(self, partition: SecretPartition, values: Mapping[str, str]) -> None: ...

    async def delete(self, partition: SecretPartition, item_ids: Iterable[str]) -> None: ...

    async def items(self, partition: SecretPartition) -> list[SecretItem]: ...


def pasted_item_id(owner: str, integration: str, name: str, variable: str) -> str:
    """Where a pasted value of one input goes in the default store (upstream's id). Slugs and connection names
    hold no `:`, so the id names one connection's input unambiguously."""
    return f"connection:{owner}:{integration}:{name}:{variable}"


def _check_values(values: Mapping[str, str]) -> None:
    for value in values.values():
        if not isinstance(value, str) or not value:
            raise InvalidConnectionInput("A credential value must be a non-empty string.")
        if len(value.encode()) > MAX_VALUE_BYTES:
            raise InvalidConnectionInput(f"A credential value must be at most {MAX_VALUE_BYTES} bytes.")


class EncryptedProvider:
    """Values sealed with AES-256-GCM in the control plane, under the caller's partition."""

    key = ENCRYPTED
    writable = True

    def __init__(self, store: SecretStore, cipher: SecretCipher) -> None:
        self._store = store
        self._cipher = cipher

    async def get(self, partition: SecretPartition, item_id: str) -> str | None:
        """The value, None when there is no such item; `SecretUnreadable` when it does not decrypt."""
        raw = await self._store.get_secret_item(partition.org_id, partition.account_id, item_id)
        return None if raw is None else self._cipher.decrypt(raw)

    async def set(self, partition: SecretPartition, values: Mapping[str, str]) -> None:
        _check_values(values)
        sealed = {item_id: self._cipher.encrypt(value) for item_id, value in values.items()}
        await self._store.put_secret_items(partition.org_id, partition.account_id, sealed)

    async def delete(self, partition: SecretPartition, item_ids: Iterable[str]) -> None:
        await self._store.delete_secret_items(partition.org_id, partition.account_id, item_ids)

    async def items(self, partition: SecretPartition) -> list[SecretItem]:
        ids = await self._store.secret_items(partition.org_id, partition.account_id)
        return [SecretItem(id=item_id, name=item_id) for item_id in ids]


class _ReadOnly:
    key: str
    writable = False

    async def set(self, partition: SecretPartition, values: Mapping[str, str]) -> None:
        raise InvalidConnectionInput(f'Credential provider "{self.key}" is read-only.')

    async def delete(self, partition: SecretPartition, item_ids: Iterable[str]) -> None:
        raise InvalidConnectionInput(f'Credential provider "{self.key}" is read-only.')


class EnvProvider(_ReadOnly):
    """Environment variables of the server: only `EXECUTOR_MCP_SECRET_*` and the names given with
    `--secret-env`, never the master key or a setting, so `HOME` or `EXECUTOR_MCP_JWT_SECRET_FILE` are None."""

    key = ENV

    def __init__(self, environ: Mapping[str, str], listed: Collection[str] = ()) -> None:
        self._environ = environ
        self._listed = frozenset(listed)

    def readable(self, name: str) -> bool:
        return (
            ENV_NAME.fullmatch(name) is not None
            and not is_reserved_env(name)
            and (name.startswith(SECRET_ENV_PREFIX) or name in self._listed)
        )

    async def get(self, partition: SecretPartition, item_id: str) -> str | None:
        """The variable's value; None when it is not allowed, not set or empty."""
        return (self._environ.get(item_id) or None) if self.readable(item_id) else None

    async def items(self, partition: SecretPartition) -> list[SecretItem]:
        names = sorted(name for name in self._environ if self.readable(name))
        return [SecretItem(id=name, name=name) for name in names]


class FileProvider(_ReadOnly):
    """Files directly in one directory (`--secrets-dir`, e.g. `/run/secrets`), one value each, the trailing
    newline stripped. A name with `/`, `..`, a leading dot (Kubernetes keeps its `..data` links there) or one
    whose symlinks lead out of the directory is None; so are FIFOs, devices, directories, files over 64 KiB
    and files that are not UTF-8."""

    key = FILE

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def get(self, partition: SecretPartition, item_id: str) -> str | None:
        return await trio.to_thread.run_sync(self._read, item_id)

    async def items(self, partition: SecretPartition) -> list[SecretItem]:
        names = await trio.to_thread.run_sync(self._names)
        return [SecretItem(id=name, name=name) for name in names]

    def _resolved(self, name: str) -> str | None:
        """The real path a name in the directory leads to, or None when it leads out of the directory (a
        symlink may lead deeper: Kubernetes links each key to `..data/<key>`)."""
        if not name or name.startswith(".") or "/" in name or "\x00" in name:
            return None
        root = os.path.realpath(self.directory)
        target = os.path.realpath(os.path.join(root, name))
        return target if target != root and os.path.commonpath([root, target]) == root else None

    def _read(self, name: str) -> str | None:
        target = self._resolved(name)
        if target is None:
            return None
        try:
            # Non-blocking, so a FIFO planted under the name cannot hold the thread until someone writes to it.
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            raw = os.read(fd, MAX_VALUE_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(raw) > MAX_VALUE_BYTES:
            log.warning("secret file %r is larger than %d bytes; it is not used", name, MAX_VALUE_BYTES)
            return None
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            log.warning("secret file %r is not UTF-8 text; it is not used", name)
            return None
        return text.removesuffix("\n").removesuffix("\r") or None

    def _names(self) -> list[str]:
        try:
            entries = sorted(entry.name for entry in os.scandir(self.directory))
        except OSError:
            return []
        names = []
        for name in entries:
            target = self._resolved(name)
            if target is not None and os.path.isfile(target):
                names.append(name)
                if len(names) == MAX_LISTED_FILES:
                    break
        return names


class SecretProviders:
    """The registered providers, in listing order (`encrypted` first, the default store for pasted values:
    upstream's e2e tests bind `from: {provider: providers[0], id: <random>}`)."""

    def __init__(self, providers: Sequence[SecretProvider]) -> None:
        self._providers = {provider.key: provider for provider in providers}
        if len(self._providers) != len(providers):
            raise ValueError("two secret providers share a key")
        writable = [provider for provider in providers if provider.writable]
        if not writable:
            raise ValueError("no writable secret provider")
        self.default_writable: SecretProvider = writable[0]

    def keys(self) -> list[str]:
        return list(self._providers)

    def provider(self, key: str) -> SecretProvider:
        try:
            return self._providers[key]
        except KeyError:
            shown = key if len(key) <= 64 else key[:64] + "…"
            raise ProviderNotRegistered(f'Credential provider "{shown}" is not registered.', provider=shown) from None

    async def get(self, provider_key: str, partition: SecretPartition, item_id: str) -> str | None:
        return await self.provider(provider_key).get(partition, item_id)

    async def items(self, provider_key: str, partition: SecretPartition) -> list[SecretItem]:
        return await self.provider(provider_key).items(partition)

    async def store_values(
        self, partition: SecretPartition, item_ids: Mapping[str, str], values: Mapping[str, str]
    ) -> str:
        """Write pasted values (`values` by input) to the default store under `item_ids` (by input) in one
        step; the key of the provider that holds them now, for the connection record."""
        if set(item_ids) != set(values):
            raise InvalidConnectionInput("Every pasted input needs a value and an item id.")
        await self.default_writable.set(partition, {item_ids[variable]: values[variable] for variable in values})
        return self.default_writable.key

    async def delete(self, partition: SecretPartition, item_ids: Iterable[str]) -> None:
        """Delete items of the default store."""
        await self.default_writable.delete(partition, item_ids)

    async def forget(self, connection: ConnectionRecord, replaced_by: ConnectionRecord | None = None) -> None:
        """Delete the values a removed (or replaced) connection pasted, and nothing it only referenced: an item
        a `from: {provider, id}` names belongs to whoever made it. With `replaced_by`, the items the new record
        wrote under the same ids are kept."""
        doomed = _written(connection, self.default_writable.key) - _written(replaced_by, self.default_writable.key)
        if doomed:
            await self.delete(SecretPartition.of(connection), sorted(doomed))


def _written(connection: ConnectionRecord | None, store: str) -> set[str]:
    if connection is None or connection.provider != store:
        return set()
    return {
        item_id
        for variable, item_id in connection.item_ids.items()
        if item_id == pasted_item_id(connection.owner, connection.integration, connection.name, variable)
    }


def standard_providers(
    store: SecretStore, cipher: SecretCipher, settings: Settings, environ: Mapping[str, str] = os.environ
) -> SecretProviders:
    """`encrypted`, `env` and, with `--secrets-dir`, `file`."""
    providers: list[SecretProvider] = [EncryptedProvider(store, cipher), EnvProvider(environ, settings.secret_env)]
    if settings.secrets_dir is not None:
        if not settings.secrets_dir.is_dir():
            log.warning("--secrets-dir %s is not a directory: the file provider finds nothing", settings.secrets_dir)
        providers.append(FileProvider(settings.secrets_dir))
    return SecretProviders(providers)

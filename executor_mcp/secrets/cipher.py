"""The encrypted store's cipher: AES-256-GCM under a key derived from one master key.

The payload is upstream's, so a value moves between the two: `v1.<iv>.<tag>.<ciphertext>`, each part
standard base64, a 12-byte random IV and the 16-byte GCM tag, the key `scrypt(master, "executor-encrypted-
secrets/v1", 32)` with Node's `crypto.scrypt` defaults (N=2^14, r=8, p=1: 16 MiB and some 50 ms, paid once
per process). The master is the text of `EXECUTOR_MCP_SECRET_KEY`, else of `<data-dir>/secret.key` (32
random bytes in base64, generated on first start), as UTF-8, surrounding whitespace trimmed.
"""

import base64
import binascii
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

import trio
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from executor_mcp.config import SECRET_KEY_ENV
from executor_mcp.storage.environment import sync_directory

log = logging.getLogger(__name__)

KEY_FILE = "secret.key"
SALT = b"executor-encrypted-secrets/v1"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
VERSION = "v1"
_IV_BYTES = 12
_TAG_BYTES = 16


class SecretUnreadable(Exception):
    """A stored payload that does not decrypt: another master key, or a damaged or forged record."""

    def __init__(self) -> None:
        super().__init__(
            f"a stored secret could not be decrypted (another {SECRET_KEY_ENV} or secret.key, or a damaged record)"
        )


class SecretKeyUnusable(Exception):
    """No master key can be had: an empty variable or key file, or a key file that cannot be read or made."""


class SecretCipher:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("AES-256 needs a 32-byte key")
        self._aead = AESGCM(key)

    @classmethod
    def derive(cls, master: bytes) -> "SecretCipher":
        return cls(Scrypt(salt=SALT, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(master))

    def encrypt(self, value: str) -> bytes:
        iv = secrets.token_bytes(_IV_BYTES)
        sealed = self._aead.encrypt(iv, value.encode(), None)
        ciphertext, tag = sealed[:-_TAG_BYTES], sealed[-_TAG_BYTES:]
        return b".".join([VERSION.encode(), *(base64.b64encode(part) for part in (iv, tag, ciphertext))])

    def decrypt(self, payload: bytes) -> str:
        """The value sealed in `payload`; `SecretUnreadable` for anything this key did not seal."""
        parts = payload.split(b".")
        if len(parts) != 4 or parts[0] != VERSION.encode():
            raise SecretUnreadable
        try:
            iv, tag, ciphertext = (base64.b64decode(part, validate=True) for part in parts[1:])
        except (binascii.Error, ValueError):
            raise SecretUnreadable from None
        if len(iv) != _IV_BYTES or len(tag) != _TAG_BYTES:
            raise SecretUnreadable
        try:
            return self._aead.decrypt(iv, ciphertext + tag, None).decode()
        except (InvalidTag, UnicodeDecodeError):
            raise SecretUnreadable from None


async def open_cipher(data_dir: Path, environ: Mapping[str, str] = os.environ) -> SecretCipher:
    """The server's cipher, its key file made on first use; off the trio loop (file I/O and scrypt)."""
    return await trio.to_thread.run_sync(lambda: SecretCipher.derive(master_key(data_dir, environ)))


def master_key(data_dir: Path, environ: Mapping[str, str]) -> bytes:
    """`EXECUTOR_MCP_SECRET_KEY` if set, else the key file, generated when absent."""
    if SECRET_KEY_ENV in environ:
        master = environ[SECRET_KEY_ENV].strip()
        if not master:
            raise SecretKeyUnusable(f"{SECRET_KEY_ENV} is set but empty")
        return master.encode()
    path = data_dir / KEY_FILE
    if not path.exists():
        _generate(path)
    return _read_key_file(path)


def _read_key_file(path: Path) -> bytes:
    try:
        master = path.read_bytes().strip()
        mode = path.stat().st_mode
    except OSError as exc:
        raise SecretKeyUnusable(f"cannot read {path}: {exc.strerror}") from None
    if not master:
        raise SecretKeyUnusable(f"{path} is empty")
    if mode & 0o077:
        log.warning("%s is readable by other users of this machine; make it mode 0600", path)
    return master


def _generate(path: Path) -> None:
    """Make the key file so that it only ever appears whole: written under a unique temporary name, then
    hard-linked into place, which fails if another process (a server and an admin command starting at once)
    got there first; then both read the one that won."""
    path.parent.mkdir(parents=True, exist_ok=True)
    content = base64.b64encode(secrets.token_bytes(32)) + b"\n"
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    try:
        _write_exclusive(temporary, content)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return
        finally:
            temporary.unlink(missing_ok=True)
        sync_directory(path.parent)  # the key is durable before any secret sealed with it is committed
    except OSError as exc:
        raise SecretKeyUnusable(f"cannot create {path}: {exc.strerror}") from None
    log.warning(
        "generated a new master key for stored secrets at %s; back it up (or set %s): without it no stored "
        "secret can be read",
        path,
        SECRET_KEY_ENV,
    )


def _write_exclusive(path: Path, content: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)

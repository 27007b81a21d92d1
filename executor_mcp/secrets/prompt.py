"""One secret value for the CLI: typed at a TTY prompt that does not echo, or piped on standard input,
never an argument (argv is visible to every user of the machine)."""

import getpass
from collections.abc import Callable
from typing import BinaryIO

MAX_VALUE_BYTES = 64 * 1024


class SecretInputRefused(ValueError):
    """A value the CLI will not store; the message says why and never holds the value."""


def read_secret_value(prompt: str, stdin: BinaryIO, tty: bool, ask: Callable[[str], str] = getpass.getpass) -> str:
    """The value typed at `prompt` when standard input is a TTY (`ask`, getpass by default), else what
    `stdin` holds (at most 64 KiB, UTF-8, one trailing newline dropped)."""
    if tty:
        value = ask(prompt)
        if len(value.encode()) > MAX_VALUE_BYTES:
            raise SecretInputRefused(f"The value is larger than {MAX_VALUE_BYTES // 1024} KiB.")
    else:
        raw = stdin.read(MAX_VALUE_BYTES + 1)
        if len(raw) > MAX_VALUE_BYTES:
            raise SecretInputRefused(f"The value on standard input is larger than {MAX_VALUE_BYTES // 1024} KiB.")
        try:
            value = raw.decode()
        except UnicodeDecodeError:
            raise SecretInputRefused("The value on standard input is not UTF-8 text.") from None
        value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise SecretInputRefused("The value is empty.")
    return value

"""The principal of a request, and the authenticator for `--auth none`.

With auth `none` (only allowed on a loopback bind) every request is the one implicit local principal,
so every session on the server belongs to it.
"""

from collections.abc import Mapping
from typing import Protocol

from executor_mcp.storage.records import Owner

Principal = Owner

LOCAL_PRINCIPAL = Principal(account_id="local", org_id="local")


class Authenticator(Protocol):
    async def authenticate(self, headers: Mapping[str, str]) -> Principal: ...


class NoAuth:
    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        return LOCAL_PRINCIPAL

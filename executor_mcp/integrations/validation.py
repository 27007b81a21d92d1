"""The shapes every integration and connection request is checked against, before anything is read or written
(pure): one wording of each refusal, whichever kind or entry point asks.
"""

import re
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.openapi import auth as openapi_auth
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import AuthMethod, IntegrationRecord

MAX_NAME_LENGTH = 200
MAX_DESCRIPTION_LENGTH = 4000
MAX_STATIC_ENTRIES = 64
MAX_STATIC_VALUE_LENGTH = 4096
MAX_URL_LENGTH = 2048


def object_of(body: Any) -> JsonObject:
    """A request body as an object (no body is an empty one)."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidInput("Expected a JSON object")
    return body


def check_known(values: JsonObject, allowed: set[str] | frozenset[str]) -> None:
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise InvalidInput(f"Unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown[:10])}")


def text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be a non-empty string")
    return value


def optional_text(values: JsonObject, field: str, limit: int) -> str | None:
    value = values.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string")
    if len(value) > limit:
        raise InvalidInput(f"{field} must be at most {limit} characters")
    return value


def url(value: Any, field: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"https?://\S+", value) or len(value) > MAX_URL_LENGTH:
        raise InvalidInput(f"{field} must be an http(s) URL of at most {MAX_URL_LENGTH} characters")
    return value


def static_config(values: JsonObject) -> JsonObject:
    """A request's `baseUrl`, static `headers` and `queryParams`, as an integration's config stores them."""
    config: JsonObject = {}
    if values.get("baseUrl") is not None:
        config["baseUrl"] = url(values["baseUrl"], "baseUrl")
    for field in ("headers", "queryParams"):
        raw = values.get(field)
        if raw is None:
            continue
        if (
            not isinstance(raw, dict)
            or len(raw) > MAX_STATIC_ENTRIES
            or not all(
                isinstance(key, str) and key and isinstance(value, str) and len(value) <= MAX_STATIC_VALUE_LENGTH
                for key, value in raw.items()
            )
        ):
            raise InvalidInput(f"{field} must be an object of at most {MAX_STATIC_ENTRIES} string values")
        config[field] = dict(raw)
    return config


def explicit_methods(values: JsonObject) -> tuple[AuthMethod, ...] | None:
    """A request's `authenticationTemplate` as auth methods, or None when it names none."""
    raw = values.get("authenticationTemplate")
    return openapi_auth.normalize_methods(raw) if raw is not None else None


def configured_methods(record: IntegrationRecord, values: JsonObject) -> tuple[AuthMethod, ...]:
    """A configure request's `authenticationTemplate`, merged into (or, with `mode: "replace"`, replacing) the
    integration's auth methods; the same dialects for every kind."""
    mode = values.get("mode", "merge")
    if mode not in ("merge", "replace"):
        raise InvalidInput('mode must be "merge" or "replace"')
    if values.get("authenticationTemplate") is None:
        return record.auth_methods
    new = openapi_auth.normalize_methods(values["authenticationTemplate"])
    return openapi_auth.merge_methods(record.auth_methods, new, mode)

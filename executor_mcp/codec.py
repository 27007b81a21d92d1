"""The one cattrs converter, shared by wire types and stored records.

cattrs' default hooks coerce (`"5"` becomes 5, `"no"` becomes True, 1.9 becomes 1). A protocol server
that silently repairs input hides client bugs and lets garbage into session files, so every primitive
hook here refuses anything that is not already of the declared type.
"""

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from typing import Any

import cattrs

JsonObject = dict[str, Any]


def _strict(kind: type, *, reject_bool: bool = False) -> Callable[[Any, type], Any]:
    def structure(value: Any, _: type) -> Any:
        if isinstance(value, bool) and (reject_bool or kind is not bool):
            raise TypeError(f"expected {kind.__name__}, got bool")
        if not isinstance(value, kind):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return structure


def _structure_float(value: Any, _: type) -> float:
    # JSON has one number type: an integer is an acceptable float, a bool or a string is not.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected number, got {type(value).__name__}")
    return float(value)


def _structure_object(value: Any, _: type) -> JsonObject:
    if not isinstance(value, dict):
        raise TypeError(f"expected object, got {type(value).__name__}")
    return value


def make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=False)
    conv.register_structure_hook(str, _strict(str))
    conv.register_structure_hook(int, _strict(int, reject_bool=True))
    conv.register_structure_hook(bool, _strict(bool))
    conv.register_structure_hook(float, _structure_float)
    # A JSON object stays as it is (its values are whatever JSON holds), but it must be an object.
    conv.register_structure_hook_func(lambda t: t == JsonObject, _structure_object)
    return conv


converter = make_converter()


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, the form every body and stored record uses.

    A lone surrogate (a JavaScript string or a JSON escape may hold one; UTF-8 cannot) becomes U+FFFD
    instead of failing the whole value; in a Python `str` every surrogate is lone, since an escaped pair
    decodes to one code point. NaN and the infinities are not JSON: they raise `ValueError`, so they never
    reach the wire.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text).encode()


# Deeper than this, JSON is refused where it would be passed on: the official MCP clients' parsers give
# up at about 200 levels, Python's at about 1,000.
MAX_DEPTH = 100


def deeper_than(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON data nests more than `limit` arrays and objects deep; iterative, so any depth is safe."""
    level: list[Any] = [value]
    for _ in range(limit + 1):
        level = [child for item in level if isinstance(item, dict | list) for child in _children(item)]
        if not level:
            return False
    return True


def _children(container: dict | list) -> Any:
    return container.values() if isinstance(container, dict) else container


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(raw: bytes | str) -> Any:
    """Standard JSON only: Python's NaN and Infinity extensions would not survive being sent back."""
    return json.loads(raw, parse_constant=_reject_constant)


def json_digest(value: Any) -> str:
    """SHA-256 (hex) of a JSON value's canonical text: sorted keys, no spaces, lone surrogates kept, so two
    equal values digest alike whatever their key order."""
    return hashlib.sha256(_canonical(value)).hexdigest()


def json_mac(key: bytes, value: Any) -> str:
    """HMAC-SHA256 (hex) of a JSON value's canonical text: a digest only the key's holder can compute."""
    return hmac.new(key, _canonical(value), hashlib.sha256).hexdigest()


def _canonical(value: Any) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")

"""OpenAPI source text → a bounded, validated document whose local `$ref`s resolve (sans-I/O).

Every source is hostile until this module says otherwise. The checks run before any compile work and
each refusal is one `SpecRefused` line (no traceback, no partial result):
  - size: more than `max_bytes` is refused before any parsing;
  - syntax: invalid JSON/YAML;
  - shape: upstream's messages for an empty document, a non-3.x document and a document without `paths`;
  - nesting: more than `MAX_DEPTH` levels of objects and arrays (GitHub's description, the largest real one we
    know, nests 22);
  - volume: more than `MAX_NODES` values once YAML aliases are expanded (an alias bomb is small text and a
    huge tree);
  - references: a `$ref` that is not a local `#/...` pointer (a URL, a file path), or a chain of pure
    references that loops or runs longer than `MAX_REF_CHAIN`.
"""

import math
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import attrs
import yaml

from executor_mcp.codec import JsonObject, loads
from executor_mcp.config import DEFAULT_MAX_SPEC_BYTES
from executor_mcp.records.integration_errors import SpecRefused

MAX_DEPTH = 64
MAX_NODES = 4_000_000
MAX_REF_CHAIN = 32
_QUOTED_LIMIT = 120  # how much of a hostile string a refusal quotes


def quoted(text: str) -> str:
    """A hostile string made safe for a one-line reason: clamped, newlines gone."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= _QUOTED_LIMIT else flat[:_QUOTED_LIMIT] + "…")


class _Loader(yaml.CSafeLoader):
    """The safe loader without the timestamp resolver: upstream's js-yaml JSON schema keeps `2024-01-01` a
    string, and a date object is not JSON."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
}


@attrs.frozen
class Document:
    """A parsed OpenAPI 3.x document; `root` is plain JSON data (string keys, JSON scalars)."""

    root: JsonObject

    @property
    def paths(self) -> JsonObject:
        return self.root["paths"]

    @property
    def components(self) -> JsonObject:
        components = self.root.get("components")
        return components if isinstance(components, dict) else {}

    def pointer(self, ref: str) -> Any:
        """The value at a local `#/...` JSON pointer, or None when nothing is there."""
        fragment = unquote(ref[1:]) if ref.startswith("#") else None
        if fragment is None or (fragment and not fragment.startswith("/")):
            return None
        current: Any = self.root
        for segment in _segments(fragment):
            if isinstance(current, dict):
                current = current.get(segment)
            elif isinstance(current, list) and segment.isdigit() and int(segment) < len(current):
                current = current[int(segment)]
            else:
                return None
            if current is None:
                return None
        return current

    def resolve(self, value: Any) -> Any:
        """Follow `$ref`s until a value that is not a reference (None when one dangles); `parse` already
        proved every chain finite and short."""
        for _ in range(MAX_REF_CHAIN + 1):
            if not (isinstance(value, dict) and isinstance(value.get("$ref"), str)):
                return value
            value = self.pointer(value["$ref"])
        return None


def parse(source: bytes | str, *, max_bytes: int = DEFAULT_MAX_SPEC_BYTES) -> Document:
    """Source text → a `Document`, or `SpecRefused` with a one-line reason."""
    size = len(source.encode(errors="replace") if isinstance(source, str) else source)
    if size > max_bytes:
        raise SpecRefused(f"OpenAPI document is too large: {size} bytes (at most {max_bytes})")
    text = source if isinstance(source, str) else source.decode("utf-8", errors="replace")
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise SpecRefused("OpenAPI document is empty")
    data, refs = _load(text)
    if data is None or data == {}:
        raise SpecRefused("OpenAPI document is empty")
    if not isinstance(data, dict) or not _is_openapi_3(data.get("openapi")):
        raise SpecRefused("Only OpenAPI 3.x documents are supported. Swagger 2.x documents should be converted first.")
    if not isinstance(data.get("paths"), dict):
        raise SpecRefused("OpenAPI document has no paths defined")
    document = Document(data)
    _check_refs(document, refs)
    return document


def _load(text: str) -> tuple[Any, set[str]]:
    """The data and the distinct `$ref` strings it holds. JSON first when the text looks like JSON (upstream
    falls back to YAML, a superset, when that fails)."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            data = loads(text)
        except RecursionError:
            raise _too_deep() from None
        except ValueError:
            pass
        else:
            walk = _Walk(convert=False)
            return walk.value(data, 1), walk.refs
    try:
        loaded = yaml.load(text, Loader=_Loader)  # a subclass of the safe loader
    except RecursionError:
        raise _too_deep() from None
    except yaml.YAMLError as exc:
        raise SpecRefused(f"OpenAPI document is not valid JSON or YAML: {_yaml_reason(exc)}") from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise SpecRefused(f"OpenAPI document holds a value that cannot be read: {str(exc)[:120]}") from None
    walk = _Walk(convert=True)
    return walk.value(loaded, 1), walk.refs


class _Walk:
    """One bounded pass over loaded data: depth, volume and the `$ref`s; with `convert`, YAML's extra types
    become JSON (keys strings, odd scalars text).

    YAML aliases make a graph, not a tree: each shared node is converted once and stays shared, while the
    volume counts it every time it is reached, so an alias bomb is refused in time linear in its text.
    """

    def __init__(self, *, convert: bool) -> None:
        self.convert = convert
        self.visits = 0
        self.height = 0  # of the value last walked: how many container levels it holds
        self.refs: set[str] = set()
        self._shared: dict[int, tuple[Any, int, int]] = {}  # id → (converted, height, volume)
        self._open: set[int] = set()

    def value(self, value: Any, depth: int) -> Any:
        if not isinstance(value, dict | list | tuple | set | frozenset):
            self._count(1)
            self.height = 0
            return self.scalar(value) if self.convert else value
        if depth > MAX_DEPTH:
            raise _too_deep()
        key = id(value)
        if self.convert:
            shared = self._shared.get(key)
            if shared is not None:
                walked_before, self.height, volume = shared
                if depth + self.height - 1 > MAX_DEPTH:
                    raise _too_deep()
                self._count(volume)
                return walked_before
            if key in self._open:  # an alias of its own ancestor: infinitely deep
                raise _too_deep()
            self._open.add(key)
        before = self.visits
        self._count(1)
        height = 0
        converted: Any
        if isinstance(value, dict):
            ref = value.get("$ref")
            if isinstance(ref, str):
                self.refs.add(ref)
            converted = {} if self.convert else value
            for name, child in value.items():
                walked = self.value(child, depth + 1)
                height = max(height, self.height)
                if self.convert:
                    converted[self.key(name)] = walked
        else:
            converted = [] if self.convert else value
            for child in value:
                walked = self.value(child, depth + 1)
                height = max(height, self.height)
                if self.convert:
                    converted.append(walked)
        self.height = height + 1
        if self.convert:
            self._open.discard(key)
            self._shared[key] = (converted, self.height, self.visits - before)
        return converted

    def _count(self, volume: int) -> None:
        self.visits += volume
        if self.visits > MAX_NODES:
            raise SpecRefused(f"OpenAPI document has more than {MAX_NODES} values once YAML aliases are expanded")

    def key(self, key: Any) -> str:
        if isinstance(key, str):
            return key
        scalar = self.scalar(key)
        return scalar if isinstance(scalar, str) else _js_text(scalar)

    @staticmethod
    def scalar(value: Any) -> Any:
        if value is None or isinstance(value, str | bool | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else _js_text(value)
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        return str(value)


def _js_text(value: Any) -> str:
    """A YAML key or scalar as JavaScript would print it (`200` → "200", `true` → "true", `.inf` → "Infinity")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    return str(value)


def _too_deep() -> SpecRefused:
    return SpecRefused(f"OpenAPI document nests deeper than {MAX_DEPTH} levels")


def _yaml_reason(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{' '.join(exc.problem.split())}{where}"
    return type(exc).__name__


def _is_openapi_3(version: Any) -> bool:
    if isinstance(version, str):
        return version.strip().startswith("3.")
    # YAML reads an unquoted `openapi: 3.0` as a number.
    return isinstance(version, float) and 3 <= version < 4


def _check_refs(document: Document, refs: set[str]) -> None:
    """Every `$ref` local; every chain of pure references finite and short (a schema in between is fine:
    that is a recursive type, not a loop)."""
    for ref in sorted(refs):
        if not ref.startswith("#"):
            raise SpecRefused(f"External $ref is not supported (local #/ pointers only): {quoted(ref)}")
    finite: set[str] = set()
    for ref in sorted(refs):
        chain: list[str] = []
        current: str | None = ref
        while current is not None and current not in finite:
            if current in chain:
                raise SpecRefused(f"$ref loop: {' -> '.join(quoted(r) for r in chain[chain.index(current) :])}")
            if len(chain) >= MAX_REF_CHAIN:
                raise SpecRefused(f"$ref chain longer than {MAX_REF_CHAIN} from {quoted(ref)}")
            chain.append(current)
            target = document.pointer(current)
            current = target["$ref"] if isinstance(target, dict) and isinstance(target.get("$ref"), str) else None
        finite.update(chain)


def _segments(fragment: str) -> Iterator[str]:
    if not fragment:
        return
    for segment in fragment[1:].split("/"):
        yield segment.replace("~1", "/").replace("~0", "~")

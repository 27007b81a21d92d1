"""Upstream's tool-naming algorithm (`definitions.ts` `planToolPaths`), exactly, so agents find the same names.

A tool is `group.leaf`: the group from the first tag (else the first meaningful path segment), the leaf from
the operationId (else the method and the path). Collisions are resolved in three rounds, each applying only
to names still shared: a version segment, then the method, then a stable hash. The one deliberate
difference: paths sort by code point, not ICU `localeCompare` (deterministic everywhere).
"""

import json
import re

import attrs

_LOWER_THEN_UPPER = re.compile(r"([a-z0-9])([A-Z])")
_ACRONYM_THEN_WORD = re.compile(r"([A-Z]+)([A-Z][a-z0-9]+)")
_NON_ALPHANUMERIC = re.compile(r"[^A-Za-z0-9]+")
_VERSION_SEGMENT = re.compile(r"^v\d+(?:[._-]\d+)?$", re.IGNORECASE)
_OPERATION_ID_SEPARATORS = re.compile(r"[/.]")


def split_words(text: str) -> list[str]:
    spaced = _LOWER_THEN_UPPER.sub(r"\1 \2", text)
    spaced = _ACRONYM_THEN_WORD.sub(r"\1 \2", spaced)
    return [word for word in _NON_ALPHANUMERIC.sub(" ", spaced).split(" ") if word]


def camel(text: str) -> str:
    words = [word.lower() for word in split_words(text)]
    if not words:
        return "tool"
    return words[0] + "".join(word[:1].upper() + word[1:] for word in words[1:])


def pascal(text: str) -> str:
    camelled = camel(text)
    return camelled[:1].upper() + camelled[1:]


def is_version_segment(segment: str) -> bool:
    return bool(_VERSION_SEGMENT.match(segment))


def _ignored(segment: str) -> bool:
    return segment.lower() == "api" or (segment.startswith("{") and segment.endswith("}"))


def _segments(path: str) -> list[str]:
    return [segment for segment in path.split("/") if segment]


def operation_id(method: str, path: str, declared: object) -> str:
    """The spec's operationId, else one made of the method and the path."""
    if isinstance(declared, str):
        return declared
    made = re.sub(r"^_+|_+$", "", f"{method}_{_NON_ALPHANUMERIC.sub('_', path)}")
    return made or f"{method}_operation"


def string_hash(text: str) -> str:
    """JavaScript's `h = (h << 5) - h + charCode` over UTF-16 code units, int32, `abs`, base36, padded to 8."""
    encoded = text.encode("utf-16-le", errors="surrogatepass")
    value = 0
    for index in range(0, len(encoded), 2):
        unit = encoded[index] | (encoded[index + 1] << 8)
        value = ((value << 5) - value + unit) & 0xFFFFFFFF
    if value >= 0x80000000:
        value -= 0x100000000
    return _base36(abs(value)).rjust(8, "0")


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, remainder = divmod(number, 36)
        out = digits[remainder] + out
        if not number:
            return out


def _js_stringify(value: dict[str, str]) -> str:
    """`JSON.stringify` of an object of strings: no spaces, non-ASCII kept, lone surrogates escaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@attrs.frozen
class OperationNaming:
    """What naming needs of one operation (no schemas)."""

    operation_id: str
    method: str  # lowercase
    path: str  # the request path template (after `x-executor-pathTemplate`)
    tag: str | None = None  # the first non-blank tag
    explicit: str | None = None  # `x-executor-toolPath`, trimmed


@attrs.frozen
class PlannedName:
    tool_path: str
    index: int  # into the operations planned


@attrs.define
class _Candidate:
    index: int
    operation: OperationNaming
    prefix: str
    leaf: str

    @property
    def path(self) -> str:
        return f"{self.prefix}.{self.leaf}" if self.prefix else self.leaf


def group_of(operation: OperationNaming) -> str:
    if operation.tag is not None:
        return camel(operation.tag)
    for segment in _segments(operation.path):
        if not is_version_segment(segment) and not _ignored(segment):
            return camel(segment)
    return "root"


def leaf_of(operation: OperationNaming, group: str) -> str:
    parts = _OPERATION_ID_SEPARATORS.split(operation.operation_id)
    seed = operation.operation_id
    if len(parts) >= 2 and camel(parts[0]) == group:
        seed = " ".join(parts[1:])
    leaf = camel(seed)
    if split_words(seed) and leaf != group:
        return leaf
    relevant = [
        pascal(segment)
        for segment in _segments(operation.path)
        if not is_version_segment(segment) and not _ignored(segment) and camel(segment) != group
    ]
    return camel(operation.method + "".join(relevant)) if relevant else camel(operation.method + "Operation")


def plan_tool_paths(operations: list[OperationNaming]) -> list[PlannedName]:
    """Each operation's unique tool path, sorted by path (code point order)."""
    candidates = []
    for index, operation in enumerate(operations):
        if operation.explicit is not None:
            prefix, _, leaf = operation.explicit.rpartition(".")
            candidates.append(_Candidate(index, operation, prefix, leaf))
        else:
            group = group_of(operation)
            candidates.append(_Candidate(index, operation, group, leaf_of(operation, group)))
    for resolve in (_by_version, _by_method, _by_hash):
        for bucket in _collisions(candidates):
            for candidate in bucket:
                resolve(candidate)
    planned = [PlannedName(candidate.path, candidate.index) for candidate in candidates]
    return sorted(planned, key=lambda name: (name.tool_path, name.index))


def _collisions(candidates: list[_Candidate]) -> list[list[_Candidate]]:
    buckets: dict[str, list[_Candidate]] = {}
    for candidate in candidates:
        buckets.setdefault(candidate.path, []).append(candidate)
    return [bucket for bucket in buckets.values() if len(bucket) > 1]


def _by_version(candidate: _Candidate) -> None:
    version = next((s for s in _segments(candidate.operation.path) if is_version_segment(s)), None)
    if version is not None:
        candidate.prefix = f"{candidate.prefix}.{version}" if candidate.prefix else version


def _by_method(candidate: _Candidate) -> None:
    candidate.leaf = candidate.leaf + pascal(candidate.operation.method)


def _by_hash(candidate: _Candidate) -> None:
    operation = candidate.operation
    identity = _js_stringify(
        {"method": operation.method, "operationId": operation.operation_id, "path": operation.path}
    )
    candidate.leaf = f"{candidate.leaf}_{string_hash(identity)[:8]}"

"""Ranking tools for `tools.search`, following upstream's scoring so results read the same. No I/O.

Text is normalized (camelCase split; `_ . / : -` become spaces; lowercased) and tokenized. A query
with no namespace and no text finds nothing; a namespace with no text enumerates that integration.
Otherwise every field (path, integration, name, description) is scored against the query, weighted,
with bonuses for full coverage and for leading or exact matches.
"""

import re

import attrs

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[_./:\-]+")
_TOKEN = re.compile(r"[a-z0-9]+")
_WEIGHTS = (("path", 12), ("integration", 8), ("name", 10), ("description", 5))


@attrs.frozen
class Entry:
    path: str
    name: str
    integration: str
    description: str | None = None


@attrs.frozen
class Page:
    items: list[tuple[Entry, int]]
    total: int
    has_more: bool
    next_offset: int | None


def normalize(text: str) -> str:
    return _SEPARATORS.sub(" ", _CAMEL.sub(r"\1 \2", text)).lower().strip()


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(normalize(text))


def _is_token_prefix(prefix: list[str], whole: list[str]) -> bool:
    return len(prefix) <= len(whole) and whole[: len(prefix)] == prefix


def _field_score(field: str, query: str, query_tokens: list[str], weight: int) -> tuple[int, set[str], bool]:
    normalized = normalize(field)
    score, phrase = 0, False
    if normalized == query:
        score, phrase = 14 * weight, True
    elif normalized.startswith(query):
        score, phrase = 9 * weight, True
    elif query in normalized:
        score, phrase = 6 * weight, True
    field_tokens = _TOKEN.findall(normalized)
    matched: set[str] = set()
    for token in query_tokens:
        if token in field_tokens:
            score += 4 * weight
        elif any(t.startswith(token) or token.startswith(t) for t in field_tokens):
            score += 2 * weight
        elif token in normalized:
            score += weight
        else:
            continue
        matched.add(token)
    return score, matched, phrase


def score(entry: Entry, query: str) -> int | None:
    """The entry's score for a non-empty query, or None when it does not match well enough."""
    query = normalize(query)
    query_tokens = _TOKEN.findall(query)
    if not query_tokens:
        return None
    total, matched, phrase = 0, set(), False
    for field, weight in _WEIGHTS:
        value = getattr(entry, field)
        if value:
            field_score, field_matched, field_phrase = _field_score(value, query, query_tokens, weight)
            total += field_score
            matched |= field_matched
            phrase = phrase or field_phrase
    coverage = len(matched) / len(set(query_tokens))
    required = 1.0 if len(query_tokens) <= 2 else 0.6
    if coverage < required and not phrase:
        return None
    total += 25 if coverage == 1 else round(coverage * 10)
    lead = [tokens(entry.path)[:1], tokens(entry.name)[:1]]
    if [query_tokens[0]] in lead:
        total += 8
    if query in (normalize(entry.path), normalize(entry.name)):
        total += 20
    return total


def search(entries: list[Entry], query: str, namespace: str | None, limit: int, offset: int) -> Page:
    query = query.strip()
    if not query and not namespace:
        return Page(items=[], total=0, has_more=False, next_offset=None)
    if not query:
        wanted = (namespace or "").strip()
        ranked = [(entry, 0) for entry in sorted(entries, key=lambda e: e.path) if entry.integration == wanted]
    else:
        candidates = entries
        if namespace:
            space = tokens(namespace)
            candidates = [
                e
                for e in entries
                if _is_token_prefix(space, tokens(e.integration)) or _is_token_prefix(space, tokens(e.path))
            ]
        scored = [(entry, s) for entry in candidates if (s := score(entry, query)) is not None]
        ranked = sorted(scored, key=lambda pair: (-pair[1], pair[0].path))
    page = ranked[offset : offset + limit]
    consumed = offset + len(page)
    has_more = consumed < len(ranked)
    return Page(items=page, total=len(ranked), has_more=has_more, next_offset=consumed if has_more else None)

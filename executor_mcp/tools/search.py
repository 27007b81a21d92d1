"""Ranking tools for `tools.search`, following upstream's scoring so results read the same. No I/O.

Text is normalized (camelCase split; `_ . / : -` become spaces; lowercased) and tokenized. A query
with no namespace and no text finds nothing; a namespace with no text enumerates that integration.
Otherwise every field (path, integration, name, description) is scored against the query, weighted,
with bonuses for full coverage and for leading or exact matches.

The query comes from sandboxed code, so its cost must not be its author's to choose: a query is bounded
in characters and words, and a `SearchIndex` normalizes every entry once per catalog. A query then looks
its words up in the index (which entries hold a token containing the word, or a token the word starts
with) and scores only the entries that can reach the coverage upstream requires, with one padded string
per field so each word costs a few substring checks, however often it repeats.
"""

import bisect
import heapq
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, compress, repeat
from operator import contains

import attrs

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[_./:\-]+")
_TOKEN = re.compile(r"[a-z0-9]+")
_WEIGHTS = (("path", 12), ("integration", 8), ("name", 10), ("description", 5))
# Above every character a token can hold ([a-z0-9]), so `word + _AFTER` bounds the strings starting with it.
_AFTER = "\x7f"

MAX_QUERY_LENGTH = 500
MAX_QUERY_WORDS = 32
MAX_NAMESPACE_LENGTH = 200


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


class QueryTooLarge(ValueError):
    """A query or namespace past the bounds that keep one search cheap; the message names the bound."""


def normalize(text: str) -> str:
    return _SEPARATORS.sub(" ", _CAMEL.sub(" ", text)).lower().strip()


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(normalize(text))


def check_query(query: str, namespace: str | None) -> list[str]:
    """The query's tokens, once the query and namespace are known to be within their bounds."""
    if len(query) > MAX_QUERY_LENGTH:
        raise QueryTooLarge(f"query must be at most {MAX_QUERY_LENGTH} characters (got {len(query)})")
    if namespace is not None and len(namespace) > MAX_NAMESPACE_LENGTH:
        raise QueryTooLarge(f"namespace must be at most {MAX_NAMESPACE_LENGTH} characters (got {len(namespace)})")
    words = tokens(query)
    if len(words) > MAX_QUERY_WORDS:
        raise QueryTooLarge(f"query must be at most {MAX_QUERY_WORDS} words (got {len(words)})")
    return words


@attrs.frozen
class _Word:
    """A distinct query token, with the patterns that tell its match level in a padded field."""

    token: str
    count: int  # how often the query repeats it: upstream scores every repetition
    whole: str  # ` t `: the field has the token itself
    start: str  # ` t`: a field token starts with it
    shorter: tuple[str, ...]  # ` p ` for each catalog token p that is a proper prefix of it


def _padded(normalized: str) -> str:
    """The field's tokens as ` a b c `: a token-level relation to a word is then one substring check."""
    return f" {' '.join(_TOKEN.findall(normalized))} "


class _PrefixRanges:
    """Entries ordered by a token tuple, so the entries whose tuple starts with some tokens are one slice."""

    def __init__(self, keyed: Iterable[tuple[tuple[str, ...], int]]) -> None:
        ordered = sorted(keyed)
        self._keys = [key for key, _ in ordered]
        self._ids = [entry_id for _, entry_id in ordered]

    def starting_with(self, prefix: tuple[str, ...]) -> list[int]:
        low = bisect.bisect_left(self._keys, prefix)
        high = bisect.bisect_left(self._keys, (*prefix, _AFTER), lo=low) if prefix else len(self._keys)
        return self._ids[low:high]


class _SortedValues:
    """A field's non-empty normalized values in order, so the values starting with a query are one run."""

    def __init__(self, normalized: list[str]) -> None:
        ordered = sorted((text, entry_id) for entry_id, text in enumerate(normalized) if text)
        self._texts = [text for text, _ in ordered]
        self._ids = [entry_id for _, entry_id in ordered]

    def starting_with(self, prefix: str) -> Iterator[tuple[str, int]]:
        position = bisect.bisect_left(self._texts, prefix)
        while position < len(self._texts) and self._texts[position].startswith(prefix):
            yield self._texts[position], self._ids[position]
            position += 1


class SearchIndex:
    """A catalog's entries normalized once, with an inverted index from tokens (and their substrings) to entries.

    Built once per catalog, in time and memory linear in the catalog's text. A search finds the entries its
    words can match through the index, then scores only those, field by field and distinct word by distinct
    word, with substring checks on the padded fields: nothing is normalized per call, and the work follows
    the entries the words match, not the length of the query.
    """

    def __init__(self, entries: Sequence[Entry]) -> None:
        self._entries = list(entries)
        self._paths = [entry.path for entry in self._entries]
        # Per field, in `_WEIGHTS` order: each entry's normalized value and padded tokens ("" when empty).
        self._normalized: list[list[str]] = []
        self._padded: list[list[str]] = []
        self._ordered: list[_SortedValues] = []
        for field, _ in _WEIGHTS:
            values = [getattr(entry, field) or "" for entry in self._entries]
            normalized = [normalize(value) if value else "" for value in values]
            self._normalized.append(normalized)
            self._padded.append(
                [_padded(text) if value else "" for value, text in zip(values, normalized, strict=True)]
            )
            self._ordered.append(_SortedValues(normalized))
        path_tokens = [_TOKEN.findall(text) for text in self._normalized[0]]
        names = [normalize(entry.name) for entry in self._entries]
        name_tokens = [_TOKEN.findall(name) for name in names]
        # The entries a first path or name token, or a whole normalized path or name, earns a bonus.
        leading: dict[str, set[int]] = {}
        exact: dict[str, set[int]] = {}
        for entry_id, (path, name) in enumerate(zip(path_tokens, name_tokens, strict=True)):
            for lead in path[:1] + name[:1]:
                leading.setdefault(lead, set()).add(entry_id)
            for text in (self._normalized[0][entry_id], names[entry_id]):
                exact.setdefault(text, set()).add(entry_id)
        self._leading = {token: tuple(ids) for token, ids in leading.items()}
        self._exact = {text: tuple(ids) for text, ids in exact.items()}
        # Per field, each token's entries: the entries holding a word itself, without a pass over candidates.
        self._holding: list[dict[str, list[int]]] = []
        for padded in self._padded:
            holding: dict[str, list[int]] = {}
            for entry_id, text in enumerate(padded):
                for token in set(text.split()):
                    holding.setdefault(token, []).append(entry_id)
            self._holding.append(holding)
        # Over all fields, each token's entries: what the coverage rule counts.
        vocabulary: dict[str, set[int]] = {}
        for holding in self._holding:
            for token, holders in holding.items():
                vocabulary.setdefault(token, set()).update(holders)
        self._token_ids = {token: token_id for token_id, token in enumerate(vocabulary)}
        self._postings = [tuple(ids) for ids in vocabulary.values()]
        # Every suffix of every token, sorted: the tokens containing a word are the suffixes starting with it.
        suffixes = sorted(
            (token[start:], token_id) for token, token_id in self._token_ids.items() for start in range(len(token))
        )
        self._suffixes = [suffix for suffix, _ in suffixes]
        self._suffix_owners = [token_id for _, token_id in suffixes]
        self._by_integration: dict[str, list[int]] = {}
        for entry_id in sorted(range(len(self._entries)), key=lambda i: (self._entries[i].path, i)):
            self._by_integration.setdefault(self._entries[entry_id].integration, []).append(entry_id)
        self._integration_ranges = _PrefixRanges(
            (tuple(tokens(entry.integration)), i) for i, entry in enumerate(self._entries)
        )
        self._path_ranges = _PrefixRanges((tuple(path), i) for i, path in enumerate(path_tokens))

    def __len__(self) -> int:
        return len(self._entries)

    def search(self, query: str, namespace: str | None, limit: int, offset: int) -> Page:
        """Upstream's ranking of the entries for `query` within `namespace`; `QueryTooLarge` past the bounds."""
        query_tokens = check_query(query, namespace)
        if not query.strip():
            if not namespace:
                return Page(items=[], total=0, has_more=False, next_offset=None)
            ranked = [(self._entries[i], 0) for i in self._by_integration.get(namespace.strip(), [])]
            return _paged(ranked[offset : offset + limit], len(ranked), offset)
        if not query_tokens:
            return _paged([], 0, offset)
        matched = self._coverage(query_tokens)
        if namespace:
            space = tuple(tokens(namespace))
            inside = {*self._integration_ranges.starting_with(space), *self._path_ranges.starting_with(space)}
            matched = {entry_id: count for entry_id, count in matched.items() if entry_id in inside}
        totals = self._scores(normalize(query), query_tokens, matched)
        end = offset + limit
        paths = self._paths
        keyed = [(-total, paths[entry_id], entry_id) for entry_id, total in totals.items()]
        ordered = heapq.nsmallest(end, keyed) if end < len(keyed) else sorted(keyed)
        page = [(self._entries[entry_id], -negated) for negated, _, entry_id in ordered[offset:end]]
        return _paged(page, len(keyed), offset)

    def _coverage(self, query_tokens: list[str]) -> dict[int, int]:
        """Each entry with the coverage upstream requires, and how many distinct query tokens it matches.

        A token matches an entry when one of the entry's tokens contains it or is a prefix of it. An exact
        phrase match needs no separate case: a phrase inside a field puts every token inside that field.
        """
        distinct = list(dict.fromkeys(query_tokens))
        matches = sorted((self._matching(token) for token in distinct), key=len)
        if len(query_tokens) <= 2:  # upstream wants every token of a short query
            common = set(matches[0]).intersection(*matches[1:])
            return dict.fromkeys(common, len(distinct))
        counts = Counter(chain.from_iterable(matches))
        enough = min(count for count in range(len(distinct) + 1) if count / len(distinct) >= 0.6)
        return {entry_id: count for entry_id, count in counts.items() if count >= enough}

    def _matching(self, token: str) -> tuple[int, ...] | set[int]:
        """The entries holding a token that contains `token` or is a proper prefix of it."""
        low = bisect.bisect_left(self._suffixes, token)
        high = bisect.bisect_left(self._suffixes, token + _AFTER, lo=low)
        token_ids = set(self._suffix_owners[low:high])
        token_ids.update(self._token_ids[token[:end]] for end in range(1, len(token)) if token[:end] in self._token_ids)
        if len(token_ids) == 1:
            return self._postings[token_ids.pop()]
        return set().union(*map(self._postings.__getitem__, token_ids))

    def _scores(self, query: str, query_tokens: list[str], matched: dict[int, int]) -> dict[int, int]:
        """Upstream's score of each matched entry: fields, words, coverage and bonuses.

        Upstream's 4, 2 or 1 points per word and field are counted as 1 + 1 + 2 (a prefix relation implies a
        substring or a shorter token; the token itself implies a prefix relation): containment and prefixes
        are passes of substring checks over the candidates, the token itself comes from the field's postings
        when they are the shorter list, and the points are added per distinct amount in bulk.
        """
        words = [self._word(token, count) for token, count in Counter(query_tokens).items()]
        distinct = len(words)
        totals = {
            entry_id: 25 if count == distinct else round(count / distinct * 10) for entry_id, count in matched.items()
        }
        ids = list(totals)
        awarded: dict[int, list[int]] = {}
        for (_, weight), normalized, padded, ordered, holding in zip(
            _WEIGHTS, self._normalized, self._padded, self._ordered, self._holding, strict=True
        ):
            fields = [padded[entry_id] for entry_id in ids]
            insides = []
            for word in words:
                token, start = word.token, word.start
                inside = _having(ids, fields, token)
                related = _having(inside, map(padded.__getitem__, inside), start)
                if word.shorter:
                    for prefix in word.shorter:
                        related.extend(_having(ids, fields, prefix))
                    related = list(set(related))
                    inside = list(set(inside).union(related))
                holders = holding.get(token, ())
                if len(holders) < len(related):
                    exact = [entry_id for entry_id in holders if entry_id in totals]
                else:
                    exact = _having(related, map(padded.__getitem__, related), word.whole)
                points = weight * word.count
                awarded.setdefault(points, []).extend(inside)
                awarded[points].extend(related)
                awarded.setdefault(2 * points, []).extend(exact)
                insides.append(inside)
            # Upstream's 14, 9 or 6 points for the phrase, as 6 + 3 + 5: equality implies a prefix, a prefix
            # implies containment. A one-word query's phrase is that word, so it is inside where the word is;
            # the entries a field starts with come from the sorted values.
            if len(words) == 1 and query == words[0].token and not words[0].shorter:
                contained = insides[0]
            else:
                contained = _having(ids, map(normalized.__getitem__, ids), query)
            awarded.setdefault(6 * weight, []).extend(contained)
            for text, entry_id in ordered.starting_with(query):
                if entry_id in totals:
                    totals[entry_id] += 8 * weight if text == query else 3 * weight
        for points, awarded_ids in awarded.items():
            for entry_id, times in Counter(awarded_ids).items():
                totals[entry_id] += points * times
        for entry_id in self._leading.get(query_tokens[0], ()):
            if entry_id in totals:
                totals[entry_id] += 8
        for entry_id in self._exact.get(query, ()):
            if entry_id in totals:
                totals[entry_id] += 20
        return totals

    def _word(self, token: str, count: int) -> _Word:
        shorter = tuple(f" {token[:end]} " for end in range(1, len(token)) if token[:end] in self._token_ids)
        return _Word(token, count, f" {token} ", f" {token}", shorter)


def _having(ids: list[int], texts: Iterable[str], part: str) -> list[int]:
    """The ids whose text (in the same order) contains `part`, tested at C speed: this is the hot loop."""
    return list(compress(ids, map(contains, texts, repeat(part))))


def _paged(items: list[tuple[Entry, int]], total: int, offset: int) -> Page:
    consumed = offset + len(items)
    has_more = consumed < total
    return Page(items=items, total=total, has_more=has_more, next_offset=consumed if has_more else None)


def score(entry: Entry, query: str) -> int | None:
    """The entry's score for a non-empty query, or None when it does not match well enough."""
    found = SearchIndex([entry]).search(query, None, 1, 0).items
    return found[0][1] if found else None


def search(entries: Sequence[Entry], query: str, namespace: str | None, limit: int, offset: int) -> Page:
    """A search over entries indexed for this one call; a catalog keeps its `SearchIndex` instead."""
    return SearchIndex(entries).search(query, namespace, limit, offset)

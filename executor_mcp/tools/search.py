"""Ranking tools for `tools.search`, following upstream's scoring so results read the same. No I/O.

Text is normalized (camelCase split; `_ . / : -` become spaces; lowercased) and tokenized. A query
with no namespace and no text finds nothing; a namespace with no text enumerates that integration.
Otherwise every field (path, integration, name, description) is scored against the query, weighted,
with bonuses for full coverage and for leading or exact matches.

The query comes from sandboxed code, so its cost must not be its author's to choose: a query is bounded
in characters and words, and a `SearchIndex` normalizes every distinct field value once per catalog. A
query then looks its words up in the index (which entries hold a token containing the word, or a token
the word starts with) and scores only the entries that can reach the coverage upstream requires, with
one padded string per distinct value so each word costs a few substring checks per distinct text, however
often the query repeats it and however often the catalog does.
"""

import bisect
import heapq
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain, compress, repeat
from operator import add, contains, ge, mul, neg

import attrs

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[_./:\-]+")
_TOKEN = re.compile(r"[a-z0-9]+")
# Upstream's weight of each field: its points per level a word reaches there.
_PATH_WEIGHT, _INTEGRATION_WEIGHT, _NAME_WEIGHT, _DESCRIPTION_WEIGHT = 12, 8, 10, 5
# Above every character a token can hold ([a-z0-9]), so `word + _AFTER` bounds the strings starting with it.
_AFTER = "\x7f"
# The tail of a path that is not `<head>.<name>`: no value, so no points.
_NO_TAIL = -1

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
    start: str  # ` t`: a field token starts with it
    shorter: tuple[str, ...]  # each catalog token that is a proper prefix of it


@attrs.frozen
class _Reach:
    """The values a word reaches in one field, as upstream's 1, 2 or 4 points per weight counted 1 + 1 + 2.

    `inside`: a token contains the word or is a proper prefix of it (1); `related`: a token starts with
    it or is such a prefix (1 more); `exact`: a token is the word (2 more). Each is a subset of the one before.
    """

    inside: list[int]
    related: list[int]
    exact: list[int]


@attrs.frozen
class _Phrase:
    """The values holding the whole normalized query, starting with it, and equal to it: upstream's 6, 9
    or 14 points per weight for the phrase, counted as 6 + 3 + 5. Each is a subset of the one before."""

    contained: list[int]
    starting: Iterable[int]
    equal: Iterable[int]


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
        ordered = sorted((text, value_id) for value_id, text in enumerate(normalized) if text)
        self._texts = [text for text, _ in ordered]
        self._ids = [value_id for _, value_id in ordered]

    def starting_with(self, prefix: str) -> tuple[list[int], list[int]]:
        """The values starting with `prefix`, and those equal to it: two slices of one run, found by bisection."""
        low = bisect.bisect_left(self._texts, prefix)
        equal = bisect.bisect_right(self._texts, prefix, lo=low)
        high = bisect.bisect_left(self._texts, True, lo=equal, key=lambda text: not text.startswith(prefix))
        return self._ids[low:high], self._ids[low:equal]


class _Field:
    """One field of every entry, as its distinct normalized values and each entry's value among them.

    Catalogs repeat themselves: every connection to an integration lists the same tools, so the names,
    integrations and descriptions of ten thousand entries are a thousand distinct texts. Normalizing, and
    per query scoring, each distinct text once costs what the distinct texts cost, not what the entries do;
    a catalog without repetition costs what it did, per value instead of per entry.
    """

    def __init__(self, raw: Iterable[str | None]) -> None:
        by_raw: dict[str, int] = {}
        by_text: dict[str, int] = {}
        self.normalized: list[str] = []  # per value id; "" for an empty field, which then matches nothing
        self.of_entry: list[int] = []  # per entry id, its value id
        for value in raw:
            value = value or ""
            value_id = by_raw.get(value)
            if value_id is None:
                text = normalize(value)
                value_id = by_raw[value] = by_text.setdefault(text, len(self.normalized))
                if value_id == len(self.normalized):
                    self.normalized.append(text)
            self.of_entry.append(value_id)
        # No two entries share a value (paths, or any field of a catalog that does not repeat itself): the
        # values of distinct entries are then distinct, with no set to find them.
        self.distinct = len(self.normalized) == len(self.of_entry)
        self.padded = [_padded(text) for text in self.normalized]
        self.ordered = _SortedValues(self.normalized)
        # Each token's values: the values holding a word itself, without a pass over the candidates.
        self.holding: dict[str, list[int]] = {}
        for value_id, text in enumerate(self.padded):
            for token in set(text.split()):
                self.holding.setdefault(token, []).append(value_id)

    def reach(self, words: list[_Word], value_ids: list[int]) -> list[_Reach]:
        """What each word reaches among `value_ids`: passes of substring checks over their padded texts, and
        the field's postings for a whole token (the word, or a shorter token) when they are the shorter list."""
        if not words:
            return []
        padded = self.padded
        texts = list(map(padded.__getitem__, value_ids))
        candidates: set[int] | None = None  # built once some token's postings are the shorter list

        def holding(token: str, among: list[int]) -> list[int]:
            """Which of `among` hold `token` itself: a pass over them, or the token's postings when shorter
            (the candidates holding the token are then all among `among`, as they are where it is asked)."""
            nonlocal candidates
            holders = self.holding.get(token, ())
            if len(holders) >= len(among):
                return _having(among, map(padded.__getitem__, among), f" {token} ")
            candidates = set(value_ids) if candidates is None else candidates
            return [value_id for value_id in holders if value_id in candidates]

        reaches = []
        for word in words:
            inside = _having(value_ids, texts, word.token)
            related = _having(inside, map(padded.__getitem__, inside), word.start)
            if word.shorter:
                for prefix in word.shorter:
                    related.extend(holding(prefix, value_ids))
                related = list(set(related))
                inside = list(set(inside).union(related))
            reaches.append(_Reach(inside, related, holding(word.token, related)))
        return reaches

    def phrase(self, query: str, words: list[_Word], value_ids: list[int], reaches: list[_Reach] | None) -> _Phrase:
        """Which of `value_ids` hold the phrase; those starting with it come from the sorted values. A one-word
        query's phrase is that word, so it is inside where the word is (unless a shorter token also counts
        as reaching the word)."""
        if reaches is not None and len(words) == 1 and query == words[0].token and not words[0].shorter:
            contained = reaches[0].inside
        else:
            contained = _having(value_ids, map(self.normalized.__getitem__, value_ids), query)
        if not contained:
            return _Phrase(contained, (), ())
        starting, equal = self.ordered.starting_with(query)
        candidates = set(contained)
        return _Phrase(contained, candidates.intersection(starting), candidates.intersection(equal))


def _tally(awards: Iterable[tuple[int, _Reach]], phrase: _Phrase | None) -> dict[int, int]:
    """Each value's points per unit of its field's weight, from its words' reaches (each with how often the
    query repeats the word) and the phrase.

    A value earns one unit per level a word of count 1 reaches and per phrase level, so its units are how
    often it occurs in those lists: counted at C speed, per distinct word count (one, but for repeated words).
    """
    listed: dict[int, list[int]] = {}
    for count, reach in awards:
        ids = listed.setdefault(count, [])
        ids += reach.inside
        ids += reach.related
        ids += reach.exact * 2
    if phrase is not None:
        ids = listed.setdefault(1, [])
        ids += phrase.contained * 6
        ids += [*phrase.starting] * 3
        ids += [*phrase.equal] * 5
    tallies = [(count, Counter(ids)) for count, ids in listed.items()]
    if len(tallies) == 1 and tallies[0][0] == 1:
        return tallies[0][1]
    units: dict[int, int] = {}
    for count, tally in tallies:
        for value_id, times in tally.items():
            units[value_id] = units.get(value_id, 0) + count * times
    return units


def _values(of: list[int], ids: list[int], distinct: bool = False) -> tuple[list[int], list[int]]:
    """The value of each of `ids` (in their order) in the mapping `of`, and the distinct values among them
    (the same list when `of` maps no two ids to one value)."""
    values = list(map(of.__getitem__, ids))
    return values, values if distinct else list(set(values))


def _plus(totals: list[int], units: dict[int, int], weight: int, of_entries: list[int]) -> list[int]:
    """`totals` with each entry's value's units, at `weight` points each, added in bulk."""
    if not units:
        return totals
    return list(map(add, totals, map(mul, map(units.get, of_entries, repeat(0)), repeat(weight))))


class SearchIndex:
    """A catalog's entries normalized once, with an inverted index from tokens (and their substrings) to entries.

    Built once per catalog, in time and memory linear in the catalog's distinct text. A search finds the
    entries its words can match through the index, then scores the distinct field values of only those,
    distinct word by distinct word, with substring checks on padded values, and adds up each entry's
    values: nothing is normalized per call, and the work follows the distinct texts the words match, not
    the length of the query nor how often the catalog repeats a text.

    Paths are the one field that never repeats (a connected tool's path names its connection), but a path
    is mostly its name: `github.org.account0.issues.create` is the head `github.org.account0`, of which a
    catalog has one per connection, then `.` and the name `issues.create`. A word's level in the path is
    then the better of its levels in the head and in the name, so a word no candidate's head reaches (the
    usual case) scores in the path exactly as in the name, at the path's weight, and only the words some
    head does reach are scored on whole paths.
    """

    def __init__(self, entries: Sequence[Entry]) -> None:
        self._entries = list(entries)
        self._paths = [entry.path for entry in self._entries]
        self._path = _Field(self._paths)
        self._integration = _Field(entry.integration for entry in self._entries)
        self._name = _Field(entry.name for entry in self._entries)
        self._description = _Field(entry.description for entry in self._entries)
        # Each path's head and, when the path is `<head>.<name>` (or just the name), its name's value id: the
        # path's tokens are then the head's and the name's ('.' separates tokens and camelCase, both ways).
        heads: list[str] = []
        self._tail_of: list[int] = []
        for entry, name_id in zip(self._entries, self._name.of_entry, strict=True):
            path, name = entry.path, entry.name
            if name and (path == name or path.endswith(f".{name}")):
                heads.append(path[: len(path) - len(name) - 1] if path != name else "")
                self._tail_of.append(name_id)
            else:
                heads.append(path)
                self._tail_of.append(_NO_TAIL)
        self._head = _Field(heads)
        # An entry's profile: everything it is scored on but its path's head and phrase, which connections to
        # one integration share. The per-entry work of a search is then a profile's and a path's points.
        fields = (self._integration.of_entry, self._name.of_entry, self._description.of_entry, self._tail_of)
        profiles: dict[tuple[int, int, int, int], int] = {}
        self._profile_of = [profiles.setdefault(profile, len(profiles)) for profile in zip(*fields, strict=True)]
        # A catalog that does not repeat itself has one profile per entry: its searches skip the indirection.
        self._shared_profiles = len(profiles) < len(self._profile_of)
        self._profile_values = [list(values) for values in zip(*profiles, strict=True)] or [[], [], [], []]
        path_tokens = [text.split() for text in self._path.padded]
        name_tokens = [text.split() for text in self._name.padded]
        # The entries a first path or name token, or a whole normalized path or name, earns a bonus.
        leading: dict[str, set[int]] = {}
        exact: dict[str, set[int]] = {}
        for entry_id, (path_id, name_id) in enumerate(zip(self._path.of_entry, self._name.of_entry, strict=True)):
            for lead in path_tokens[path_id][:1] + name_tokens[name_id][:1]:
                leading.setdefault(lead, set()).add(entry_id)
            for text in (self._path.normalized[path_id], self._name.normalized[name_id]):
                exact.setdefault(text, set()).add(entry_id)
        self._leading = {token: tuple(ids) for token, ids in leading.items()}
        self._exact = {text: tuple(ids) for text, ids in exact.items()}
        # Over all fields, each token's entries: what the coverage rule counts.
        vocabulary: dict[str, set[int]] = {}
        for field in (self._path, self._integration, self._name, self._description):
            entries_of: list[list[int]] = [[] for _ in field.normalized]
            for entry_id, value_id in enumerate(field.of_entry):
                entries_of[value_id].append(entry_id)
            for token, holders in field.holding.items():
                vocabulary.setdefault(token, set()).update(*map(entries_of.__getitem__, holders))
        self._token_ids = {token: token_id for token_id, token in enumerate(vocabulary)}
        self._postings = [tuple(ids) for ids in vocabulary.values()]
        # Every suffix of every token, sorted: the tokens containing a word are the suffixes starting with it.
        suffixes = sorted(
            (token[start:], token_id) for token, token_id in self._token_ids.items() for start in range(len(token))
        )
        self._suffixes = [suffix for suffix, _ in suffixes]
        self._suffix_owners = [token_id for _, token_id in suffixes]
        self._by_integration: dict[str, list[int]] = {}
        for entry_id in sorted(range(len(self._entries)), key=lambda i: (self._paths[i], i)):
            self._by_integration.setdefault(self._entries[entry_id].integration, []).append(entry_id)
        integration_tokens = [tuple(text.split()) for text in self._integration.padded]
        self._integration_ranges = _PrefixRanges(
            (integration_tokens[value_id], entry_id) for entry_id, value_id in enumerate(self._integration.of_entry)
        )
        self._path_ranges = _PrefixRanges(
            (tuple(path_tokens[value_id]), entry_id) for entry_id, value_id in enumerate(self._path.of_entry)
        )

    def __len__(self) -> int:
        return len(self._entries)

    def search(self, query: str, namespace: str | None, limit: int, offset: int) -> Page:
        """Upstream's ranking of the entries for `query` within `namespace`; `QueryTooLarge` past the bounds."""
        query_tokens = check_query(query, namespace)
        if not query.strip():
            if not namespace:
                return Page(items=[], total=0, has_more=False, next_offset=None)
            # Only the page's entries are paired with their score: a whole integration's pairs would be garbage.
            enumerated = self._by_integration.get(namespace.strip(), [])
            page = [(self._entries[entry_id], 0) for entry_id in enumerated[offset : offset + limit]]
            return _paged(page, len(enumerated), offset)
        if not query_tokens:
            return _paged([], 0, offset)
        matched = self._coverage(query_tokens)
        if namespace:
            space = tuple(tokens(namespace))
            inside = {*self._integration_ranges.starting_with(space), *self._path_ranges.starting_with(space)}
            matched = {entry_id: count for entry_id, count in matched.items() if entry_id in inside}
        if not matched:
            return _paged([], 0, offset)
        ids = list(matched)
        totals = self._scores(normalize(query), query_tokens, ids, list(matched.values()))
        end = offset + limit
        if end <= 0:
            return _paged([], len(matched), offset)
        if end < len(ids):
            # Only the entries scoring at least the `end`-th best score can be among the first `end`: order
            # those alone (ties included), then keep `end` of them.
            lowest = heapq.nlargest(end, totals)[-1]
            reaching = list(map(ge, totals, repeat(lowest)))
            ids, totals = list(compress(ids, reaching)), list(compress(totals, reaching))
        ordered = sorted(zip(map(neg, totals), map(self._paths.__getitem__, ids), ids, strict=True))[:end]
        page = [(self._entries[entry_id], -negated) for negated, _, entry_id in ordered[offset:end]]
        return _paged(page, len(matched), offset)

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

    def _scores(self, query: str, query_tokens: list[str], ids: list[int], counts: list[int]) -> list[int]:
        """Upstream's score of each entry of `ids` (matching `counts` distinct query tokens), in that order:
        its coverage bonus, its profile's and its path's points (each distinct value scored once), its bonuses."""
        words = [self._word(token, count) for token, count in Counter(query_tokens).items()]
        counts_of = [word.count for word in words]
        distinct = len(words)
        coverage = {count: 25 if count == distinct else round(count / distinct * 10) for count in set(counts)}
        totals = list(map(coverage.__getitem__, counts))
        # The words no candidate's head reaches score in the path as in its name (its tail), the others on
        # whole paths; the phrase is always the whole path's.
        head_ids = list({*map(self._head.of_entry.__getitem__, ids)})
        on_heads = [bool(reach.inside) for reach in self._head.reach(words, head_ids)]
        of_entries, profile_ids = _values(self._profile_of, ids) if self._shared_profiles else (ids, ids)
        integrations, names, descriptions, tails = self._profile_values
        profile_totals = [0] * len(profile_ids)
        for field, weight, of_profiles in (
            (self._integration, _INTEGRATION_WEIGHT, integrations),
            (self._name, _NAME_WEIGHT, names),
            (self._description, _DESCRIPTION_WEIGHT, descriptions),
        ):
            of_values, value_ids = _values(of_profiles, profile_ids, field.distinct)
            reaches = field.reach(words, value_ids)
            units = _tally(zip(counts_of, reaches, strict=True), field.phrase(query, words, value_ids, reaches))
            profile_totals = _plus(profile_totals, units, weight, of_values)
            if field is self._name:
                in_tails = [
                    (count, reach) for count, reach, on in zip(counts_of, reaches, on_heads, strict=True) if not on
                ]
                of_tails = list(map(tails.__getitem__, profile_ids))
                profile_totals = _plus(profile_totals, _tally(in_tails, None), _PATH_WEIGHT, of_tails)
        if self._shared_profiles:
            profile_points = dict(zip(profile_ids, profile_totals, strict=True))
            profile_totals = list(map(profile_points.__getitem__, of_entries))
        totals = list(map(add, totals, profile_totals))
        of_entries, path_ids = _values(self._path.of_entry, ids, self._path.distinct)
        whole = [word for word, on_head in zip(words, on_heads, strict=True) if on_head]
        path_reaches = self._path.reach(whole, path_ids)
        awards = zip([word.count for word in whole], path_reaches, strict=True)
        # Where every word was scored on whole paths, the phrase may take a one-word query's reach as well.
        phrase = self._path.phrase(query, words, path_ids, path_reaches if len(whole) == len(words) else None)
        units = _tally(awards, phrase)
        totals = _plus(totals, units, _PATH_WEIGHT, of_entries)
        bonuses = dict.fromkeys(self._leading.get(query_tokens[0], ()), 8)
        for entry_id in self._exact.get(query, ()):
            bonuses[entry_id] = bonuses.get(entry_id, 0) + 20
        return _plus(totals, bonuses, 1, ids)

    def _word(self, token: str, count: int) -> _Word:
        shorter = tuple(token[:end] for end in range(1, len(token)) if token[:end] in self._token_ids)
        return _Word(token, count, f" {token}", shorter)


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

"""Ranking for `tools.search`, against upstream's algorithm (contract §4, "Search algorithm")."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor_mcp.tools.search import (
    MAX_NAMESPACE_LENGTH,
    MAX_QUERY_LENGTH,
    MAX_QUERY_WORDS,
    Entry,
    Page,
    QueryTooLarge,
    SearchIndex,
    normalize,
    score,
    search,
    tokens,
)

CREATE = Entry("github.issues.create", "issues.create", "github", "Create an issue in a repository")
LIST = Entry("github.issues.list", "issues.list", "github", "List issues")
REPO = Entry("github.repos.get", "repos.get", "github", "Get a repository")
GITLAB_CREATE = Entry("gitlab.issues.create", "issues.create", "gitlab", "Create an issue in a project")
POST = Entry("slack.chat.postMessage", "chat.postMessage", "slack", "Post a message to a channel")
CORE = Entry("executor.coreTools.integrations.list", "integrations.list", "executor", "List the integrations")
ENTRIES = [POST, CORE, GITLAB_CREATE, REPO, LIST, CREATE]


def paths(query: str, namespace: str | None = None, limit: int = 20, offset: int = 0) -> list[str]:
    return [entry.path for entry, _ in search(ENTRIES, query, namespace, limit, offset).items]


# -- normalization -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postMessage", "post message"),
        ("getRepoByID", "get repo by id"),
        ("v2Api", "v2 api"),
        ("a_b.c/d:e-f", "a b c d e f"),
        ("  Foo__Bar--baz  ", "foo bar baz"),
        ("executor.coreTools.integrations.list", "executor core tools integrations list"),
    ],
)
def test_normalize(text: str, expected: str) -> None:
    assert normalize(text) == expected


def test_tokens_split_on_anything_not_alphanumeric() -> None:
    assert tokens("chat.postMessage (v2)!") == ["chat", "post", "message", "v2"]
    assert tokens("  ") == []


# -- empty queries -------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "   "])
def test_empty_query_without_namespace_finds_nothing(query: str) -> None:
    assert search(ENTRIES, query, None, 12, 0) == Page(items=[], total=0, has_more=False, next_offset=None)


def test_empty_query_with_namespace_enumerates_that_integration_by_path() -> None:
    page = search(ENTRIES, "", "github", 12, 0)
    assert page.items == [(CREATE, 0), (LIST, 0), (REPO, 0)]
    assert (page.total, page.has_more, page.next_offset) == (3, False, None)


def test_enumeration_trims_the_namespace_but_requires_the_whole_integration() -> None:
    assert paths("", " github ") == ["github.issues.create", "github.issues.list", "github.repos.get"]
    assert paths("", "git") == []
    assert paths("", "executor.coreTools") == []


def test_enumeration_is_paged() -> None:
    first = search(ENTRIES, "", "github", 2, 0)
    assert [entry.path for entry, _ in first.items] == ["github.issues.create", "github.issues.list"]
    assert (first.total, first.has_more, first.next_offset) == (3, True, 2)
    rest = search(ENTRIES, "", "github", 2, 2)
    assert [entry.path for entry, _ in rest.items] == ["github.repos.get"]
    assert (rest.total, rest.has_more, rest.next_offset) == (3, False, None)


# -- scoring -------------------------------------------------------------------------------------------


def test_score_follows_the_field_weights_and_bonuses() -> None:
    path = 6 * 12 + 4 * 12 + 4 * 12
    name = 14 * 10 + 4 * 10 + 4 * 10
    description = 2 * 5 + 4 * 5
    full_coverage, leading_token, exact_name = 25, 8, 20
    assert score(CREATE, "issues create") == path + name + description + full_coverage + leading_token + exact_name


def test_score_for_a_prefix_token() -> None:
    path = 6 * 12 + 2 * 12
    name = 9 * 10 + 2 * 10
    description = 6 * 5 + 2 * 5
    assert score(REPO, "repo") == path + name + description + 25


def test_score_is_none_for_a_query_without_tokens() -> None:
    assert score(CREATE, "...") is None


def test_camel_case_query_matches_like_its_words() -> None:
    assert score(POST, "postMessage") == score(POST, "post message")
    assert paths("postMessage") == ["slack.chat.postMessage"]


def test_exact_path_ranks_first() -> None:
    page = search(ENTRIES, "github.issues.list", None, 12, 0)
    assert [entry.path for entry, _ in page.items] == ["github.issues.list", "github.issues.create"]
    assert page.items[0][1] > page.items[1][1]


def test_name_and_path_matches_rank_above_a_description_only_match() -> None:
    assert paths("repo") == ["github.repos.get", "github.issues.create"]


def test_an_exact_token_in_the_description_outranks_a_prefix() -> None:
    assert paths("issues") == ["github.issues.list", "github.issues.create", "gitlab.issues.create"]


def test_equal_scores_are_ordered_by_path() -> None:
    page = search(ENTRIES, "issues create", None, 12, 0)
    assert [entry.path for entry, _ in page.items] == ["github.issues.create", "gitlab.issues.create"]
    assert page.items[0][1] == page.items[1][1]


def test_word_order_does_not_matter_for_matching() -> None:
    assert paths("create issue") == ["github.issues.create", "gitlab.issues.create"]


# -- coverage ------------------------------------------------------------------------------------------


def test_two_token_query_needs_both_tokens() -> None:
    assert paths("issues delete") == []
    assert paths("issues") != []


def test_three_token_query_needs_most_tokens() -> None:
    assert paths("message post zzz") == ["slack.chat.postMessage"]
    assert paths("message zzz yyy") == []


def test_partial_coverage_scores_less_than_full_coverage() -> None:
    assert score(POST, "message post channel") > score(POST, "message post zzz")


# -- namespace filter ----------------------------------------------------------------------------------


def test_namespace_limits_a_query_to_an_integration() -> None:
    assert paths("issues", "github") == ["github.issues.list", "github.issues.create"]


def test_namespace_may_be_a_token_prefix_of_the_path() -> None:
    assert paths("list", "executor.coreTools") == ["executor.coreTools.integrations.list"]
    assert paths("list") == ["executor.coreTools.integrations.list", "github.issues.list"]


def test_namespace_must_match_whole_tokens() -> None:
    assert paths("list", "core") == []
    assert paths("issues", "git") == []


# -- paging --------------------------------------------------------------------------------------------


def test_paging_a_ranked_query() -> None:
    first = search(ENTRIES, "issues", None, 2, 0)
    assert [entry.path for entry, _ in first.items] == ["github.issues.list", "github.issues.create"]
    assert (first.total, first.has_more, first.next_offset) == (3, True, 2)
    last = search(ENTRIES, "issues", None, 2, 2)
    assert [entry.path for entry, _ in last.items] == ["gitlab.issues.create"]
    assert (last.total, last.has_more, last.next_offset) == (3, False, None)


def test_offset_past_the_end_is_an_empty_last_page() -> None:
    assert search(ENTRIES, "issues", None, 2, 10) == Page(items=[], total=3, has_more=False, next_offset=None)


# -- the index against a straightforward reference -----------------------------------------------------
#
# Upstream's algorithm as written in the contract, scanning every field of every entry per call: the
# index must rank exactly like it (items, scores, order, total and paging) on any catalog and query.

_REFERENCE_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_REFERENCE_SEPARATORS = re.compile(r"[_./:\-]+")
_REFERENCE_TOKEN = re.compile(r"[a-z0-9]+")


def reference_normalize(text: str) -> str:
    return _REFERENCE_SEPARATORS.sub(" ", _REFERENCE_CAMEL.sub(r"\1 \2", text)).lower().strip()


def reference_tokens(text: str) -> list[str]:
    return _REFERENCE_TOKEN.findall(reference_normalize(text))


def reference_field(field: str, query: str, query_tokens: list[str], weight: int) -> tuple[int, set[str], bool]:
    normalized = reference_normalize(field)
    points, phrase = 0, False
    if normalized == query:
        points, phrase = 14 * weight, True
    elif normalized.startswith(query):
        points, phrase = 9 * weight, True
    elif query in normalized:
        points, phrase = 6 * weight, True
    field_tokens = _REFERENCE_TOKEN.findall(normalized)
    matched = set()
    for token in query_tokens:
        if token in field_tokens:
            points += 4 * weight
        elif any(t.startswith(token) or token.startswith(t) for t in field_tokens):
            points += 2 * weight
        elif token in normalized:
            points += weight
        else:
            continue
        matched.add(token)
    return points, matched, phrase


def reference_score(entry: Entry, query: str) -> int | None:
    query = reference_normalize(query)
    query_tokens = _REFERENCE_TOKEN.findall(query)
    if not query_tokens:
        return None
    total, matched, phrase = 0, set(), False
    for field, weight in (("path", 12), ("integration", 8), ("name", 10), ("description", 5)):
        value = getattr(entry, field)
        if value:
            points, field_matched, field_phrase = reference_field(value, query, query_tokens, weight)
            total, matched, phrase = total + points, matched | field_matched, phrase or field_phrase
    coverage = len(matched) / len(set(query_tokens))
    if coverage < (1.0 if len(query_tokens) <= 2 else 0.6) and not phrase:
        return None
    total += 25 if coverage == 1 else round(coverage * 10)
    if [query_tokens[0]] in [reference_tokens(entry.path)[:1], reference_tokens(entry.name)[:1]]:
        total += 8
    if query in (reference_normalize(entry.path), reference_normalize(entry.name)):
        total += 20
    return total


def reference_search(entries: list[Entry], query: str, namespace: str | None, limit: int, offset: int) -> Page:
    query = query.strip()
    if not query and not namespace:
        return Page(items=[], total=0, has_more=False, next_offset=None)
    if not query:
        wanted = (namespace or "").strip()
        ranked = [(entry, 0) for entry in sorted(entries, key=lambda e: e.path) if entry.integration == wanted]
    else:
        candidates = entries
        if namespace:
            space = reference_tokens(namespace)
            candidates = [
                e
                for e in entries
                if reference_tokens(e.integration)[: len(space)] == space
                or reference_tokens(e.path)[: len(space)] == space
            ]
        scored = [(entry, s) for entry in candidates if (s := reference_score(entry, query)) is not None]
        ranked = sorted(scored, key=lambda pair: (-pair[1], pair[0].path))
    page = ranked[offset : offset + limit]
    consumed = offset + len(page)
    has_more = consumed < len(ranked)
    return Page(items=page, total=len(ranked), has_more=has_more, next_offset=consumed if has_more else None)


# Words that overlap as prefixes and substrings of each other, so every match level occurs often.
WORDS = ["get", "getter", "target", "list", "lists", "issue", "issues", "repo", "repository", "a", "an", "e"]
WORDS += ["in", "ing", "create", "v2", "id", "x", "pull", "request", "zz"]
word = st.sampled_from(WORDS)
cased = st.builds(lambda w, upper: w.capitalize() if upper else w, word, st.booleans())
separator = st.sampled_from([" ", ".", "_", "-", "/", ":", "", ". ", "--", "(", "!"])
phrase = st.builds(
    lambda first, rest: first + "".join(sep + w for sep, w in rest),
    cased,
    st.lists(st.tuples(separator, cased), max_size=4),
)
text = phrase | st.text(max_size=12)
entry = st.builds(Entry, path=phrase, name=phrase, integration=st.sampled_from(["github", "gitlab", "git", "a.b", ""]))
entry_with_description = st.builds(
    Entry, path=phrase, name=phrase, integration=st.sampled_from(["github", "gitlab", "git"]), description=text
)
catalogs = st.lists(entry | entry_with_description, max_size=12)
queries = phrase | text | st.builds(lambda w, n: " ".join([w] * n), word, st.integers(1, 4))
namespaces = st.none() | st.sampled_from(["github", " github ", "git", "a", "a.b", "", "  ", "..."]) | phrase


@settings(max_examples=400, deadline=None)
@given(
    catalog=catalogs,
    query=queries,
    namespace=namespaces,
    limit=st.integers(1, 5),
    offset=st.integers(0, 6),
)
def test_the_index_ranks_exactly_like_the_reference(
    catalog: list[Entry], query: str, namespace: str | None, limit: int, offset: int
) -> None:
    index = SearchIndex(catalog)
    assert index.search(query, namespace, limit, offset) == reference_search(catalog, query, namespace, limit, offset)
    assert normalize(query) == reference_normalize(query)


@settings(max_examples=100, deadline=None)
@given(catalog=catalogs, query=queries)
def test_one_index_answers_many_queries_like_the_reference(catalog: list[Entry], query: str) -> None:
    index = SearchIndex(catalog)
    for variant in (query, query.upper(), f"{query} {query}", query[: len(query) // 2]):
        assert index.search(variant, None, 20, 0) == reference_search(catalog, variant, None, 20, 0)


# -- bounds --------------------------------------------------------------------------------------------


def test_a_query_past_its_length_is_refused_before_any_work() -> None:
    index = SearchIndex(ENTRIES)
    assert index.search("x" * MAX_QUERY_LENGTH, None, 12, 0).total == 0
    with pytest.raises(QueryTooLarge) as raised:
        index.search("zz " * 100_000, None, 12, 0)
    assert str(raised.value) == f"query must be at most {MAX_QUERY_LENGTH} characters (got 300000)"


def test_a_query_past_its_word_count_is_refused() -> None:
    index = SearchIndex(ENTRIES)
    assert [entry.path for entry, _ in index.search("issues " * MAX_QUERY_WORDS, "github", 12, 0).items] == [
        "github.issues.list",
        "github.issues.create",
    ]
    with pytest.raises(QueryTooLarge) as raised:
        index.search("issues " * (MAX_QUERY_WORDS + 1), None, 12, 0)
    assert str(raised.value) == f"query must be at most {MAX_QUERY_WORDS} words (got {MAX_QUERY_WORDS + 1})"
    with pytest.raises(QueryTooLarge):
        index.search("fooBar." * 17, None, 12, 0)  # camelCase parts count as words


def test_a_namespace_past_its_length_is_refused_also_for_enumeration() -> None:
    index = SearchIndex(ENTRIES)
    for query in ("", "issues"):
        with pytest.raises(QueryTooLarge) as raised:
            index.search(query, "g" * (MAX_NAMESPACE_LENGTH + 1), 12, 0)
        assert str(raised.value) == (
            f"namespace must be at most {MAX_NAMESPACE_LENGTH} characters (got {MAX_NAMESPACE_LENGTH + 1})"
        )


def test_repeating_a_word_scores_every_repetition() -> None:
    once, thrice = score(CREATE, "create issues zz"), score(CREATE, "create create create issues zz")
    assert once is not None
    assert thrice is not None
    assert thrice > once
    assert thrice == reference_score(CREATE, "create create create issues zz")

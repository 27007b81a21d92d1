"""Ranking for `tools.search`, against upstream's algorithm (contract §4, "Search algorithm")."""

import pytest

from executor_mcp.tools.search import Entry, Page, normalize, score, search, tokens

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

"""The index on a catalog that repeats itself the way connected catalogs do, against the reference scoring.

Every connection to an integration lists the same tools under its own path head, so names, descriptions
and integrations recur and only the connection segment of a path differs: the index scores each distinct
value once and a path as its head and its name. Here a few hundred entries mix those repeats with paths
that are not `<head>.<name>`, connection names that are also tool words, descriptions shared by different
tools, empty and odd fields; every query's items, scores, order, total and paging must match the
reference's (the straightforward upstream algorithm of test_search.py, which scans every entry per call).
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor_mcp.tools.search import Entry, Page, SearchIndex
from tests.unit.test_search import reference_search

INTEGRATIONS = ["github", "gitHub2", "a.b"]
OWNERS = ["org", "acme"]
# Connection names that are also words of the tools, so some queries reach a path's head.
CONNECTIONS = ["account0", "account1", "main", "issues", "getter"]
TOOLS = [
    ("issues.create", "Create an issue in a repository"),
    ("issues.list", "List issues"),
    ("issues.get", None),
    ("repos.get", "Get a repository"),
    ("repos.getContent", "Get a repository"),  # a description shared by two tools
    ("pulls.list", "List pull requests"),
    ("pulls.listReviews", "List the reviews of a pull request"),
    ("chat.postMessage", "Post a message to a channel: issues, pulls and repos"),
    ("getRepo", ""),
    ("_private.x-y", "Ünïcode ΣΑΣ and İ, a Kelvin K: get issues"),
]
ODD = [
    Entry("github.org.main", "main", "github", "The path is the name's, once"),  # path ends with its name
    Entry("issues.list", "issues.list", "github", "The path is the name"),
    Entry("github.org.mainissues.create", "issues.create", "github", "Ends with the name, not after a dot"),
    Entry("github.org.main_.issues.create", "issues.create", "github", "A head ending in a separator"),
    Entry("github.org.main._issues.create", "_issues.create", "github", "A name starting with one"),
    Entry("github.org.mainIssues.Create", "Issues.Create", "github", "camelCase at the boundary"),
    Entry("github.org.main.repos.get", "", "github", "No name"),
    Entry("github.org.main....", "...", "github", "A name without tokens"),
    Entry("github.org.İnfo.repos.get", "repos.get", "github", "A head that lowercases to more letters"),
    Entry("slack.chat.postMessage", "chat.postMessage", "slack", "Post a message to a channel"),
    Entry("github.org.account0.issues.create", "issues.create", "github", "A duplicate path"),
    # Paths unlike their names, with every other field a repeated tool's: the name is not the path's tail.
    Entry("github.org.main.other", "issues.create", "github", "Create an issue in a repository"),
    Entry("github.org.main.pulls", "pulls.list", "github", "List pull requests"),
]
CATALOG = [
    Entry(f"{integration}.{owner}.{connection}.{name}", name, integration, description)
    for integration in INTEGRATIONS
    for owner in OWNERS
    for connection in CONNECTIONS
    for name, description in TOOLS
] + ODD
INDEX = SearchIndex(CATALOG)

QUERIES = [
    "get repository",
    "create issue",
    "list pull requests",
    "issues",
    "issue",
    "get",
    "repo",
    "i",
    "is",
    "e",
    "account",
    "account0",
    "account0 issues",
    "account0 issues create",
    "org account1",
    "main issues",
    "github org main",
    "github.org.main.issues.list",
    "issues.list",
    "issues list",
    "issuesList",
    "main",
    "getter",
    "get getter",
    "get get repository",
    "list list",
    "list pull zzz",
    "list zzz yyy",
    "postMessage",
    "post message channel",
    "getRepo",
    "repos get content",
    "git",
    "github2 pulls",
    "a b",
    "b",
    "x y",
    "private",
    "info",
    "k",
    "σας",
    "ünïcode",
    "...",
    "mainissues",
    "the",
    "a repository",
    "acme getter issues get",
]
NAMESPACES = [None, "github", "github.org.account0", "gitHub2", "a.b", "issues"]


def page_of(ranked: Page, limit: int, offset: int) -> Page:
    """A page of the reference's whole ranking, paged as the reference pages (one ranking, many pages)."""
    items = ranked.items[offset : offset + limit]
    has_more = offset + len(items) < ranked.total
    return Page(
        items=items, total=ranked.total, has_more=has_more, next_offset=offset + len(items) if has_more else None
    )


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("query", QUERIES)
def test_the_index_ranks_a_repeated_catalog_like_the_reference(query: str, namespace: str | None) -> None:
    ranked = reference_search(CATALOG, query, namespace, len(CATALOG), 0)
    assert INDEX.search(query, namespace, len(CATALOG), 0) == ranked
    for limit, offset in ((1, 0), (5, 0), (7, 9), (12, 40), (3, len(CATALOG))):
        assert INDEX.search(query, namespace, limit, offset) == page_of(ranked, limit, offset), (limit, offset)


def test_the_catalog_repeats_its_fields() -> None:
    """What the test is about: most names and descriptions recur, paths are all but distinct."""
    assert len(CATALOG) > 300
    assert len({entry.name for entry in CATALOG}) < len(CATALOG) / 20
    assert len({entry.description for entry in CATALOG}) < len(CATALOG) / 10
    assert len(CATALOG) - len({entry.path for entry in CATALOG}) == 2  # the odd entries that reuse a path


VOCABULARY = sorted({*"ghijklmnopqrstuvwxyz0123456789", "get", "issues", "repo", "list", "account", "main", "org"})
WORDS = st.sampled_from(VOCABULARY) | st.sampled_from(
    [token for entry in CATALOG[::7] for token in entry.path.replace(".", " ").split()]
)


@settings(max_examples=100, deadline=None)
@given(
    words=st.lists(WORDS, min_size=1, max_size=5),
    separator=st.sampled_from([" ", ".", "_"]),
    namespace=st.sampled_from(NAMESPACES),
    limit=st.integers(1, 30),
    offset=st.integers(0, 40),
)
def test_any_query_over_a_repeated_catalog_ranks_like_the_reference(
    words: list[str], separator: str, namespace: str | None, limit: int, offset: int
) -> None:
    query = separator.join(words)
    assert INDEX.search(query, namespace, limit, offset) == reference_search(CATALOG, query, namespace, limit, offset)

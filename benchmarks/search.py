"""Search benchmark: `tools.search` ranking over a synthetic catalog of ten thousand tools (PRODUCT.md).

Builds a deterministic catalog shaped like imported OpenAPI specs (integrations of a few hundred
operations each, camelCase operation names, one-sentence descriptions), then reports the index's build
time and p50/p95 per kind of query: typical keyword queries, a namespace enumeration, a filtered query,
and the most expensive queries the bounds allow (short tokens that occur in nearly every entry).
Sans-I/O: it times the ranking itself in this process, as CPU time (`time.process_time`), so a busy
machine skews the figures less. Every loop is bounded in count and time.

    .venv/bin/python -m benchmarks.search [--tools 10000] [--repeat 30]
"""

import argparse
import random
import time

from benchmarks.common import TIME_BOUND, line
from executor_mcp.tools.search import MAX_QUERY_LENGTH, MAX_QUERY_WORDS, Entry, SearchIndex

VERBS = ["get", "list", "create", "update", "delete", "remove", "add", "set", "check", "search", "replace", "start"]
NOUNS = [
    "repository", "issue", "pull", "request", "comment", "review", "label", "milestone", "branch", "commit",
    "release", "asset", "workflow", "run", "job", "artifact", "secret", "variable", "environment", "deployment",
    "team", "member", "organization", "user", "key", "hook", "webhook", "invitation", "project", "card", "column",
    "package", "version", "codespace", "gist", "reaction", "status", "check", "suite", "alert", "scan", "runner",
    "channel", "message", "thread", "file", "folder", "calendar", "event", "contact", "invoice", "payment",
]  # fmt: skip
FILLER = ["for", "the", "a", "an", "in", "of", "by", "with", "to", "on", "authenticated", "given", "all", "its"]
TYPICAL = ["create issue", "list pull requests", "send message", "get repository", "delete webhook", "workflow run"]


def catalog(size: int, seed: int = 9) -> list[Entry]:
    rng = random.Random(seed)
    entries: list[Entry] = []
    integrations = [f"{rng.choice(NOUNS)}{index}" for index in range(max(1, size // 400))]
    for index in range(size):
        integration = integrations[index % len(integrations)]
        words = [rng.choice(VERBS), *rng.sample(NOUNS, rng.randint(1, 3))]
        operation = words[0] + "".join(word.capitalize() for word in words[1:]) + str(index)
        group = rng.choice(NOUNS) + "s"
        sentence = [*words, *rng.sample(FILLER + NOUNS, rng.randint(4, 12))]
        entries.append(
            Entry(
                path=f"{integration}.org.main.{group}.{operation}",
                name=f"{group}.{operation}",
                integration=integration,
                description=" ".join(sentence).capitalize() + ".",
            )
        )
    return entries


def timed(index: SearchIndex, query: str, namespace: str | None, repeat: int) -> list[float]:
    samples: list[float] = []
    deadline = time.monotonic() + TIME_BOUND
    while len(samples) < repeat and time.monotonic() < deadline:
        started = time.process_time()
        index.search(query, namespace, 12, 0)
        samples.append(time.process_time() - started)
    return samples


def main(size: int, repeat: int) -> None:
    entries = catalog(size)
    started = time.process_time()
    index = SearchIndex(entries)
    print(f"index of {size} tools built in {(time.process_time() - started) * 1000:.0f} ms")
    namespace = entries[0].integration
    # The costliest queries the bounds allow: tokens so short that nearly every entry holds them.
    repeated = " ".join(["a", "e", "i", "o", "t", "s", "r", "n"] * (MAX_QUERY_WORDS // 8))
    letters = " ".join("abcdefghijklmnopqrstuvwxyz0123456789"[:MAX_QUERY_WORDS])
    assert max(len(repeated), len(letters)) <= MAX_QUERY_LENGTH
    distinct = " ".join(f"{a}{b}" for a in "aeiou" for b in "nrst")[: MAX_QUERY_LENGTH - 1]
    distinct = " ".join(distinct.split()[:MAX_QUERY_WORDS])
    cases = [
        *((f"typical {query!r}", query, None) for query in TYPICAL),
        ("enumeration of one integration", "", namespace),
        ("'list' within one integration", "list", namespace),
        ("one letter 'e'", "e", None),
        (f"8 one-letter words, {MAX_QUERY_WORDS // 8} times each", repeated, None),
        (f"{MAX_QUERY_WORDS} distinct one-letter words", letters, None),
        (f"{MAX_QUERY_WORDS} distinct two-letter words", distinct, None),
    ]
    for label, query, space in cases:
        total = index.search(query, space, 12, 0).total
        print(line(f"{label} ({total} found)", timed(index, query, space, repeat)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    arguments = parser.parse_args()
    main(arguments.tools, arguments.repeat)

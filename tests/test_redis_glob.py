"""``topicPattern`` matches as Redis's ``SCAN MATCH`` does, held to a real server's answers."""

from __future__ import annotations

import random

import pytest
import redis

from atlasbus.bus.redis_glob import glob_matches
from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.options.source import parse_source_options

PREFIX = "globbed"
TOPICS = ["orders-1", "orders-2", "ordersX", "o*x", "o?x", "a]b", "a-b", "a\\b", "[x]", "^up", "é"]


@pytest.fixture(scope="module")
def topics(redis_url: str) -> list[str]:
    client = redis.Redis.from_url(redis_url)
    for topic in TOPICS:
        client.xadd(f"{PREFIX}:{topic}", {"n": "1"})
    return TOPICS


def scan_match(r: redis.Redis, pattern: str) -> list[str]:
    """What Redis itself finds for the pattern under the prefix."""
    return sorted(
        key.decode() for key in r.scan_iter(match=f"{PREFIX}:{pattern}", count=1000, _type="stream")
    )


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("orders[^-]*", ["ordersX"]),  # Redis's negation (fnmatch's is [!...]): matched nothing
        ("o\\*x", ["o*x"]),  # Redis's escape: matched nothing
        ("orders-[12]", ["orders-1", "orders-2"]),
        ("orders-[2-1]", ["orders-1", "orders-2"]),  # a reversed range, swapped as Redis does
        ("o?x", ["o*x", "o?x"]),
        ("a\\]b", ["a]b"]),
        ("[[]x]", ["[x]"]),
        ("[\\^]up", ["^up"]),
        ("??", ["é"]),  # two bytes in UTF-8, as Redis counts (one "?" matches no topic here)
    ],
)
def test_a_pattern_finds_what_scan_finds(
    r: redis.Redis, redis_url: str, topics: list[str], pattern: str, expected: list[str]
) -> None:
    options = parse_source_options(
        {"url": redis_url, "streamPrefix": PREFIX, "topicPattern": pattern}
    )
    found = StreamCatalog(options.endpoint).discover(options.subscription)
    assert found == [f"{PREFIX}:{topic}" for topic in sorted(expected)]
    assert found == scan_match(r, pattern)


def test_random_patterns_match_as_redis_matches(r: redis.Redis, topics: list[str]) -> None:
    """300 patterns drawn from glob's metacharacters and the topics' characters: Python's
    verdict on every topic must be Redis's."""
    pieces = ["*", "?", "[", "]", "^", "-", "\\", "o", "r", "x", "a", "b", "1", "2", "s", "é"]
    pieces += ["[a-é]", "[é-a]", "[^é]", "[]-a]", "[a-]"]  # Redis compares ranges' bytes signed
    chooser = random.Random(16)
    for _ in range(300):
        pattern = "".join(chooser.choice(pieces) for _ in range(chooser.randint(1, 8)))
        ours = sorted(f"{PREFIX}:{t}" for t in topics if glob_matches(pattern, t))
        assert ours == scan_match(r, pattern), pattern


def test_many_stars_against_a_long_key_match_as_redis_does(r: redis.Redis) -> None:
    """``*a*a*a*a*a*a*a*ab`` against 120 a's: Redis gives up early; a regular expression
    backtracked for seconds (this test would then take minutes, not fail)."""
    key = "a" * 120
    r.xadd(f"{PREFIX}:{key}", {"n": "1"})
    try:
        for pattern in ("*a" * 8 + "b", "*a" * 8, "a*" * 8 + "a"):
            found = f"{PREFIX}:{key}" in scan_match(r, pattern)
            assert glob_matches(pattern, key) == found, pattern
    finally:
        r.delete(f"{PREFIX}:{key}")  # the other tests count what the prefix holds

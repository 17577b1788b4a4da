"""How an error names an option: as Spark's option, or as the caller's flag (driver, CLI).

The core words its errors for Spark users (``option 'url'``, ``again=True``). The command line
calls the same things by flags (``--url``, ``--again``): it runs each command inside
``named_as(its names)``, and the core puts in whatever ``named`` gives. A process-wide setting,
not a context variable, so that an error raised on one of a command's threads (a read-ahead
thread, a pool's) is worded the same.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

SPARK_NAMES: Final[Mapping[str, str]] = {
    "url": "option 'url'",
    "url or env": "option 'url' (or $REDIS_URL)",
    "url from env": "option 'url' (from $REDIS_URL)",
    "credentials": "the 'username' and 'password' options (or the credentials in 'url')",
    "dead letter table": "the deadLetterTable option",
    "where to point the dead letter table": (
        "point deadLetterTable at a new path or an atlasbus dead-letter table"
    ),
    "sweep group": "option 'sweepGroup'",
    "swept streams": (
        "the streams swept (options 'topics'/'topicPattern'/'streams' and 'streamPrefix'; a "
        "topic names the stream '{streamPrefix}:{topic}')"
    ),
    "streams": "the streams",
    "again": "again=True",
    "stream selection": "the stream prefix and topics",
}
"""What each thing an error may name is called by Spark users (the core's default)."""

_lock = threading.Lock()
_names: Mapping[str, str] = SPARK_NAMES


def named(thing: str) -> str:
    """How errors call ``thing`` (a key of ``SPARK_NAMES``) in this process now."""
    return _names.get(thing, SPARK_NAMES[thing])


@contextmanager
def named_as(names: Mapping[str, str]) -> Iterator[None]:
    """Errors raised inside call things by ``names`` (missing keys: Spark's names)."""
    global _names
    with _lock:
        before, _names = _names, {**SPARK_NAMES, **names}
    try:
        yield
    finally:
        with _lock:
            _names = before

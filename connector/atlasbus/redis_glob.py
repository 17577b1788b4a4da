"""Redis's glob patterns (``SCAN MATCH``, ``KEYS``) matched in Python, as Redis matches them.

``topicPattern`` finds streams with ``SCAN MATCH``, and the same pattern then decides which
keys of ``startingOffsets``/``endingOffsets`` it covers: both must read the pattern alike.
Python's ``fnmatch`` does not: it negates a class with ``[!...]`` where Redis writes
``[^...]``, and has no ``\\`` escape, so ``orders[^-]*`` or ``o\\*x`` matched nothing that
``SCAN`` found. Redis's rules (``stringmatchlen`` in util.c): ``*`` any run, ``?`` one
character, ``[abc]``, ``[a-z]`` (a reversed range is swapped), ``[^...]`` negated, ``\\x`` the
character ``x``, case-sensitive, over bytes (UTF-8): ``?`` is one byte, so it does not match
``é``. Runs on the driver.
"""

from __future__ import annotations

import re
from functools import lru_cache


def glob_matches(pattern: str, text: str) -> bool:
    """Whether ``text`` matches ``pattern`` as Redis's ``SCAN MATCH`` would match it."""
    return _compiled(pattern.encode()).fullmatch(text.encode()) is not None


@lru_cache(maxsize=64)
def _compiled(pattern: bytes) -> re.Pattern[bytes]:
    parts: list[bytes] = []
    at, end = 0, len(pattern)
    while at < end:
        char = pattern[at : at + 1]
        if char == b"*":
            parts.append(b".*")
        elif char == b"?":
            parts.append(b".")
        elif char == b"\\" and at + 1 < end:
            at += 1
            parts.append(re.escape(pattern[at : at + 1]))
        elif char == b"[":
            at, part = _character_class(pattern, at + 1)
            parts.append(part)
        else:
            parts.append(re.escape(char))
        at += 1
    return re.compile(b"".join(parts), re.DOTALL)


def _character_class(pattern: bytes, at: int) -> tuple[int, bytes]:
    """The class opened before ``at``: where it closes, and its regular expression. As in
    Redis, a class left open runs to the pattern's end."""
    end = len(pattern)
    negated = pattern[at : at + 1] == b"^"
    if negated:
        at += 1
    members: list[bytes] = []
    while at < end and pattern[at : at + 1] != b"]":
        if pattern[at : at + 1] == b"\\" and at + 1 < end:
            members.append(re.escape(pattern[at + 1 : at + 2]))
            at += 2
        elif at + 2 < end and pattern[at + 1 : at + 2] == b"-":
            low, high = sorted((pattern[at], pattern[at + 2]))
            members.append(re.escape(bytes([low])) + b"-" + re.escape(bytes([high])))
            at += 3
        else:
            members.append(re.escape(pattern[at : at + 1]))
            at += 1
    if not members:  # "[]" matches no byte, "[^]" any
        return at, rb"[\s\S]" if negated else rb"[^\s\S]"
    return at, b"[" + (b"^" if negated else b"") + b"".join(members) + b"]"

"""Redis's glob patterns (``SCAN MATCH``, ``KEYS``) matched in Python, as Redis matches them.

``topicPattern`` finds streams with ``SCAN MATCH``, and the same pattern then decides which
keys of ``startingOffsets``/``endingOffsets`` it covers: both must read the pattern alike.
Python's ``fnmatch`` does not: it negates a class with ``[!...]`` where Redis writes
``[^...]``, and has no ``\\`` escape, so ``orders[^-]*`` or ``o\\*x`` matched nothing that
``SCAN`` found. This is a port of Redis's ``stringmatchlen`` (util.c, Redis 7): ``*`` any run,
``?`` one byte, ``[abc]``, ``[a-z]`` (a reversed range swapped), ``[^...]``, ``\\x`` the byte
``x``; over UTF-8 bytes, so ``?`` does not match ``é``; a range's ends compared as C's signed
``char`` (x86), as Redis compares them; and, like Redis, it stops trying longer matches for an
earlier ``*`` once the rest of the pattern failed everywhere, so ``*a*a*a*b`` cannot backtrack
for seconds. Runs on the driver.
"""

from __future__ import annotations


def glob_matches(pattern: str, text: str) -> bool:
    """Whether ``text`` matches ``pattern`` as Redis's ``SCAN MATCH`` would match it."""
    return _match(pattern.encode(), 0, text.encode(), 0, [False])


def _at(data: bytes, index: int) -> int:
    """The byte at ``index``, or 0 past the end: Redis's strings end with a NUL it may read."""
    return data[index] if index < len(data) else 0


def _signed(byte: int) -> int:
    return byte - 256 if byte > 127 else byte


def _match(pattern: bytes, p: int, string: bytes, s: int, give_up: list[bool]) -> bool:
    """``stringmatchlen_impl``: ``give_up[0]`` is its ``skipLongerMatches``."""
    p_end, s_end = len(pattern), len(string)
    while p < p_end and s < s_end:
        char = pattern[p]
        if char == ord("*"):
            while p + 1 < p_end and pattern[p + 1] == ord("*"):
                p += 1
            if p + 1 == p_end:
                return True
            while s < s_end:
                if _match(pattern, p + 1, string, s, give_up):
                    return True
                if give_up[0]:
                    return False
                s += 1
            give_up[0] = True
            return False
        if char == ord("?"):
            s += 1
        elif char == ord("["):
            p, matched = _character_class(pattern, p + 1, string[s])
            if not matched:
                return False
            s += 1
        else:
            if char == ord("\\") and p + 1 < p_end:
                p += 1
            if pattern[p] != string[s]:
                return False
            s += 1
        p += 1
        if s == s_end:
            while _at(pattern, p) == ord("*"):
                p += 1
            break
    return p >= p_end and s == s_end


def _character_class(pattern: bytes, p: int, byte: int) -> tuple[int, bool]:
    """The class opening before ``p`` against ``byte``: where it ends (its ``]``) and the verdict.

    As in Redis, a class left open runs to the pattern's end.
    """
    negated = _at(pattern, p) == ord("^")
    if negated:
        p += 1
    matched = False
    p_end = len(pattern)
    while True:
        left = p_end - p
        if _at(pattern, p) == ord("\\") and left >= 2:
            p += 1
            matched = matched or pattern[p] == byte
        elif _at(pattern, p) == ord("]"):
            break
        elif left == 0:
            p -= 1
            break
        elif left >= 3 and pattern[p + 1] == ord("-"):
            low, high = sorted((_signed(pattern[p]), _signed(pattern[p + 2])))
            matched = matched or low <= _signed(byte) <= high
            p += 2
        else:
            matched = matched or pattern[p] == byte
        p += 1
    return p, matched != negated

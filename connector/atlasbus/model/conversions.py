"""Small conversions of loosely typed values: Redis replies, and the dead-letter table's columns.

A Redis reply holds bytes or, with decode_responses, text: ``reply_text`` reads either. A
dead letter records what it could make of a bad row or entry: its ``topic`` as text, its
``priority`` and ``delivery_attempts`` when they are 32-bit integers. Whatever does not fit is
left out of those columns (None) and stays, as given, in ``fields`` or ``payload``; so these
helpers never raise. Spark-free; runs wherever it is called.
"""

from __future__ import annotations

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def text_or_none(value: object) -> str | None:
    """``str(value)``; None stays None."""
    return None if value is None else str(value)


def int32_or_none(value: object) -> int | None:
    """``value`` as an integer if ``int()`` takes it (an int, decimal text, ...) and the result
    fits in 32 bits; else None."""
    if value is None:
        return None
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if INT32_MIN <= number <= INT32_MAX else None


def reply_text(value: object) -> str:
    """A Redis reply value as text: bytes are UTF-8, anything else goes through ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)

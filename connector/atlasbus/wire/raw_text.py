"""The raw entry as text, losslessly: how ``fields`` holds bytes that may not be UTF-8.

Redis field names and values are byte strings; the ``fields`` column is ``map<string,string>``,
whose strings must be valid UTF-8. ``raw_text`` turns bytes into such a string and
``raw_bytes`` turns it back, so ``raw_bytes(raw_text(b)) == b`` for every byte string ``b``
(docs/wire-format.md, "Raw fields", is the normative description):

* every byte that is not part of valid UTF-8 becomes the four characters ``\\xNN`` (two
  lowercase hex digits);
* a run of backslashes that stands directly before such an escape, or before the text ``x``
  and two hex digits, is doubled, so it can never be read as (part of) an escape;
* everything else is kept as it is.

So valid UTF-8 that holds no backslash followed by ``x`` and two hex digits, which is nearly
every value, is its own text: byte for byte what a plain UTF-8 decode gives. ``raw_bytes``
reads a run of *k* backslashes before ``xNN`` as *k* // 2 backslashes, followed by the byte
``NN`` when *k* is odd and by the text ``xNN`` when it is even; any other text is UTF-8.

Dead letters written before this rule used Python's ``backslashreplace`` on non-UTF-8 values
only: ``raw_bytes`` reads those back exactly too, unless a value held a backslash before
``xNN`` as text or a backslash right before a non-UTF-8 byte (there the old form was ambiguous).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

# Either a backslash run (possibly empty) before a non-UTF-8 byte (decoded as a lone surrogate
# U+DC80..U+DCFF by ``surrogateescape``), or a backslash run before ``x`` and two hex digits.
_ESCAPE = re.compile("(\\\\*)([\udc80-\udcff])|(\\\\+)(x[0-9a-fA-F]{2})")
_UNESCAPE = re.compile(r"(\\+)x([0-9a-fA-F]{2})")


def _escape(match: re.Match[str]) -> str:
    byte = match.group(2)
    if byte is not None:
        return match.group(1) * 2 + f"\\x{ord(byte) - 0xDC00:02x}"
    return match.group(3) * 2 + match.group(4)


def raw_text(value: bytes) -> str:
    """``value`` as text that ``raw_bytes`` turns back into exactly ``value``."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return _ESCAPE.sub(_escape, value.decode("utf-8", "surrogateescape"))
    if "\\x" not in text:
        return text
    return _ESCAPE.sub(_escape, text)


def raw_bytes(text: str) -> bytes:
    """The bytes ``raw_text`` turned into ``text``: the inverse of ``raw_text``."""
    if "\\x" not in text:
        return text.encode("utf-8")
    parts: list[bytes] = []
    position = 0
    for match in _UNESCAPE.finditer(text):
        parts.append(text[position : match.start()].encode("utf-8"))
        run = len(match.group(1))
        parts.append(b"\\" * (run // 2))
        hex_digits = match.group(2)
        parts.append(bytes((int(hex_digits, 16),)) if run % 2 else b"x" + hex_digits.encode())
        position = match.end()
    parts.append(text[position:].encode("utf-8"))
    return b"".join(parts)


def raw_entry(
    fields: Mapping[str, str] | Iterable[tuple[str, str]],
) -> list[tuple[bytes, bytes]]:
    """A ``fields`` map (a dict, or the list of pairs Arrow gives) as the entry's raw pairs."""
    pairs = fields.items() if isinstance(fields, Mapping) else fields
    return [(raw_bytes(name), raw_bytes(value)) for name, value in pairs]


def raw_text_array(values: Sequence[bytes]) -> pa.Array:
    """``raw_text`` of each value as an Arrow string array, in C when all are plain text."""
    binary = pa.array(values, pa.binary())
    try:
        text = binary.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(list(map(raw_text, values)), pa.string())
    if len(text) and pc.any(pc.match_substring(text, "\\x")).as_py():
        return pa.array(list(map(raw_text, values)), pa.string())
    return text


def original_text(text: str | None) -> str | None:
    """The value ``text`` stands for in ``fields``, as a string: the original UTF-8 text.

    A value that was not valid UTF-8 stays in its escaped form (it cannot be a string); used
    where a dead letter's raw value is published again (replay) or copied into a column.
    """
    if text is None or "\\" not in text:
        return text
    try:
        return raw_bytes(text).decode("utf-8")
    except UnicodeDecodeError:
        return text

"""Whether JSON texts are all JSON objects, checked without building them (hot path).

Runs wherever entries are decoded or rows encoded: in the source's and the sink's tasks on the
executors, and in the CLI. The contract's JSON (docs/wire-format.md) is what orjson accepts, but
orjson builds every value of a document as a Python object just to validate it: for a nested
``payload`` of a few hundred bytes that was over half of a page's decoding. simdjson validates a
document (structure, numbers, escapes, UTF-8) in C++ and builds nothing.

simdjson is used only to say yes. What it accepts, orjson accepts too, with one exception ruled
out here: a leading UTF-8 byte order mark, which simdjson skips and orjson refuses. It refuses a
little that orjson accepts (integers beyond 64 bits, nesting 1024 deep), and then the caller
judges the values one by one with orjson, so no value's result depends on which path it took.
``tests/test_json_objects.py`` holds both parsers to this on edge cases and on mutated documents.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import cast

import simdjson

_BYTE_ORDER_MARK = codecs.BOM_UTF8


def all_json_objects(values: Sequence[bytes | None]) -> bool:
    """True when every value is JSON text whose top level is an object, as orjson would judge.

    False means "not sure": some value is absent, malformed, not an object, or beyond what
    simdjson takes; the caller then checks each value with orjson. The loops run in C
    (``map``), and each parsed document is released before the next parse, as a simdjson
    parser requires.
    """
    # typed for any value: a None raises TypeError, caught below
    parse = cast(Callable[[bytes | None], object], simdjson.Parser().parse)
    try:
        if not all(map(isinstance, map(parse, values), repeat(simdjson.Object))):
            return False
    except (ValueError, RuntimeError, TypeError):  # invalid JSON or UTF-8, too deep, None
        return False
    return not any(map(bytes.startswith, values, repeat(_BYTE_ORDER_MARK)))  # type: ignore[arg-type]

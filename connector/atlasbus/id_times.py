"""The time in each entry ID of a column page, by a compiled loop (executor).

An ID is ``<ms>-<seq>``; its ms part is the entry's ``timestamp``. Arrow's kernels split every
ID into a list of strings to get it (a tenth of decoding a page); here the digits are read
where they lie. IDs later than 9999-12-29 (an ID can be set by hand) get a null timestamp, as
``atlasbus.decode`` gives them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.compiled import binary_column, byte_at, compiled

_HYPHEN, _ZERO, _NINE = 45, 48, 57
_MOST_DIGITS = 15  # the last ms to show, 253402127999999, has 15 digits


def id_microseconds(ids: pa.Array, last_ms: int) -> pa.Array | None:
    """Microseconds since the epoch of each ID's ms part; null past ``last_ms``.

    None when some ID is not digits, a hyphen and more (never from Redis): the caller's
    general path judges it then.
    """
    column = binary_column(ids)
    if column is None:
        return None
    data, offsets = column
    micros = np.empty(len(ids), np.int64)
    status = _id_micros(data.ctypes.data, offsets, last_ms, micros)
    if status < 0:
        return None
    mask = micros < 0 if status > 0 else None  # status: how many IDs are past last_ms
    return pa.array(micros, pa.int64(), mask=mask)


@compiled
def _id_micros(data: int, offsets: Any, last_ms: int, micros: Any) -> int:
    """Fill ``micros`` (-1 past ``last_ms``); how many are past it, or -1 at a malformed ID."""
    past = 0
    for row in range(offsets.shape[0] - 1):
        pos = int(offsets[row])
        end = int(offsets[row + 1])
        ms = 0
        digits = 0
        while pos < end and _ZERO <= byte_at(data, pos) <= _NINE:
            if digits < _MOST_DIGITS + 1:
                ms = ms * 10 + byte_at(data, pos) - _ZERO
            digits += 1
            pos += 1
        if digits == 0 or pos >= end or byte_at(data, pos) != _HYPHEN:
            return -1
        if digits > _MOST_DIGITS or ms > last_ms:
            micros[row] = -1
            past += 1
        else:
            micros[row] = ms * 1000
    return past

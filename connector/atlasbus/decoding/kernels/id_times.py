"""The time in each entry ID of a column page, by a compiled loop (executor).

An ID is ``<ms>-<seq>``; its ms part is the entry's ``timestamp``. Arrow's kernels split every
ID into a list of strings to get it (a tenth of decoding a page); here the digits are read
where they lie. IDs later than 9999-12-29 (an ID can be set by hand) get a null timestamp, as
``atlasbus.decoding.decoder`` gives them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.decoding.kernels.ascii_text import offsets_within, outside_data
from atlasbus.decoding.kernels.compiler import binary_column, byte_at, compiled

_HYPHEN, _ZERO, _NINE = 45, 48, 57
_MOST_DIGITS = 15  # the last ms to show, 253402127999999, has 15 digits


def id_microseconds(ids: pa.Array, last_ms: int) -> pa.Array | None:
    """Microseconds since the epoch of each ID's ms part; null past ``last_ms``.

    None when some ID is not digits, a hyphen and more (never from Redis): the caller's
    general path judges it then. Raises ``outside_data`` for a column built wrong.
    """
    column = binary_column(ids)
    if column is None:
        return None
    data, offsets = column
    micros = np.empty(len(ids), np.int64)
    status = _id_micros(data, offsets, last_ms, micros)
    if status == _OUTSIDE_DATA:
        raise outside_data("reading entry IDs' times")
    if status < 0:
        return None
    mask = micros < 0 if status > 0 else None  # status: how many IDs are past last_ms
    return pa.array(micros, pa.int64(), mask=mask)


# What _id_micros returns, besides how many IDs are past last_ms.
_MALFORMED, _OUTSIDE_DATA = -1, -2


@compiled
def _id_micros(data: Any, offsets: Any, last_ms: int, micros: Any) -> int:
    """Fill ``micros`` (-1 past ``last_ms``); how many are past it, ``_MALFORMED`` at a
    malformed ID, ``_OUTSIDE_DATA`` when the entry check fails.

    In bounds: the offsets are checked to lie within ``data`` and ``micros`` to have a row
    for each ID; each ID's bytes are then read only below its end.
    """
    address, size = data.ctypes.data, data.shape[0]
    if micros.shape[0] + 1 != offsets.shape[0] or not offsets_within(offsets, size):
        return _OUTSIDE_DATA
    past = 0
    for row in range(offsets.shape[0] - 1):
        pos = int(offsets[row])
        end = int(offsets[row + 1])
        ms = 0
        digits = 0
        while pos < end and _ZERO <= byte_at(address, pos) <= _NINE:
            if digits < _MOST_DIGITS + 1:
                ms = ms * 10 + byte_at(address, pos) - _ZERO
            digits += 1
            pos += 1
        if digits == 0 or pos >= end or byte_at(address, pos) != _HYPHEN:
            return _MALFORMED
        if digits > _MOST_DIGITS:  # past 9999-12-29, or leading zeros (never from Redis)
            ms = _without_leading_zeros(address, pos - digits, pos, last_ms)
        if ms > last_ms:
            micros[row] = -1
            past += 1
        else:
            micros[row] = ms * 1000
    return past


@compiled
def _without_leading_zeros(address: int, start: int, stop: int, last_ms: int) -> int:
    """The number the digits from ``start`` to ``stop`` spell, as Arrow's cast reads them
    (leading zeros and all); past ``last_ms`` when more than ``_MOST_DIGITS`` follow the
    zeros. Compiled apart: inlined, this rare case slowed the loop over every ID by a tenth.

    In bounds: reads only from ``start`` to ``stop``, an ID's digits (``_id_micros``'s).
    """
    while start < stop and byte_at(address, start) == _ZERO:
        start += 1
    if stop - start > _MOST_DIGITS:
        return last_ms + 1
    ms = 0
    for pos in range(start, stop):
        ms = ms * 10 + byte_at(address, pos) - _ZERO
    return ms

"""A column page's decimal fields read where they lie, by compiled loops (executor).

``priority`` and ``delivery_attempts`` are decimal integers, ``enqueued_time`` a decimal number
of seconds. Arrow's kernels read them in a pass per step, each making an array (the text
checked as UTF-8, then as digits, then cast; the seconds multiplied, compared, cast): 26 and
44 ns an entry. Here one loop reads each value's digits. Only the plain spellings publishers
write are read here: digits, and for seconds one dot between digits. For a column holding any
other spelling these give None, and ``atlasbus.decode`` reads it the general way, which gives
the same values and the errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.compiled import binary_column, byte_at, compiled

_ZERO, _NINE, _DOT = 48, 57, 46
_INT32_MAX = 2**31 - 1
# Up to 2**53 every integer is a double, and 10**22 is the largest power of ten that is one:
# the quotient of two such doubles is the decimal's value correctly rounded, as Arrow's
# parser (and Python's float) give it.
_EXACT_INTEGER = 2**53
_POWERS_OF_TEN = np.array([10.0**k for k in range(23)])


def plain_int32(values: pa.Array) -> pa.Array | None:
    """A binary column of plain decimal integers (ASCII digits, at most 2147483647) as int32;
    None when some value is anything else."""
    column = binary_column(values)
    if column is None:
        return None
    data, offsets = column
    parsed = np.empty(len(values), np.int32)
    if not _read_int32(data.ctypes.data, offsets, parsed):
        return None
    return pa.array(parsed, pa.int32())


def plain_micros(values: pa.Array, lowest: float, end: float) -> pa.Array | None:
    """A binary column of plain decimal seconds as microseconds (int64, rounded toward zero);
    None when some value is spelled otherwise, or is not in [``lowest``, ``end``) microseconds.

    The microseconds are the seconds' double times 1,000,000.0, as ``atlasbus.decode``
    computes them from Arrow's parse.
    """
    column = binary_column(values)
    if column is None:
        return None
    data, offsets = column
    micros = np.empty(len(values), np.int64)
    if not _read_micros(data.ctypes.data, offsets, lowest, end, _POWERS_OF_TEN, micros):
        return None
    return pa.array(micros, pa.int64())


@compiled
def _read_int32(data: int, offsets: Any, parsed: Any) -> bool:
    """Fill ``parsed`` with each value's digits; False at the first value that is not plain."""
    for row in range(offsets.shape[0] - 1):
        pos = int(offsets[row])
        end = int(offsets[row + 1])
        if pos == end:
            return False
        value = 0
        while pos < end:
            byte = byte_at(data, pos)
            if byte < _ZERO or byte > _NINE:
                return False
            value = value * 10 + (byte - _ZERO)
            if value > _INT32_MAX:
                return False
            pos += 1
        parsed[row] = value
    return True


@compiled
def _read_micros(
    data: int, offsets: Any, lowest: float, end: float, powers: Any, micros: Any
) -> bool:
    """Fill ``micros`` from each value's seconds; False at the first value that is not plain
    digits with at most one dot between them, has more digits than a double holds exactly,
    or lies outside [``lowest``, ``end``)."""
    for row in range(offsets.shape[0] - 1):
        pos = int(offsets[row])
        stop = int(offsets[row + 1])
        mantissa = 0
        whole = 0  # digits before the dot
        fraction = -1  # digits after it; -1 while no dot was seen
        while pos < stop:
            byte = byte_at(data, pos)
            if _ZERO <= byte <= _NINE:
                mantissa = mantissa * 10 + (byte - _ZERO)
                if mantissa > _EXACT_INTEGER:
                    return False
                if fraction < 0:
                    whole += 1
                else:
                    fraction += 1
            elif byte == _DOT and fraction < 0 and whole > 0:
                fraction = 0
            else:
                return False
            pos += 1
        if whole == 0 or fraction == 0 or fraction >= powers.shape[0]:
            return False
        seconds = float(mantissa) / powers[max(fraction, 0)]
        scaled = seconds * 1_000_000.0
        if not (scaled >= lowest and scaled < end):
            return False
        micros[row] = int(scaled)
    return True

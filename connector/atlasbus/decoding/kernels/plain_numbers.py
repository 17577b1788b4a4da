"""A column page's decimal fields read where they lie, by compiled loops (executor).

``priority`` and ``delivery_attempts`` are decimal integers, ``enqueued_time`` a decimal number of
seconds. Arrow's kernels read them in a pass per step, each making an array (the text checked as
UTF-8, then as digits, then cast; the seconds multiplied, compared, cast): 26 and 44 ns an entry.
Here one loop reads each value's digits. Only the plain spellings publishers write are read here:
digits, and for seconds one dot between digits. For a column holding any other spelling these give
None, and ``atlasbus.decoding.decoder`` reads it the general way, which gives the same values and
the errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.decoding.kernels.ascii_text import offsets_within, outside_data
from atlasbus.decoding.kernels.compiler import binary_column, byte_at, compiled, inlined

_ZERO, _NINE, _DOT = 48, 57, 46
_INT32_MAX = 2**31 - 1
# Up to 2**53 every integer is a double, and 10**22 is the largest power of ten that is one:
# the quotient of two such doubles is the decimal's value correctly rounded, as Arrow's
# parser (and Python's float) give it.
_EXACT_INTEGER = 2**53
_POWERS_OF_TEN = np.array([10.0**k for k in range(23)])


def plain_int32(values: pa.Array) -> pa.Array | None:
    """A binary column of plain decimal integers (ASCII digits, at most 2147483647) as int32;
    None when some value is anything else. Raises ``outside_data`` for a column built wrong."""
    column = binary_column(values)
    if column is None:
        return None
    data, offsets = column
    parsed = np.empty(len(values), np.int32)
    read = _read_int32(data, offsets, parsed)
    if read == _OUTSIDE_DATA:
        raise outside_data("reading integers")
    if read == _NOT_PLAIN:
        return None
    return pa.array(parsed, pa.int32())


def plain_micros(values: pa.Array, lowest: float, end: float) -> pa.Array | None:
    """A binary column of plain decimal seconds as microseconds (int64, rounded toward zero);
    None when some value is spelled otherwise, or is not in [``lowest``, ``end``) microseconds.

    The microseconds are the seconds' double times 1,000,000.0, as ``atlasbus.decoding.decoder``
    computes them from Arrow's parse. Raises ``outside_data`` for a column built wrong.
    """
    column = binary_column(values)
    if column is None:
        return None
    data, offsets = column
    micros = np.empty(len(values), np.int64)
    read = _read_micros(data, offsets, lowest, end, _POWERS_OF_TEN, micros)
    if read == _OUTSIDE_DATA:
        raise outside_data("reading seconds")
    if read == _NOT_PLAIN:
        return None
    return pa.array(micros, pa.int64())


# What the readers below return.
_READ, _NOT_PLAIN, _OUTSIDE_DATA = range(3)


@inlined
def _column_within(size: int, offsets: Any, output: Any) -> bool:
    """The readers' entry check: the offsets lie within the column's ``size`` bytes, and
    ``output`` has a row for each value. Every byte then read lies between a value's offset
    and the next."""
    return bool(output.shape[0] + 1 == offsets.shape[0] and offsets_within(offsets, size))


@compiled
def _read_int32(data: Any, offsets: Any, parsed: Any) -> int:
    """Fill ``parsed`` with each value's digits; ``_NOT_PLAIN`` at the first value that is not
    plain.

    In bounds: ``_column_within`` first; each value's bytes are read only below its end.
    """
    address, size = data.ctypes.data, data.shape[0]
    if not _column_within(size, offsets, parsed):
        return _OUTSIDE_DATA
    for row in range(offsets.shape[0] - 1):
        pos = int(offsets[row])
        end = int(offsets[row + 1])
        if pos == end:
            return _NOT_PLAIN
        value = 0
        while pos < end:
            byte = byte_at(address, pos)
            if byte < _ZERO or byte > _NINE:
                return _NOT_PLAIN
            value = value * 10 + (byte - _ZERO)
            if value > _INT32_MAX:
                return _NOT_PLAIN
            pos += 1
        parsed[row] = value
    return _READ


@compiled
def _read_micros(
    data: Any, offsets: Any, lowest: float, end: float, powers: Any, micros: Any
) -> int:
    """Fill ``micros`` from each value's seconds; ``_NOT_PLAIN`` at the first value that is not
    plain digits with at most one dot between them, has more digits than a double holds
    exactly, or lies outside [``lowest``, ``end``).

    In bounds: ``_column_within`` first; each value's bytes are read only below its end, and
    ``powers`` only below its length (checked per value: the count of fraction digits).
    """
    address, size = data.ctypes.data, data.shape[0]
    if not _column_within(size, offsets, micros):
        return _OUTSIDE_DATA
    for row in range(offsets.shape[0] - 1):
        pos = int(offsets[row])
        stop = int(offsets[row + 1])
        mantissa = 0
        whole = 0  # digits before the dot
        fraction = -1  # digits after it; -1 while no dot was seen
        while pos < stop:
            byte = byte_at(address, pos)
            if _ZERO <= byte <= _NINE:
                mantissa = mantissa * 10 + (byte - _ZERO)
                if mantissa > _EXACT_INTEGER:
                    return _NOT_PLAIN
                if fraction < 0:
                    whole += 1
                else:
                    fraction += 1
            elif byte == _DOT and fraction < 0 and whole > 0:
                fraction = 0
            else:
                return _NOT_PLAIN
            pos += 1
        if whole == 0 or fraction == 0 or fraction >= powers.shape[0]:
            return _NOT_PLAIN
        seconds = float(mantissa) / powers[max(fraction, 0)]
        scaled = seconds * 1_000_000.0
        if not (scaled >= lowest and scaled < end):
            return _NOT_PLAIN
        micros[row] = int(scaled)
    return _READ

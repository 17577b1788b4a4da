"""The compiled reading of a column page's numbers gives what Arrow's kernels give, edge to edge.

A column page's ``priority``, ``delivery_attempts`` and ``enqueued_time`` are read by
``atlasbus.decoding.kernels.plain_numbers`` when every value is plainly spelled; the same values as a list go
through Arrow's casts. Both must give the same column and the same errors, and the compiled
reading must take every plain value and leave everything else to the general path.
"""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from atlasbus.decoding.decoder import _END_MICROS, _MIN_MICROS, _Errors, _int_column, _time_column
from atlasbus.decoding.kernels.plain_numbers import plain_int32, plain_micros

INT32_MAX = 2**31 - 1
NOT_PLAIN_INTEGERS = [b"", b"-1", b"+1", b" 1", b"1 ", b"0x10", b"1.0", b"1e3", "\u0661".encode()]
NOT_PLAIN_SECONDS = [
    b"",
    b".5",
    b"5.",
    b"1.2.3",
    b"-1.5",
    b"+1.5",
    b"1e9",
    b"inf",
    b"nan",
    b" 1.5",
    b"1.5 ",
    b"1_000.5",
    b"\xff",
]


def _decoded_int(values: list[bytes] | pa.Array) -> tuple[list[int | None], object]:
    size = len(values)
    errors = _Errors(size)
    column = _int_column(values, b"priority", errors, default=None)
    return column.to_pylist(), errors.messages


def _decoded_time(values: list[bytes] | pa.Array) -> tuple[pa.Array, object]:
    errors = _Errors(len(values))
    return _time_column(values, errors), errors.messages


integer_texts = st.one_of(
    st.integers(0, INT32_MAX).map(lambda n: str(n).encode()),
    st.sampled_from([0, 9, 10, INT32_MAX - 1, INT32_MAX, INT32_MAX + 1, 10**10, 10**19]).map(
        lambda n: str(n).encode()
    ),
    st.tuples(st.integers(1, 12), st.integers(0, INT32_MAX)).map(
        lambda z: b"0" * z[0] + str(z[1]).encode()
    ),
    st.sampled_from(NOT_PLAIN_INTEGERS),
)


def _is_plain_integer(text: bytes) -> bool:
    return text.isdigit() and text.isascii() and int(text) <= INT32_MAX


@settings(max_examples=300, deadline=None)
@given(st.lists(integer_texts, min_size=1, max_size=12))
def test_integers_match_arrows_cast_and_errors(texts: list[bytes]) -> None:
    column = pa.array(texts, pa.binary())

    assert _decoded_int(column) == _decoded_int(texts)
    plain = plain_int32(column)
    if all(map(_is_plain_integer, texts)):
        assert plain is not None
        assert plain.to_pylist() == [int(text) for text in texts]
    else:
        assert plain is None


def _seconds_text(whole: int, fraction: str, zeros: int) -> bytes:
    return ("0" * zeros + str(whole) + (f".{fraction}" if fraction else "")).encode()


seconds_texts = st.one_of(
    # as publishers write them, f"{time.time():.6f}": the product with 1e6 lies near an
    # integer, so a value's last bit decides the microsecond it truncates to
    st.builds(
        lambda whole, digits, places: f"{whole}.{digits % 10**places:0{places}d}".encode(),
        st.integers(0, 4 * 10**9),
        st.integers(0, 10**9),
        st.integers(1, 9),
    ),
    st.builds(
        _seconds_text,
        st.integers(0, 10**17),
        st.text("0123456789", max_size=23),
        st.integers(0, 3),
    ),
    # around the largest exact mantissa, 2**53 = 9007199254740992, with the dot anywhere
    st.builds(
        lambda digits, dot: (digits[:dot] + "." + digits[dot:]).encode(),
        st.integers(2**53 - 3, 2**53 + 3).map(str),
        st.integers(1, 15),
    ),
    st.floats(-1e12, 1e12).map(lambda f: repr(f).encode()),
    st.sampled_from([b"253402127999.999999", b"253402128000", b"253402128000.0000001"]),
    st.sampled_from(NOT_PLAIN_SECONDS),
)


def _is_plain_seconds(text: bytes) -> bool:
    whole, dot, fraction = text.decode("latin-1").partition(".")
    digits = whole + fraction
    return (
        whole.isdigit()
        and whole.isascii()
        and (not dot or (fraction.isdigit() and fraction.isascii() and len(fraction) <= 22))
        and int(digits) <= 2**53
        and _MIN_MICROS <= float(text) * 1e6 < _END_MICROS
    )


@settings(max_examples=400, deadline=None)
@given(st.lists(seconds_texts, min_size=1, max_size=12))
def test_seconds_match_arrows_parse_and_errors(texts: list[bytes]) -> None:
    column = pa.array(texts, pa.binary())

    compiled, compiled_errors = _decoded_time(column)
    by_arrow, arrow_errors = _decoded_time(texts)

    assert compiled.equals(by_arrow)
    assert compiled_errors == arrow_errors
    plain = plain_micros(column, _MIN_MICROS, _END_MICROS)
    if all(map(_is_plain_seconds, texts)):
        assert plain is not None
        assert plain.to_pylist() == [math.trunc(float(text) * 1e6) for text in texts]
    else:
        assert plain is None


def test_the_wire_formats_own_spelling_is_read_compiled() -> None:
    texts = [b"1764201600.123456", b"1764201600", b"0.000001", b"0001764201600.5"]

    plain = plain_micros(pa.array(texts, pa.binary()), _MIN_MICROS, _END_MICROS)

    assert plain is not None
    assert plain.to_pylist() == [math.trunc(float(text) * 1e6) for text in texts]
    assert plain.to_pylist()[1:] == [1764201600000000, 1, 1764201600500000]


def test_a_slice_reads_its_own_values() -> None:
    column = pa.array([b"7", b"8", b"9"], pa.binary()).slice(1)
    seconds = pa.array([b"1.5", b"2.5", b"3.5"], pa.binary()).slice(1)

    assert plain_int32(column) == pa.array([8, 9], pa.int32())
    assert plain_micros(seconds, _MIN_MICROS, _END_MICROS) == pa.array(
        [2_500_000, 3_500_000], pa.int64()
    )

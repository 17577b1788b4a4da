"""The compiled column kernels read and write only within their buffers, whatever the bytes.

Each column's bytes are laid so that the last is the last byte before a page no access is
allowed to (``guarded_bytes``): a read past a value at the end of the data kills the process
with SIGSEGV. So the fuzzing runs in a child process (this file run as a script), and a test
first shows that a read just past the data does kill it. Each wrapper's result is held to
what its module's general path (or Python) gives, and a page cut into columns must decode to
the rows its entries decode to as hiredis's lists.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atlasbus.decoding.decoder import (
    _END_MICROS,
    _MAX_ID_MS,
    _MIN_MICROS,
    _Errors,
    _int_column,
    _map_column,
    _payload_column,
    _text_column,
    _time_column,
    _timestamps_of,
)
from guarded_memory import GuardedBuffer
from helpers import WIRE


def guarded_bytes(data: bytes) -> np.ndarray:
    """``data`` in an array of its own whose last byte is the last before the guard page (the
    array keeps the mapping alive)."""
    return GuardedBuffer(len(data)).ending_with(data)


def guarded_column(values: list[bytes], skip: int = 0) -> pa.Array:
    """``values`` as a binary column over ``guarded_bytes``, the first ``skip`` sliced off."""
    offsets = np.zeros(len(values) + 1, np.int32)
    np.cumsum([len(value) for value in values], out=offsets[1:])
    data = guarded_bytes(b"".join(values))
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), len(values), buffers).slice(skip)


# --- the fuzzing, run in a child process -----------------------------------------------------

FUZZ = settings(max_examples=200, deadline=None, database=None)
TOKENS = [
    *(b"{", b"}", b"[", b"]", b'"', b"\\", b"\\u", b"\\ud83d", b"\\ude00", b"\\u00e9", b"\\x41"),
    *(b'\\"', b"\\\\", b"\\n", b":", b",", b" ", b"\n", b"null", b"nul", b"true", b"fals"),
    *(b"false", b"0", b"7", b"-", b".", b"e", b"E+", b"1e308", b"1.7976931348623157e308"),
    *(b"17976931348623159", b"x", b"a", b"\xc3\xa9", b"\xff", b"\x00", b"\x1f", b"9" * 20),
]
JSONISH = st.lists(st.sampled_from(TOKENS), max_size=24).map(b"".join)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
DOCUMENTS = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
OBJECTS = st.builds(
    lambda document, indent, ascii_only: json.dumps(
        document, indent=indent, ensure_ascii=ascii_only
    ).encode(),
    st.dictionaries(st.text(max_size=6), DOCUMENTS, max_size=4)
    | st.dictionaries(st.text(max_size=8), st.none() | st.text(max_size=12), max_size=4),
    st.sampled_from([None, 0, 1]),
    st.booleans(),
)
TRUNCATED = st.builds(lambda text, cut: text[: max(0, len(text) - cut)], OBJECTS, st.integers(0, 9))
RUNS = st.builds(
    lambda head, run, times, tail: head + run * times + tail,
    st.sampled_from([b"", b'{"k":"', b'{"k":', b'"', b"{", b"1-", b"12."]),
    st.sampled_from([b"\\", b'"', b"\\u", b"\\\\", b'\\"', b"\\x", b" ", b"[", b'{"a":', b"9"]),
    st.integers(0, 40),
    st.sampled_from([b"", b'"', b'"}', b"}", b"\\", b"-0"]),
)
NUMBERS = (
    st.integers(0, 2**70).map(lambda n: str(n).encode())
    | st.from_regex(rb"\A[0-9]{0,24}(\.[0-9]{0,24})?\Z")
    | st.floats(0, 1e12).map(lambda x: repr(x).encode())
)
IDS = st.builds(lambda ms, seq: b"%d-%d" % (ms, seq), st.integers(0, 2**64 - 1), st.integers(0, 99))
VALUES = st.one_of(
    st.binary(max_size=40),
    JSONISH,
    OBJECTS,
    TRUNCATED,
    RUNS,
    NUMBERS,
    IDS,
    st.from_regex(rb"\A0*[0-9]{0,17}-"),
)
PADDING = st.sampled_from([b" ", b"\\", b'"', b"0", b"a", b"}", b"\xe9", b"-"])


@st.composite
def columns(draw: st.DrawFn, values: st.SearchStrategy[bytes] = VALUES) -> tuple[list[bytes], int]:
    """Values, the last (at the end of the buffer) of any length from 0 to 40, and how many
    rows to slice off the front."""
    drawn = draw(st.lists(values, max_size=6))
    length = draw(st.integers(0, 40))
    last = (draw(values) + draw(PADDING) * 40)[:length]
    return [*drawn, last], draw(st.integers(0, len(drawn)))


def check_column(values: list[bytes], skip: int = 0) -> None:
    """Every column wrapper over ``values`` laid against the guard page, each held to what
    its general path (or Python) makes of the same values."""
    from atlasbus.decoding.kernels.ascii_text import text_column
    from atlasbus.decoding.kernels.flat_json_maps import flat_string_maps
    from atlasbus.decoding.kernels.id_times import id_microseconds
    from atlasbus.decoding.kernels.json_objects import json_object_texts
    from atlasbus.decoding.kernels.plain_numbers import plain_int32, plain_micros
    from atlasbus.decoding.kernels.raw_field_maps import _raw_texts
    from atlasbus.wire.raw_text import raw_text

    column = guarded_column(values, skip)
    values = values[skip:]
    try:
        expected_text: pa.Array | None = pa.array(values, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        expected_text = None
    if expected_text is None:
        with pytest.raises(pa.ArrowInvalid):
            text_column(column)
    else:
        assert text_column(column).equals(expected_text)
    assert _raw_texts(column).to_pylist() == [raw_text(value) for value in values]

    micros = id_microseconds(column, _MAX_ID_MS)
    assert (micros and micros.to_pylist()) == _id_micros(values, _MAX_ID_MS)
    plain = plain_int32(column)
    assert (plain and plain.to_pylist()) == _plain_int32(values)
    seconds = plain_micros(column, _MIN_MICROS, _END_MICROS)
    assert (seconds and seconds.to_pylist()) == _plain_micros(values, _MIN_MICROS, _END_MICROS)

    objects = json_object_texts(column)
    if objects is not None:  # only ever yes where orjson says yes
        assert all(type(orjson.loads(value)) is dict for value in values)
        assert objects.to_pylist() == [value.decode() for value in values]
    maps = flat_string_maps(column)
    if maps is not None:
        assert maps.to_pylist() == [list(orjson.loads(value).items()) for value in values]

    for decode_column in DECODED_COLUMNS:  # the column as decode reads it, and as a list
        assert _decoded(decode_column, column) == _decoded(decode_column, values)
    if expected_text is not None:
        try:
            by_arrow = _timestamps_of(expected_text)
        except pa.ArrowInvalid:  # not digits and a hyphen, or past 2**64: not from Redis
            return
        assert _timestamps_of(expected_text, column).equals(by_arrow)


def _decoded(decode_column: Callable[..., pa.Array], values: Any) -> Any:
    """What one of decode's column functions gives for ``values``: the column and each row's
    error, or the exception it raised."""
    errors = _Errors(len(values))
    try:
        column = decode_column(values, errors)
    except Exception as exc:  # the same failure both ways
        return type(exc)
    return column.to_pylist(), errors.messages, errors.reasons


DECODED_COLUMNS = (
    _payload_column,
    _time_column,
    lambda values, errors: _int_column(values, b"priority", errors, default=None),
    lambda values, errors: _map_column(values, b"tracing", errors),
    lambda values, errors: _text_column(values, b"correlation_id", errors),
)


def _id_micros(values: list[bytes], last_ms: int) -> list[int | None] | None:
    """What Arrow's split and cast of the IDs give (``atlasbus.decoding.decoder._timestamps_of``)."""
    micros: list[int | None] = []
    for value in values:
        found = re.match(rb"([0-9]+)-", value)
        if found is None:
            return None
        ms = int(found.group(1))
        micros.append(ms * 1000 if ms <= last_ms else None)
    return micros


def _plain_int32(values: list[bytes]) -> list[int] | None:
    plain = all(re.fullmatch(rb"[0-9]+", value) for value in values)
    if not plain or any(int(value) >= 2**31 for value in values):
        return None
    return [int(value) for value in values]


def _plain_micros(values: list[bytes], lowest: float, end: float) -> list[int] | None:
    """Python's float of plain seconds (digits, one dot between digits) as microseconds; None
    where the compiled reader leaves the column to Arrow's cast."""
    micros = []
    for value in values:
        if re.fullmatch(rb"[0-9]+(\.[0-9]+)?", value) is None:
            return None
        digits = value.replace(b".", b"")
        if int(digits) > 2**53 or len(value) - len(value.split(b".")[0]) - 1 > 22:
            return None
        scaled = float(value) * 1_000_000.0
        if not lowest <= scaled < end:
            return None
        micros.append(int(scaled))
    return micros


NAMES = st.sampled_from(WIRE) | st.binary(max_size=6) | st.sampled_from([b"\\x", b"\\xff", b"\xe9"])


@st.composite
def pages(draw: st.DrawFn) -> list[Any]:
    """Entries as hiredis gives them: IDs as Redis writes them, most wire fields present with
    any values (the last entry's last value at the end of its buffer), some other names."""
    entries = []
    for number in range(draw(st.integers(1, 5))):
        names = [name for name in WIRE if draw(st.integers(0, 5))] + draw(
            st.lists(NAMES, max_size=2)
        )
        fields = [part for name in names for part in (name, draw(VALUES))]
        entries.append([b"%d-%d" % (draw(st.integers(0, 2**48)), number), fields])
    if entries[-1][1]:
        entries[-1][1][-1] = (entries[-1][1][-1] + draw(PADDING) * 40)[: draw(st.integers(0, 40))]
    return entries


def guarded_pages(entries: list[Any]) -> Iterator[Any]:
    """The page cut as ``atlasbus.decoding.kernels.cut_one_layout`` would (when its entries share a layout), as
    ``atlasbus.decoding.kernels.cut_any_layout`` would, and as both joined, every column against a guard page."""
    from atlasbus.decoding.cut_pages import ColumnPage, MixedPage, PairPage

    def pair_page(part: list[Any]) -> PairPage:
        counts = [len(fields) // 2 for _, fields in part]
        return PairPage(
            guarded_column([entry_id for entry_id, _ in part]),
            pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)),
            guarded_column([name for _, fields in part for name in fields[0::2]]),
            guarded_column([value for _, fields in part for value in fields[1::2]]),
        )

    def column_page(part: list[Any]) -> ColumnPage:
        columns = {
            name: guarded_column([fields[2 * index + 1] for _, fields in part])
            for index, name in enumerate(names)
        }
        return ColumnPage(guarded_column([entry_id for entry_id, _ in part]), names, columns)

    yield pair_page(entries)
    names = list(entries[0][1][0::2])
    if len(set(names)) == len(names) and all(list(f[0::2]) == names for _, f in entries):
        yield column_page(entries)
        if len(entries) > 1:
            yield MixedPage((pair_page(entries[:1]), column_page(entries[1:])))


def check_page(entries: list[Any]) -> None:
    """Each guarded cut of the page decodes, with its raw fields, to the rows its entries
    decode to as lists; its fields picked by name are each entry's last of that name."""
    from atlasbus.decoding.decoder import decode_envelope_page, decode_raw
    from atlasbus.decoding.wanted_fields import wanted_columns

    def decoded(page: Any) -> Any:
        found = decode_envelope_page(page, topic="t", stream="s:t", include_raw_fields=True)
        raw = decode_raw(page, topic="t", stream="s:t")
        return found.batch.to_pylist(), found.reasons, raw.to_pylist()

    expected = decoded(entries)
    by_entry = [dict(zip(fields[0::2], fields[1::2], strict=True)) for _, fields in entries]
    for page in guarded_pages(entries):
        assert decoded(page) == expected
        wanted = list(dict.fromkeys([*WIRE, *(name for fields in by_entry for name in fields)]))
        for name, column in wanted_columns(page, wanted).items():
            values = column if isinstance(column, pa.Array) else column.values
            assert values.to_pylist() == [one[name] for one in by_entry if name in one]


@FUZZ
@given(columns())
def fuzz_columns(drawn: tuple[list[bytes], int]) -> None:
    check_column(*drawn)


@FUZZ
@given(columns(JSONISH | TRUNCATED | RUNS))
def fuzz_json_columns(drawn: tuple[list[bytes], int]) -> None:
    check_column(*drawn)


@FUZZ
@given(pages())
def fuzz_pages(entries: list[Any]) -> None:
    check_page(entries)


# Texts cut at every length from 0 to 40, each cut the last value of a column.
SWEPT = [
    b'{"key": "value", "other": null, "n": "' + b"a" * 30 + b'"}',
    b'{"k":"\\u00e9\\ud83d\\ude00\\n\\"' + b"\\\\" * 10 + b'"}',
    b'{"a": [1, -2.5e+10, true, false, null, {"b": "c"}], "d": 1.7976931348623157e308}',
    b'{"a":"b","c":"d","e":"f","g":"h","i":"j","k":"l","m":"n"}',
    b"1234567890.123456789012345678901234567890",
    b"1700000000000-0" + b"7" * 30,
    b"00000000000000000001700000000000-0",  # Arrow's cast reads 1700000000000
    b"\\" * 45,
    b'"' * 45,
    b"\\x41\\x" * 9,
]


def sweep_lengths() -> None:
    for text in SWEPT:
        for length in range(41):
            check_column([text[:length]])
            check_column([b'{"a":"b"}', text[:length]])


def read_past_the_data() -> None:
    """A compiled helper told its value ends 4 bytes past the data reads on, into the guard
    page: what every kernel's entry check prevents."""
    from atlasbus.decoding.kernels.json_lexer import _code_unit

    data = guarded_bytes(b'{"k":"\\u')
    print("read to the end:", _code_unit(data.ctypes.data, len(data) - 2, len(data)), flush=True)
    _code_unit(data.ctypes.data, len(data) - 2, len(data) + 4)
    print("read past the end", flush=True)


CHILD_RUNS: dict[str, Callable[[], None]] = {
    "columns": fuzz_columns,
    "json_columns": fuzz_json_columns,
    "pages": fuzz_pages,
    "lengths": sweep_lengths,
    "past_the_data": read_past_the_data,
}


def run_in_child(*names: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-X", "faulthandler", __file__, *names]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


# --- the tests -------------------------------------------------------------------------------


def test_a_read_past_the_data_is_killed_by_the_guard_page() -> None:
    done = run_in_child("past_the_data")

    assert done.returncode == -signal.SIGSEGV, done.stderr
    assert "read to the end: -1" in done.stdout
    assert "read past the end" not in done.stdout


def test_every_kernel_stays_within_guarded_columns_and_agrees_with_the_general_paths() -> None:
    done = run_in_child("lengths", "columns", "json_columns", "pages")

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["lengths", "columns", "json_columns", "pages"]


BROKEN_DATA = guarded_bytes(b'{"a":"b"}1-0')
OUTSIDE = "offsets lie outside its data"


def broken_column(offsets: list[int], kind: pa.DataType | None = None) -> pa.Array:
    """Values of ``BROKEN_DATA`` at ``offsets``: Arrow checks only the first and the last."""
    buffers = [None, pa.py_buffer(np.array(offsets, np.int32)), pa.py_buffer(BROKEN_DATA)]
    return pa.Array.from_buffers(kind or pa.binary(), len(offsets) - 1, buffers)


@pytest.mark.parametrize("offsets", [[0, 10, 9], [9, 0, 12], [0, 12, 3, 12]])
def test_a_column_whose_offsets_run_backwards_is_refused_unread(offsets: list[int]) -> None:
    """Raised before any byte is read (a read past the data would kill the tests' process)."""
    from atlasbus.decoding.cut_pages import ColumnPage
    from atlasbus.decoding.kernels.flat_json_maps import flat_string_maps
    from atlasbus.decoding.kernels.id_times import id_microseconds
    from atlasbus.decoding.kernels.json_objects import json_object_texts
    from atlasbus.decoding.kernels.plain_numbers import plain_int32, plain_micros
    from atlasbus.decoding.wanted_fields import raw_maps

    column = broken_column(offsets)
    ids = guarded_column([b"%d-0" % row for row in range(len(column))])
    for wrapper in (
        flat_string_maps,
        json_object_texts,
        plain_int32,
        lambda values: id_microseconds(values, _MAX_ID_MS),
        lambda values: plain_micros(values, _MIN_MICROS, _END_MICROS),
        lambda values: raw_maps(ColumnPage(ids, [b"k"], {b"k": values})),
    ):
        with pytest.raises(ValueError, match=OUTSIDE):
            wrapper(column)


@pytest.mark.parametrize("offsets", [[0, 9, 13], [-1, 9, 12], [0, 9, 2**31 - 1]])
def test_a_kernel_given_offsets_outside_its_data_says_so_unread(offsets: list[int]) -> None:
    """Offsets Arrow would refuse (a column built elsewhere, or a caller's mistake)."""
    from atlasbus import (
        flat_json_maps,
        id_times,
        json_object_column,
        pair_fields,
        plain_numbers,
        raw_field_column,
    )
    from atlasbus.decoding.kernels.ascii_text import all_ascii

    data, at = BROKEN_DATA, np.array(offsets, np.int32)
    rows = len(offsets) - 1
    with pytest.raises(ValueError, match=OUTSIDE):
        all_ascii(data, offsets[0], offsets[-1])
    assert raw_field_column._has_escape_text(data, offsets[0], offsets[-1]) == -1
    found = id_times._id_micros(data, at, _MAX_ID_MS, np.empty(rows, np.int64))
    assert found == id_times._OUTSIDE_DATA
    found = plain_numbers._read_int32(data, at, np.empty(rows, np.int32))
    assert found == plain_numbers._OUTSIDE_DATA
    powers = np.ones(23)
    found = plain_numbers._read_micros(data, at, 0.0, 1e20, powers, np.empty(rows, np.int64))
    assert found == plain_numbers._OUTSIDE_DATA
    found = json_object_column._all_objects(data, at, np.empty(64, np.uint8))
    assert found == json_object_column._OUTSIDE_DATA
    assert flat_json_maps._flat_maps(data, at)[0] == flat_json_maps._OUTSIDE_DATA
    assert pair_fields._gathered(data, at, np.zeros((1, 1), np.int64)) is None
    field_offsets = np.array([0, rows], np.int32)
    wanted, wanted_at = np.frombuffer(b"a", np.uint8), np.array([0, 1], np.int64)
    assert pair_fields._last_places(data, at, field_offsets, wanted, wanted_at) is None
    addresses, sizes = np.array([data.ctypes.data]), np.array([len(data)])
    assert raw_field_column._interleave(addresses, sizes, at.reshape(1, -1)) is None


@pytest.mark.parametrize("part", ["names", "field_offsets", "values"])
def test_a_pair_page_built_wrong_is_refused_unread(part: str) -> None:
    from atlasbus.decoding.cut_pages import PairPage
    from atlasbus.decoding.wanted_fields import wanted_columns

    parts = {
        "ids": guarded_column([b"1-0", b"2-0"]),
        "field_offsets": pa.array([0, 1, 2], pa.int32()),
        "names": guarded_column([b"payload", b"payload"]),
        "values": guarded_column([b"{}", b"{}"]),
    }
    parts[part] = {
        "names": broken_column([0, 10, 9]),
        "field_offsets": pa.array([0, 1, 3], pa.int32()),  # a third name that is not there
        "values": guarded_column([b"{}"]),  # one value for two names
    }[part]

    with pytest.raises(ValueError, match=OUTSIDE):
        wanted_columns(PairPage(**parts), [b"payload"])


if __name__ == "__main__":
    for name in sys.argv[1:]:
        CHILD_RUNS[name]()
        print(name, flush=True)

"""Turn raw XRANGE replies into Arrow record batches of the read schema.

This is the hot path: every entry the source reads passes through here. Work is done column by
column with Arrow kernels; Python touches each entry only to pick its values out of the reply and to
validate the JSON of ``payload`` (``atlasbus.wire.json_object_check``), ``tracing`` and ``metadata``
(orjson, which also builds their maps, unless a column page's objects are all flat objects of
strings: ``atlasbus.decoding.kernels.flat_json_maps``). A malformed entry never raises: it becomes a
row whose ``error`` says what is wrong and whose ``fields`` hold the raw entry
(``atlasbus.wire.raw_text``), so nothing is lost.

An entry decodes the same whatever its neighbours on the page: each column has a fast path for
a page whose values are all of the common, plainly well-formed shape, and a per-row path for the
rest, and both give every value the same result. The fast paths only take values whose result
they are sure to agree on (a strict pattern checked by an Arrow kernel); anything else goes the
per-row way, which implements the documented grammar (docs/wire-format.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, TypeAlias

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from atlasbus.decoding.cut_pages import ColumnPage, MixedPage, PairPage, PartialColumn
from atlasbus.model.read_schema import ENVELOPE_SCHEMA, RAW_SCHEMA, STRING_MAP, TIMESTAMP
from atlasbus.model.reason_codes import (
    DECODE_REASONS,
    INVALID_INTEGER,
    INVALID_JSON,
    INVALID_TIMESTAMP,
    INVALID_UTF8,
    MISSING_FIELD,
    NOT_JSON_OBJECT,
)
from atlasbus.wire import envelope as wire
from atlasbus.wire.json_object_check import all_json_objects
from atlasbus.wire.raw_text import raw_text, raw_text_array

# One XRANGE reply item: [entry_id, [field1, value1, field2, value2, ...]] as bytes.
RawEntry = Sequence[Any]
# One field's values on a page: from hiredis a list (None where an entry lacks the field), from
# ``atlasbus.decoding.kernels.cut_one_layout`` a binary Arrow array. Column code takes either.
Values: TypeAlias = list[bytes | None] | pa.Array

# The fields the decoder reads.
_DECODED_FIELDS = (
    wire.PAYLOAD,
    wire.PRIORITY,
    wire.DELIVERY_ATTEMPTS,
    wire.CORRELATION_ID,
    wire.TRACING,
    wire.METADATA,
    wire.ENQUEUED_TIME,
)
_EMPTY_OBJECT = b"{}"
# orjson.loads typed for any input: a None among the values raises TypeError, which the
# callers catch to fall back to the per-row path.
_loads_any: Callable[[Any], Any] = orjson.loads
_ID_OF = itemgetter(0)
_FIELDS_OF = itemgetter(1)
_NAMES_OF = itemgetter(slice(0, None, 2))
_VALUES_OF = itemgetter(slice(1, None, 2))


# Reason codes of malformed entries: the first problem found in an entry names its reason.
REASONS = DECODE_REASONS

# The timestamps that both Spark and Python hold, in any time zone: years 1 to 9999 less two
# days at each end, because PySpark's collect() turns a timestamp into a datetime in the
# driver's local time zone (up to 15 hours off UTC, and CPython's fromtimestamp looks a day
# further back), so 0001-01-01T00:00:00Z itself fails to convert even in UTC.
# Seconds since the epoch: 0001-01-03T00:00:00Z, and 9999-12-30T00:00:00Z (excluded).
MIN_EPOCH_SECONDS = -62_135_424_000
END_EPOCH_SECONDS = 253_402_128_000
_MIN_MICROS = float(MIN_EPOCH_SECONDS * 1_000_000)  # exact as floats (multiples of 32)
_END_MICROS = float(END_EPOCH_SECONDS * 1_000_000)
_MAX_ID_MS = END_EPOCH_SECONDS * 1000 - 1

# Grammars (docs/wire-format.md). Surrounding ASCII whitespace is allowed.
_WS = "[ \t\n\v\f\r]*"
_INTEGER = re.compile(f"{_WS}([+-]?[0-9]+){_WS}")
_DECIMAL = re.compile(f"{_WS}([+-]?(?:[0-9]+\\.?[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?){_WS}")


class _Errors:
    """Per-row error messages and reason codes, allocated only when a page has a bad entry."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.messages: list[str | None] | None = None
        self.reasons: list[str | None] | None = None

    def add(self, row: int, message: str, reason: str) -> None:
        if self.messages is None or self.reasons is None:
            self.messages = [None] * self.size
            self.reasons = [None] * self.size
        existing = self.messages[row]
        if existing is None:
            self.messages[row] = message
            self.reasons[row] = reason
        else:
            self.messages[row] = f"{existing}; {message}"


class _ErrorsOfRows(_Errors):
    """The errors of the entries that have a field some lack (``PartialColumn``), decoded on
    their own: each is reported on the page's row of its entry."""

    def __init__(self, page: _Errors, column: PartialColumn) -> None:
        super().__init__(len(column.values))
        self._page = page
        self._column = column
        self._rows: list[int] | None = None  # found at the first error

    def add(self, row: int, message: str, reason: str) -> None:
        if self._rows is None:
            self._rows = self._column.rows(present=True)
        self._page.add(self._rows[row], message, reason)


@dataclass(frozen=True, slots=True)
class DecodedPage:
    """A decoded page, and per row the reason code of a malformed entry (None when all good)."""

    batch: pa.RecordBatch
    reasons: list[str | None] | None


# What ``atlasbus.decoding.kernels.cut_one_layout`` and ``atlasbus.decoding.kernels.cut_any_layout``
# cut a reply into, or hiredis's reply items.
AnyPage: TypeAlias = Sequence[RawEntry] | ColumnPage | PairPage | MixedPage


def decode_envelopes(
    entries: AnyPage, *, topic: str, stream: str, include_raw_fields: bool
) -> pa.RecordBatch:
    """Decode bus envelopes; malformed entries become error rows carrying their raw fields."""
    return decode_envelope_page(
        entries, topic=topic, stream=stream, include_raw_fields=include_raw_fields
    ).batch


def decode_envelope_page(
    entries: AnyPage, *, topic: str, stream: str, include_raw_fields: bool
) -> DecodedPage:
    """``decode_envelopes`` plus each malformed row's reason code (one of ``REASONS``).

    ``entries`` are hiredis's reply items, or a page already cut into columns (a column per
    field, or names and values); all decode to the same rows.
    """
    size = len(entries)
    columns: dict[bytes, Values | PartialColumn]
    binary_ids: pa.Array | None = None
    if isinstance(entries, ColumnPage | PairPage | MixedPage):
        page = entries
        from atlasbus.decoding.kernels.ascii_text import text_column  # see _map_column
        from atlasbus.decoding.wanted_fields import raw_maps, wanted_columns

        binary_ids = page.ids
        ids = text_column(binary_ids)
        columns = dict(wanted_columns(page, _DECODED_FIELDS))

        def raw_fields(only: list[bool] | None) -> pa.Array:
            return _only_rows(raw_maps(page), only)
    else:
        lists = list(map(_FIELDS_OF, entries))
        columns = dict(_columns_by_field(lists))
        ids = _id_array(entries)

        def raw_fields(only: list[bool] | None) -> pa.Array:
            return _raw_fields(lists, only)

    errors = _Errors(size)

    def column(
        name: bytes,
        decode: Callable[[Values | None, _Errors], pa.Array],
        *,
        required: bool = False,
        absent: pa.Scalar | None = None,
    ) -> pa.Array:
        return _decoded(columns.get(name), name, errors, decode, required, absent)

    payload = column(wire.PAYLOAD, _payload_column, required=True)
    priority = column(
        wire.PRIORITY,
        lambda values, e: _int_column(values, wire.PRIORITY, e, default=None),
        required=True,
    )
    attempts = column(
        wire.DELIVERY_ATTEMPTS,
        lambda values, e: _int_column(
            values, wire.DELIVERY_ATTEMPTS, e, default=wire.DEFAULT_DELIVERY_ATTEMPTS
        ),
        absent=pa.scalar(wire.DEFAULT_DELIVERY_ATTEMPTS, pa.int32()),
    )
    correlation_id = column(
        wire.CORRELATION_ID, lambda values, e: _text_column(values, wire.CORRELATION_ID, e)
    )
    tracing = column(
        wire.TRACING, lambda values, e: _map_column(values, wire.TRACING, e), absent=_NO_MAP
    )
    metadata = column(
        wire.METADATA, lambda values, e: _map_column(values, wire.METADATA, e), absent=_NO_MAP
    )
    enqueued = column(wire.ENQUEUED_TIME, _time_column)

    envelope = [priority, correlation_id, payload, tracing, metadata, attempts, enqueued]
    error_column = pa.nulls(size, pa.string())
    raw_rows: list[bool] | None = None
    if errors.messages is not None:
        raw_rows = [m is not None for m in errors.messages]
        bad = pa.array(raw_rows, pa.bool_())
        envelope = [pc.if_else(bad, pa.scalar(None, arr.type), arr) for arr in envelope]
        error_column = pa.array(errors.messages, pa.string())
    if include_raw_fields:
        fields = raw_fields(None)
    elif raw_rows is not None:
        fields = raw_fields(raw_rows)
    else:
        fields = pa.nulls(size, STRING_MAP)

    arrays = [
        _repeat(topic, size),
        _repeat(stream, size),
        ids,
        _timestamps_of(ids, binary_ids),
        *envelope,
        error_column,
        fields,
    ]
    return DecodedPage(pa.RecordBatch.from_arrays(arrays, schema=ENVELOPE_SCHEMA), errors.reasons)


def decode_raw(page: AnyPage, *, topic: str, stream: str) -> pa.RecordBatch:
    """Decode any stream's entries as ``topic, stream, id, timestamp, fields``."""
    size = len(page)
    if isinstance(page, ColumnPage | PairPage | MixedPage):
        from atlasbus.decoding.kernels.ascii_text import text_column  # see _map_column
        from atlasbus.decoding.wanted_fields import raw_maps

        binary_ids = page.ids
        ids = text_column(binary_ids)
        timestamps = _timestamps_of(ids, binary_ids)
        fields = raw_maps(page)
    else:
        ids = _id_array(page)
        timestamps = _timestamps_of(ids)
        fields = _raw_fields(list(map(_FIELDS_OF, page)), None)
    arrays = [_repeat(topic, size), _repeat(stream, size), ids, timestamps, fields]
    return pa.RecordBatch.from_arrays(arrays, schema=RAW_SCHEMA)


# An absent JSON object field's value: an empty map (``pc.if_else`` with it cost 0.3 µs an
# entry, ten times rebuilding the map column).
_NO_MAP = pa.scalar([], STRING_MAP)


def _decoded(
    values: Values | PartialColumn | None,
    name: bytes,
    errors: _Errors,
    decode: Callable[[Values | None, _Errors], pa.Array],
    required: bool,
    absent: pa.Scalar | None,
) -> pa.Array:
    """``decode`` of one field's values on a page.

    A field that some entries lack (``PartialColumn``) is decoded for the entries that have
    it alone, so its values take the column-wide paths a uniform page's do, and the result is
    spread back over the page: ``absent`` (else null) where an entry lacks it, once a required
    field's absence is reported there.
    """
    if not isinstance(values, PartialColumn):
        return decode(values, errors)
    if required:
        _report_missing_rows(values.rows(present=False), name, errors)
    spread = decode(values.values, _ErrorsOfRows(errors, values)).take(values.positions)
    if absent is _NO_MAP:  # the maps' offsets as they are: ``take`` left no entry at a null
        return pa.MapArray.from_arrays(spread.offsets, spread.keys, spread.items)
    # decoded values hold no null that ``absent`` should not replace (bad integers already
    # hold the default; the row is an error row anyway)
    return spread if absent is None else spread.fill_null(absent)


# --- picking values out of the reply ---------------------------------------------------------


def _columns_by_field(field_lists: list[Sequence[bytes]]) -> dict[bytes, list[bytes | None]]:
    """Values per field name (the last one where an entry repeats a name).

    Fast when all entries share one field order (the usual case): the page is flattened with
    ``chain``, and each name's column, a strided slice, is checked with ``count``, all in C,
    so Python does no work per entry.
    """
    if not field_lists:
        return {}
    first = field_lists[0]
    names = first[0::2]
    width = len(first)
    if len(set(names)) == len(names) and set(map(len, field_lists)) == {width}:
        flat: list[bytes | None] = list(chain.from_iterable(field_lists))
        size = len(field_lists)
        positions = list(zip(range(0, width, 2), names, strict=True))
        if all(flat[i::width].count(name) == size for i, name in positions):
            return {name: flat[i + 1 :: width] for i, name in positions}
    by_entry = [dict(zip(f[0::2], f[1::2], strict=False)) for f in field_lists]
    all_names = dict.fromkeys(chain.from_iterable(by_entry))
    return {name: [d.get(name) for d in by_entry] for name in all_names}


def _id_array(entries: Sequence[RawEntry]) -> pa.Array:
    return pa.array(list(map(_ID_OF, entries)), pa.binary()).cast(pa.string())


def _timestamps_of(ids: pa.Array, binary_ids: pa.Array | None = None) -> pa.Array:
    """The ms part of each entry ID as a timestamp; null from 9999-12-30 on (an ID can be set).

    A column page's IDs (``binary_ids``) are read by a compiled loop
    (``atlasbus.decoding.kernels.id_times``).
    """
    if binary_ids is not None:
        from atlasbus.decoding.kernels.id_times import id_microseconds  # see _map_column

        micros = id_microseconds(binary_ids, _MAX_ID_MS)
        if micros is not None:
            return micros.view(TIMESTAMP)
    ms = pc.cast(pc.list_element(pc.split_pattern(ids, "-", max_splits=1), 0), pa.uint64())
    if len(ms) and pc.max(ms).as_py() > _MAX_ID_MS:
        in_range = pc.less_equal(ms, pa.scalar(_MAX_ID_MS, pa.uint64()))
        ms = pc.if_else(in_range, ms, pa.scalar(None, pa.uint64()))
    return pc.multiply(ms.cast(pa.int64()), 1000).cast(TIMESTAMP)


def _as_binary(values: Values) -> pa.Array:
    return values if isinstance(values, pa.Array) else pa.array(values, pa.binary())


def _as_list(values: Values) -> list[bytes | None]:
    return values.to_pylist() if isinstance(values, pa.Array) else values


# Topic and stream columns built so far, by value: a page's is a slice of one (executor).
_repeated: dict[str, pa.Array] = {}
_REPEATED_VALUES = 16  # a reader's streams at a time, well within; past it the cache restarts


def _repeat(value: str, size: int) -> pa.Array:
    """``value`` ``size`` times, sliced from the longest column of it built so far (Arrow
    arrays do not change): building both columns for every page cost 6 ns an entry."""
    column = _repeated.get(value)
    if column is None or len(column) < size:
        if len(_repeated) >= _REPEATED_VALUES:
            _repeated.clear()
        column = _repeated[value] = pa.repeat(pa.scalar(value, pa.string()), size)
    return column.slice(0, size)


# --- typed columns ---------------------------------------------------------------------------


def _report_missing(values: Values | None, name: bytes, errors: _Errors) -> None:
    """Report a required field that is absent (in the whole page or in some entries)."""
    if values is None:
        _report_missing_rows(range(errors.size), name, errors)
    elif isinstance(values, list) and None in values:
        _report_missing_rows([row for row, v in enumerate(values) if v is None], name, errors)


def _report_missing_rows(rows: Iterable[int], name: bytes, errors: _Errors) -> None:
    message = f"missing field '{name.decode()}'"
    for row in rows:
        errors.add(row, message, MISSING_FIELD)


def _utf8(values: Values, name: bytes, errors: _Errors) -> tuple[pa.Array, Values]:
    """The values as a string array, and as bytes with None where they are not valid UTF-8."""
    try:
        if isinstance(values, pa.Array):
            from atlasbus.decoding.kernels.ascii_text import text_column  # see _map_column

            return text_column(values), values
        return _as_binary(values).cast(pa.string()), values
    except pa.ArrowInvalid:
        pass
    text: list[str | None] = []
    valid: list[bytes | None] = []
    for row, value in enumerate(_as_list(values)):
        if value is None:
            text.append(None)
            valid.append(None)
            continue
        try:
            text.append(value.decode("utf-8"))
            valid.append(value)
        except UnicodeDecodeError as exc:
            errors.add(row, _utf8_problem(name, exc), INVALID_UTF8)
            text.append(None)
            valid.append(None)
    return pa.array(text, pa.string()), valid


def _utf8_problem(name: bytes, exc: UnicodeDecodeError) -> str:
    return f"field '{name.decode()}' is not valid UTF-8 (byte {exc.start})"


def _text_column(values: Values | None, name: bytes, errors: _Errors) -> pa.Array:
    """An optional text field: null when absent."""
    if values is None:
        return pa.nulls(errors.size, pa.string())
    return _utf8(values, name, errors)[0]


def _payload_column(values: Values | None, errors: _Errors) -> pa.Array:
    """``payload``: required, UTF-8, a JSON object; kept as its text."""
    _report_missing(values, wire.PAYLOAD, errors)
    if values is None:
        return pa.nulls(errors.size, pa.string())
    if isinstance(values, pa.Array):
        from atlasbus.decoding.kernels.json_objects import json_object_texts  # see _map_column

        checked = json_object_texts(values)
        if checked is not None:
            return checked
    if all_json_objects(_as_list(values)):
        # every value is valid JSON, hence valid UTF-8: no second check needed
        return _as_binary(values).view(pa.string())
    text, valid = _utf8(values, wire.PAYLOAD, errors)
    _check_json_objects(_as_list(valid), wire.PAYLOAD, errors)
    return text


def _int_column(
    values: Values | None, name: bytes, errors: _Errors, *, default: int | None
) -> pa.Array:
    """A decimal integer field (32-bit); required when there is no ``default``."""
    if default is None:
        _report_missing(values, name, errors)
    if values is None:
        return pa.array([default] * errors.size, pa.int32())
    if isinstance(values, pa.Array):
        from atlasbus.decoding.kernels.plain_numbers import plain_int32  # see _map_column

        plain = plain_int32(values)
        if plain is not None:
            return plain
    text, _ = _utf8(values, name, errors)
    parsed = _plain_integers(text)
    if parsed is None:
        parsed = pa.array(
            [_parse_int(value, row, name, errors) for row, value in enumerate(text.to_pylist())],
            pa.int32(),
        )
    if default is not None and parsed.null_count:
        parsed = parsed.fill_null(default)
    return parsed


def _plain_integers(text: pa.Array) -> pa.Array | None:
    """The column as int32 when every value is plain ASCII digits within range, else None.

    Arrow's cast alone would also take ``0x10`` (hex), so only unsigned ASCII digit strings
    are handed to it, on which it agrees with ``_parse_int`` exactly (signed values, spaces
    and anything else take the per-row path).
    """
    if pc.all(pc.ascii_is_decimal(text)).as_py() is False:
        return None
    try:
        return text.cast(pa.int32())
    except pa.ArrowInvalid:  # out of range
        return None


def _parse_int(text: str | None, row: int, name: bytes, errors: _Errors) -> int | None:
    if text is None:
        return None
    match = _INTEGER.fullmatch(text)
    if match is None:
        problem = "must be a decimal integer"
    elif -(2**31) <= (value := int(match.group(1))) < 2**31:
        return value
    else:
        problem = "must be a decimal integer from -2147483648 to 2147483647"
    errors.add(row, f"field '{name.decode()}' {problem}, got {_show_text(text)}", INVALID_INTEGER)
    return None


def _time_column(values: Values | None, errors: _Errors) -> pa.Array:
    """``enqueued_time``, seconds since the epoch as a decimal float; null when absent.

    The range check runs on the whole column at once: a value both Spark's timestamp and
    Python's datetime can hold (years 1 to 9999), checked in floating point before the cast
    to integer microseconds, so nothing can overflow.
    """
    if values is None:
        return pa.nulls(errors.size, TIMESTAMP)
    if isinstance(values, pa.Array):
        from atlasbus.decoding.kernels.plain_numbers import plain_micros  # see _map_column

        plain = plain_micros(values, _MIN_MICROS, _END_MICROS)
        if plain is not None:
            return plain.view(TIMESTAMP)
    text, valid = _utf8(values, wire.ENQUEUED_TIME, errors)
    try:
        # Arrow's parser takes exactly the decimal grammar of ``_DECIMAL`` without the
        # surrounding whitespace, plus spellings of infinity and NaN, which the range check
        # below turns into the same error ``_parse_seconds`` gives them.
        seconds = text.cast(pa.float64())
    except pa.ArrowInvalid:
        seconds = pa.array(
            [_parse_seconds(value, row, errors) for row, value in enumerate(text.to_pylist())],
            pa.float64(),
        )
    micros = pc.multiply(seconds, 1_000_000.0)
    in_range = pc.and_(pc.greater_equal(micros, _MIN_MICROS), pc.less(micros, _END_MICROS))
    if pc.all(in_range).as_py() is False:  # NaN compares false; null: no number to check
        out_of_range = pc.invert(in_range).fill_null(False)
        valid_values = _as_list(valid)
        for row in pc.indices_nonzero(out_of_range).to_pylist():
            value = valid_values[row]
            assert value is not None
            _add_time_problem(row, value.decode("utf-8"), errors)
        micros = pc.if_else(in_range, micros, pa.scalar(None, pa.float64()))
    integral = pc.cast(micros, pa.int64(), safe=False)
    return integral.view(TIMESTAMP) if len(integral) else pa.array([], TIMESTAMP)


def _parse_seconds(text: str | None, row: int, errors: _Errors) -> float | None:
    if text is None:
        return None
    match = _DECIMAL.fullmatch(text)
    if match is not None:
        return float(match.group(1))
    _add_time_problem(row, text, errors)
    return None


def _add_time_problem(row: int, text: str, errors: _Errors) -> None:
    errors.add(
        row,
        f"field 'enqueued_time' must be seconds since the epoch, at least {MIN_EPOCH_SECONDS} "
        f"and below {END_EPOCH_SECONDS} (0001-01-03 to 9999-12-29 UTC), got {_show_text(text)}",
        INVALID_TIMESTAMP,
    )


def _check_json_objects(values: list[bytes | None], name: bytes, errors: _Errors) -> None:
    """Report each value that is not a JSON object (None: absent or already reported).

    Called only once the page's fast check has failed, so every value is judged by orjson.
    """
    loads = orjson.loads
    for row, value in enumerate(values):
        if value is None:
            continue
        try:
            if type(loads(value)) is dict:
                continue
            problem, reason = "is not a JSON object", NOT_JSON_OBJECT
        except orjson.JSONDecodeError:
            problem, reason = "is not valid JSON", INVALID_JSON
        errors.add(row, f"field '{name.decode()}' {problem}: {_show(value)}", reason)


def _map_column(given: Values | None, name: bytes, errors: _Errors) -> pa.Array:
    """A JSON object as ``map<string,string>``; absent: an empty map.

    String values as they are, JSON null as a null value, any other value as its compact JSON
    text with numbers exactly as written.
    """
    size = errors.size
    if given is None:
        return _empty_maps(size)
    if isinstance(given, pa.Array):
        # Column pages come only from atlasbus.decoding.kernels.cut_one_layout, which has loaded
        # numba already; imported here so that decoding hiredis's pages
        # (atlasbus.operations.pending) never loads it.
        from atlasbus.decoding.kernels.flat_json_maps import flat_string_maps

        maps = flat_string_maps(given)
        if maps is not None:
            return maps
    values = _as_list(given)
    if values.count(_EMPTY_OBJECT) == size:
        return _empty_maps(size)
    try:
        parsed = list(map(_loads_any, values))
        if all(map(isinstance, parsed, repeat(dict))):
            return _maps_of(parsed, values)
    except (orjson.JSONDecodeError, TypeError):
        pass
    objects: list[dict[str, Any]] = []
    for row, value in enumerate(values):
        if value is None or value == _EMPTY_OBJECT:
            objects.append({})
            continue
        try:
            one = orjson.loads(value)
        except orjson.JSONDecodeError:
            one = None
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as exc:
                problem, reason = _utf8_problem(name, exc), INVALID_UTF8
            else:
                problem = f"field '{name.decode()}' is not valid JSON: {_show(value)}"
                reason = INVALID_JSON
        else:
            problem = f"field '{name.decode()}' is not a JSON object: {_show(value)}"
            reason = NOT_JSON_OBJECT
        if type(one) is dict:
            objects.append(one)
        else:
            errors.add(row, problem, reason)
            objects.append({})
    return _maps_of(objects, values)


def _maps_of(objects: list[dict[str, Any]], texts: list[bytes | None]) -> pa.Array:
    """Parsed JSON objects as a map column: flattening and offsets run in C (chain, numpy).

    A page whose values are all strings (or null) needs nothing more; an object holding any
    other value is parsed again from its text to keep each value's JSON text (``_texts_of``).
    """
    items = list(chain.from_iterable(map(dict.values, objects)))
    try:
        values = pa.array(items, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        objects = [
            one if _all_text(one) else _texts_of(text, one)
            for one, text in zip(objects, texts, strict=True)
        ]
        values = pa.array(list(chain.from_iterable(map(dict.values, objects))), pa.string())
    lengths = np.fromiter(map(len, objects), np.int32, len(objects))
    offsets = np.zeros(len(objects) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    keys = pa.array(list(chain.from_iterable(objects)), pa.string())
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values)


def _all_text(one: dict[str, Any]) -> bool:
    return all(type(value) is str or value is None for value in one.values())


class _Number(str):
    """A JSON number as written (``json.loads`` hands ``parse_int``/``parse_float`` the text)."""

    __slots__ = ()


def _texts_of(text: bytes | None, parsed: dict[str, Any]) -> dict[str, str | None]:
    """Each value of the JSON object ``text`` as a string: non-strings as compact JSON text.

    orjson already accepted ``text`` (``parsed``); the standard library parses it again only to
    see each number as written (orjson turns a big integer into a float, ``1.50`` into 1.5).
    """
    try:
        exact = json.loads((text or b"").decode("utf-8"), parse_int=_Number, parse_float=_Number)
        if type(exact) is dict and exact.keys() == parsed.keys():
            return {key: _compact(value) for key, value in exact.items()}
    except (ValueError, RecursionError):
        pass
    # Nested too deep for the standard library: orjson's text (numbers as orjson reads them).
    return {
        key: value if value is None or type(value) is str else orjson.dumps(value).decode()
        for key, value in parsed.items()
    }


def _compact(value: Any) -> str | None:
    """A top-level map value as a string: strings as they are, null as None, others as JSON."""
    if value is None or type(value) is str:
        return value
    return _json_text(value)


def _json_text(value: Any) -> str:
    if type(value) is _Number:
        return str.__str__(value)
    if type(value) is dict:
        return (
            "{"
            + ",".join(
                orjson.dumps(key).decode() + ":" + _json_text(item) for key, item in value.items()
            )
            + "}"
        )
    if type(value) is list:
        return "[" + ",".join(map(_json_text, value)) + "]"
    return str(orjson.dumps(value).decode())  # a string, true, false or null


def _empty_maps(size: int) -> pa.Array:
    return pa.MapArray.from_arrays(
        pa.array([0] * (size + 1), pa.int32()), pa.array([], pa.string()), pa.array([], pa.string())
    )


def _raw_fields(field_lists: list[Sequence[bytes]], only: list[bool] | None) -> pa.Array:
    """The raw entry as a map (``atlasbus.wire.raw_text.raw_text``); null where ``only`` is
    False."""
    chosen: list[Sequence[bytes]] = (
        field_lists
        if only is None
        else [flat if keep else () for flat, keep in zip(field_lists, only, strict=True)]
    )
    lengths = np.fromiter(map(len, chosen), np.int32, len(chosen)) // 2
    offsets = np.zeros(len(chosen) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    keys = raw_text_array(list(chain.from_iterable(map(_NAMES_OF, chosen))))
    items = raw_text_array(list(chain.from_iterable(map(_VALUES_OF, chosen))))
    return _only_rows(pa.MapArray.from_arrays(pa.array(offsets), keys, items), only)


def _only_rows(maps: pa.Array, only: list[bool] | None) -> pa.Array:
    """``maps`` where ``only`` is True, null elsewhere; all of them without ``only``."""
    if only is None:
        return maps
    return pc.if_else(pa.array(only, pa.bool_()), maps, pa.scalar(None, STRING_MAP))


def _show(value: bytes, limit: int = 80) -> str:
    return _show_text(raw_text(value), limit)


def _show_text(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")

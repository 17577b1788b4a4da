"""Turn raw XRANGE replies into Arrow record batches of the read schema.

This is the hot path: every entry the source reads passes through here. Work is done column
by column with Arrow kernels; Python touches each entry only to pick its values out of the
reply and to validate the JSON of ``payload``, ``tracing`` and ``metadata`` (orjson). A
malformed entry never raises: it becomes a row whose ``error`` says what is wrong and whose
``fields`` hold the raw entry, so nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from atlasbus import envelope as wire
from atlasbus.schema import ENVELOPE_SCHEMA, RAW_SCHEMA, STRING_MAP, TIMESTAMP

# One XRANGE reply item: [entry_id, [field1, value1, field2, value2, ...]] as bytes.
RawEntry = Sequence[Any]

_EMPTY_OBJECT = b"{}"
# orjson.loads typed for any input: a None among the values raises TypeError, which the
# callers catch to fall back to the per-row path.
_loads_any: Callable[[Any], Any] = orjson.loads
_ID_OF = itemgetter(0)
_FIELDS_OF = itemgetter(1)


# Reason codes of malformed entries: the first problem found in an entry names its reason.
MISSING_FIELD = "missing-field"
INVALID_UTF8 = "invalid-utf8"
INVALID_INTEGER = "invalid-integer"
INVALID_TIMESTAMP = "invalid-timestamp"
INVALID_JSON = "invalid-json"
NOT_JSON_OBJECT = "not-json-object"

REASONS = (
    MISSING_FIELD,
    INVALID_UTF8,
    INVALID_INTEGER,
    INVALID_TIMESTAMP,
    INVALID_JSON,
    NOT_JSON_OBJECT,
)


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

    def is_bad(self, row: int) -> bool:
        return self.messages is not None and self.messages[row] is not None


@dataclass(frozen=True, slots=True)
class DecodedPage:
    """A decoded page, and per row the reason code of a malformed entry (None when all good)."""

    batch: pa.RecordBatch
    reasons: list[str | None] | None


def decode_envelopes(
    entries: Sequence[RawEntry], *, topic: str, stream: str, include_raw_fields: bool
) -> pa.RecordBatch:
    """Decode bus envelopes; malformed entries become error rows carrying their raw fields."""
    return decode_envelope_page(
        entries, topic=topic, stream=stream, include_raw_fields=include_raw_fields
    ).batch


def decode_envelope_page(
    entries: Sequence[RawEntry], *, topic: str, stream: str, include_raw_fields: bool
) -> DecodedPage:
    """``decode_envelopes`` plus each malformed row's reason code (one of ``REASONS``)."""
    size = len(entries)
    field_lists = list(map(_FIELDS_OF, entries))
    columns = _columns_by_field(field_lists)
    errors = _Errors(size)

    ids = _id_array(entries)
    payload = _text_column(columns, wire.PAYLOAD, errors, required=True)
    _check_json_objects(columns.get(wire.PAYLOAD), wire.PAYLOAD, errors)
    priority = _int_column(columns, wire.PRIORITY, errors, required=True, default=None)
    attempts = _int_column(
        columns,
        wire.DELIVERY_ATTEMPTS,
        errors,
        required=False,
        default=wire.DEFAULT_DELIVERY_ATTEMPTS,
    )
    correlation_id = _text_column(columns, wire.CORRELATION_ID, errors, required=False)
    tracing = _map_column(columns.get(wire.TRACING), wire.TRACING, errors, size)
    metadata = _map_column(columns.get(wire.METADATA), wire.METADATA, errors, size)
    enqueued = _time_column(columns.get(wire.ENQUEUED_TIME), errors, size)

    envelope = [priority, correlation_id, payload, tracing, metadata, attempts, enqueued]
    error_column = pa.nulls(size, pa.string())
    raw_rows: list[bool] | None = None
    if errors.messages is not None:
        bad = pa.array([m is not None for m in errors.messages], pa.bool_())
        envelope = [pc.if_else(bad, pa.scalar(None, arr.type), arr) for arr in envelope]
        error_column = pa.array(errors.messages, pa.string())
        raw_rows = [m is not None for m in errors.messages]
    if include_raw_fields:
        fields = _raw_fields(field_lists, None)
    elif raw_rows is not None:
        fields = _raw_fields(field_lists, raw_rows)
    else:
        fields = pa.nulls(size, STRING_MAP)

    arrays = [
        _repeat(topic, size),
        _repeat(stream, size),
        ids,
        _timestamps_of(ids),
        *envelope,
        error_column,
        fields,
    ]
    return DecodedPage(pa.RecordBatch.from_arrays(arrays, schema=ENVELOPE_SCHEMA), errors.reasons)


def decode_raw(entries: Sequence[RawEntry], *, topic: str, stream: str) -> pa.RecordBatch:
    """Decode any stream's entries as ``topic, stream, id, timestamp, fields``."""
    size = len(entries)
    ids = _id_array(entries)
    arrays = [
        _repeat(topic, size),
        _repeat(stream, size),
        ids,
        _timestamps_of(ids),
        _raw_fields(list(map(_FIELDS_OF, entries)), None),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=RAW_SCHEMA)


# --- picking values out of the reply ---------------------------------------------------------


def _columns_by_field(field_lists: list[Sequence[bytes]]) -> dict[bytes, list[bytes | None]]:
    """Values per field name. Fast when all entries share one field order (the usual case).

    The fast path transposes the page with ``zip`` and checks each name column with
    ``count``: both run in C, so Python does no work per entry.
    """
    first = field_lists[0]
    names = first[0::2]
    width = len(first)
    if len(set(names)) == len(names) and set(map(len, field_lists)) == {width}:
        transposed = list(zip(*field_lists, strict=True))
        size = len(field_lists)
        name_positions = list(zip(range(0, width, 2), names, strict=True))
        if all(transposed[i].count(name) == size for i, name in name_positions):
            return {name: list(transposed[i + 1]) for i, name in name_positions}
    by_entry = [dict(zip(f[0::2], f[1::2], strict=False)) for f in field_lists]
    all_names = dict.fromkeys(chain.from_iterable(by_entry))
    return {name: [d.get(name) for d in by_entry] for name in all_names}


def _id_array(entries: Sequence[RawEntry]) -> pa.Array:
    return pa.array(list(map(_ID_OF, entries)), pa.binary()).cast(pa.string())


def _timestamps_of(ids: pa.Array) -> pa.Array:
    """The ms part of each entry ID as a timestamp."""
    ms = pc.cast(pc.list_element(pc.split_pattern(ids, "-", max_splits=1), 0), pa.int64())
    return pc.multiply(ms, 1000).view(pa.int64()).cast(TIMESTAMP)


def _repeat(value: str, size: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(
        pa.array([0] * size, pa.int32()), pa.array([value], pa.string())
    ).cast(pa.string())


# --- typed columns ---------------------------------------------------------------------------


def _missing(
    values: list[bytes | None] | None, name: bytes, errors: _Errors, *, required: bool
) -> list[bytes | None] | None:
    """Report a required field that is absent (in the column or in some entries)."""
    if values is None:
        if required:
            for row in range(errors.size):
                errors.add(row, f"missing field '{name.decode()}'", MISSING_FIELD)
        return None
    if required and None in values:
        for row, value in enumerate(values):
            if value is None:
                errors.add(row, f"missing field '{name.decode()}'", MISSING_FIELD)
    return values


def _utf8(values: list[bytes | None], name: bytes, errors: _Errors) -> pa.Array:
    binary = pa.array(values, pa.binary())
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        cleaned: list[str | None] = []
        for row, value in enumerate(values):
            if value is None:
                cleaned.append(None)
                continue
            try:
                cleaned.append(value.decode("utf-8"))
            except UnicodeDecodeError as exc:
                errors.add(
                    row,
                    f"field '{name.decode()}' is not valid UTF-8 (byte {exc.start})",
                    INVALID_UTF8,
                )
                cleaned.append(None)
        return pa.array(cleaned, pa.string())


def _text_column(
    columns: dict[bytes, list[bytes | None]], name: bytes, errors: _Errors, *, required: bool
) -> pa.Array:
    values = _missing(columns.get(name), name, errors, required=required)
    if values is None:
        return pa.nulls(errors.size, pa.string())
    return _utf8(values, name, errors)


def _int_column(
    columns: dict[bytes, list[bytes | None]],
    name: bytes,
    errors: _Errors,
    *,
    required: bool,
    default: int | None,
) -> pa.Array:
    values = _missing(columns.get(name), name, errors, required=required)
    if values is None:
        return pa.array([default] * errors.size, pa.int32())
    try:
        parsed = _utf8(values, name, errors).cast(pa.int32())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.array(
            [_parse_int(value, row, name, errors) for row, value in enumerate(values)],
            pa.int32(),
        )
    if default is not None and parsed.null_count:
        parsed = parsed.fill_null(default)
    return parsed


def _parse_int(value: bytes | None, row: int, name: bytes, errors: _Errors) -> int | None:
    if value is None or errors.is_bad(row):
        return None
    text = value.decode("utf-8", "replace").strip()
    digits = text[1:] if text[:1] in "+-" else text
    if digits.isdigit() and digits.isascii() and -(2**31) <= int(text) < 2**31:
        return int(text)
    errors.add(
        row,
        f"field '{name.decode()}' must be a decimal integer, got {_show(value)}",
        INVALID_INTEGER,
    )
    return None


def _time_column(values: list[bytes | None] | None, errors: _Errors, size: int) -> pa.Array:
    """``enqueued_time``, seconds since the epoch as a decimal float."""
    if values is None:
        return pa.nulls(size, TIMESTAMP)
    try:
        seconds = _utf8(values, wire.ENQUEUED_TIME, errors).cast(pa.float64())
        if pc.all(pc.is_finite(seconds)).as_py() is False:
            raise pa.ArrowInvalid("non-finite")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        seconds = pa.array(
            [_parse_seconds(value, row, errors) for row, value in enumerate(values)], pa.float64()
        )
    micros = pc.cast(pc.multiply(seconds, 1_000_000.0), pa.int64(), safe=False)
    return micros.view(TIMESTAMP) if len(micros) else pa.array([], TIMESTAMP)


def _parse_seconds(value: bytes | None, row: int, errors: _Errors) -> float | None:
    if value is None or errors.is_bad(row):
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        errors.add(
            row,
            f"field 'enqueued_time' must be seconds since the epoch, got {_show(value)}",
            INVALID_TIMESTAMP,
        )
        return None
    return seconds


def _check_json_objects(values: list[bytes | None] | None, name: bytes, errors: _Errors) -> None:
    if values is None:
        return
    if _all_json_objects(values):
        return
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


def _all_json_objects(values: list[bytes | None]) -> bool:
    """Whether every value is a JSON object, checked with no Python code per value.

    ``map`` drives orjson from C; any None, invalid text or non-object ends the check early,
    and the caller then finds and names the bad rows one by one.
    """
    try:
        return all(map(isinstance, map(_loads_any, values), repeat(dict)))
    except (orjson.JSONDecodeError, TypeError):
        return False


def _map_column(
    values: list[bytes | None] | None, name: bytes, errors: _Errors, size: int
) -> pa.Array:
    """A JSON object as ``map<string,string>``: non-string values as JSON text, null as null."""
    if values is None or values.count(_EMPTY_OBJECT) == size:
        return _empty_maps(size)
    fast = _maps_fast(values)
    if fast is not None:
        return fast
    keys: list[str] = []
    items: list[object] = []
    offsets = [0]
    count = 0
    loads, add_offset = orjson.loads, offsets.append
    add_keys, add_items = keys.extend, items.extend
    for row, value in enumerate(values):
        if value is None or value == _EMPTY_OBJECT:
            add_offset(count)
            continue
        try:
            parsed = loads(value)
        except orjson.JSONDecodeError:
            parsed = None
            problem, reason = "is not valid JSON", INVALID_JSON
        else:
            problem, reason = "is not a JSON object", NOT_JSON_OBJECT
        if type(parsed) is dict:
            add_keys(parsed)
            add_items(parsed.values())
            count += len(parsed)
        else:
            errors.add(row, f"field '{name.decode()}' {problem}: {_show(value)}", reason)
        add_offset(count)
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), _string_items(items)
    )


def _maps_fast(values: list[bytes | None]) -> pa.Array | None:
    """The map column when every value is a JSON object, else None.

    The common page: parsing, flattening and offsets all run in C (``map``, ``chain``, numpy).
    A missing value, bad JSON or a non-object returns None and the per-row path takes over,
    naming each bad row.
    """
    try:
        parsed = list(map(_loads_any, values))
    except (orjson.JSONDecodeError, TypeError):
        return None
    if not all(map(isinstance, parsed, repeat(dict))):
        return None
    lengths = np.fromiter(map(len, parsed), np.int32, len(parsed))
    offsets = np.zeros(len(parsed) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    keys = pa.array(list(chain.from_iterable(parsed)), pa.string())
    items = _string_items(list(chain.from_iterable(map(dict.values, parsed))))
    return pa.MapArray.from_arrays(pa.array(offsets), keys, items)


def _string_items(items: list[object]) -> pa.Array:
    """Map values as strings: a non-string value keeps its JSON text, JSON null stays null."""
    try:
        return pa.array(items, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.array(
            [i if i is None or type(i) is str else orjson.dumps(i).decode() for i in items],
            pa.string(),
        )


def _empty_maps(size: int) -> pa.Array:
    return pa.MapArray.from_arrays(
        pa.array([0] * (size + 1), pa.int32()), pa.array([], pa.string()), pa.array([], pa.string())
    )


def _raw_fields(field_lists: list[Sequence[bytes]], only: list[bool] | None) -> pa.Array:
    """The raw entry as a map (non-UTF-8 bytes shown as ``\\xNN``); null where ``only`` is False."""
    keys: list[str] = []
    items: list[str] = []
    offsets: list[int | None] = [0]
    validity: list[bool] = []
    decode: Callable[[bytes], str] = _lossless_text
    for row, flat in enumerate(field_lists):
        if only is not None and not only[row]:
            offsets.append(len(keys))
            validity.append(False)
            continue
        keys.extend(decode(name) for name in flat[0::2])
        items.extend(decode(value) for value in flat[1::2])
        offsets.append(len(keys))
        validity.append(True)
    offsets_array = pa.array(offsets, pa.int32())
    maps = pa.MapArray.from_arrays(
        offsets_array, pa.array(keys, pa.string()), pa.array(items, pa.string())
    )
    if only is None:
        return maps
    return pc.if_else(pa.array(validity, pa.bool_()), maps, pa.scalar(None, STRING_MAP))


def _lossless_text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("utf-8", "backslashreplace")


def _show(value: bytes, limit: int = 80) -> str:
    text = _lossless_text(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")

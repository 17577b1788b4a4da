"""Arrow input columns to XADD commands in the wire format, ready to send as they are.

This is the sink's hot path. Work is done column by column with Arrow kernels and ends in one
RESP-encoded ``XADD`` per row, laid back to back in a single buffer, so a chunk of rows is one
contiguous slice handed to the socket: no per-row command packing in Python. Python touches a row
only to check that JSON text is a JSON object (``atlasbus.wire.json_object_check``, orjson for the
rows it cannot vouch for) and to serialise structs and maps that are not ``map<string,string>``. A
row that cannot be published becomes a ``Rejection`` naming its topic, column and reason, and sends
nothing.
"""

from __future__ import annotations

import binascii
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from atlasbus.model.reason_codes import (
    EMPTY_TOPIC,
    INVALID_JSON,
    INVALID_TOPIC,
    NOT_JSON_OBJECT,
    NULL_PAYLOAD,
    NULL_TOPIC,
    OUT_OF_RANGE,
    TOO_BIG,
)
from atlasbus.options import sink_columns as cols
from atlasbus.options.sink import SinkOptions, topic_problem
from atlasbus.wire import envelope as wire
from atlasbus.wire.json_object_check import all_json_objects

TEXT = pa.large_string()
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
EMPTY_OBJECT = "{}"

# Every entry carries all eight fields, so the names' share of an entry's size is constant.
_NAMES_BYTES = sum(len(name) for name in wire.WIRE_FIELDS)


@dataclass(frozen=True)
class Rejection:
    """A row that cannot be published, and why (``code``: one of the reason codes above)."""

    row: int
    topic: str | None
    column: str
    reason: str
    code: str = "unpublishable"

    def message(self) -> str:
        where = f"topic {self.topic!r}" if self.topic is not None else "no topic"
        return f"cannot publish row {self.row} ({where}): column '{self.column}' {self.reason}"


@dataclass(frozen=True)
class EncodedBatch:
    """One XADD per input row (empty for a rejected row), contiguous in one buffer."""

    commands: pa.LargeStringArray
    accepted: pa.BooleanArray | None
    streams: pa.Array | str
    rejections: tuple[Rejection, ...]

    def __len__(self) -> int:
        return len(self.commands)

    def command_bytes(self, start: int, stop: int) -> memoryview:
        """The RESP bytes of rows ``[start, stop)``: a view, no copy."""
        _, offsets_buffer, data = self.commands.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int64)
        base = self.commands.offset
        first, last = int(offsets[base + start]), int(offsets[base + stop])
        if data is None:
            return memoryview(b"")
        return memoryview(data)[first:last]

    def chunk_end(self, start: int, max_rows: int, max_bytes: int) -> int:
        """Where a chunk from ``start`` ends: at most ``max_rows`` rows and, past its first
        row, at most ``max_bytes`` of commands (big messages make small chunks)."""
        _, offsets_buffer, _ = self.commands.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[self.commands.offset :]
        stop = min(start + max_rows, len(self))
        limit = int(offsets[start]) + max_bytes
        within = int(np.searchsorted(offsets[start + 1 : stop + 1], limit, side="right"))
        return start + max(1, within)

    def count(self, start: int, stop: int) -> int:
        """How many of rows ``[start, stop)`` send a command (one reply each)."""
        if self.accepted is None:
            return stop - start
        return int(pc.sum(self.accepted.slice(start, stop - start).cast(pa.int32())).as_py() or 0)

    def slice(self, start: int) -> EncodedBatch:
        """Rows ``[start, ...)``, for a batch with no rejections."""
        return self.filter(None, start)

    def filter(self, mask: pa.BooleanArray | None, start: int = 0) -> EncodedBatch:
        """The rows ``mask`` keeps (all with None), from ``start``: a batch with no rejections,
        whose commands are these rows' (a lane's share of a task's batch: ``SlotLanes``)."""
        if self.rejections and mask is None:
            raise ValueError("only a batch without rejections can be cut")
        commands, streams = self.commands.slice(start), self.streams
        if not isinstance(streams, str):
            streams = streams.slice(start)
        if mask is not None:
            commands = commands.filter(mask)
            if not isinstance(streams, str):
                streams = streams.filter(mask)
        return EncodedBatch(commands, None, streams, ())

    def stream_of(self, row: int) -> str:
        if isinstance(self.streams, str):
            return self.streams
        return str(self.streams[row].as_py())


class _Rejections:
    """Per-row rejections; the first reason for a row wins."""

    def __init__(self, size: int, row_base: int) -> None:
        self.size = size
        self.row_base = row_base
        self.by_row: dict[int, tuple[str, str, str]] = {}

    def add(self, row: int, column: str, reason: str, code: str) -> None:
        self.by_row.setdefault(row, (column, reason, code))

    def add_mask(self, mask: pa.Array, column: str, reason: str, code: str) -> None:
        if pc.any(mask).as_py():
            for row in np.flatnonzero(mask.to_numpy(zero_copy_only=False)):
                self.add(int(row), column, reason, code)

    def accepted(self) -> pa.BooleanArray | None:
        if not self.by_row:
            return None
        flags = np.ones(self.size, dtype=bool)
        flags[list(self.by_row)] = False
        return pa.array(flags, pa.bool_())

    def result(self, topics: pa.Array | str) -> tuple[Rejection, ...]:
        def topic_of(row: int) -> str | None:
            if isinstance(topics, str):
                return topics
            value = topics[row].as_py()
            return str(value) if value else None

        return tuple(
            Rejection(self.row_base + row, topic_of(row), column, reason, code)
            for row, (column, reason, code) in sorted(self.by_row.items())
        )


def encode_batch(
    batch: pa.RecordBatch, options: SinkOptions, *, enqueued_time: float, row_base: int = 0
) -> EncodedBatch:
    """Encode a batch of input rows (columns already checked by ``check_input_schema``).

    ``row_base`` is the task-wide number of the batch's first row, for error messages.
    """
    size = batch.num_rows
    rejections = _Rejections(size, row_base)
    names = set(batch.schema.names)

    topics, raw_topics = _topics(batch, options, rejections)
    values: list[tuple[bytes, pa.Array | str]] = [
        (wire.TOPIC, topics),
        (
            wire.PRIORITY,
            _integers(batch, cols.PRIORITY_COLUMN, wire.DEFAULT_PRIORITY, INT32_MIN, rejections),
        ),
        (wire.PAYLOAD, _payload(batch.column(cols.PAYLOAD_COLUMN), rejections)),
        (wire.CORRELATION_ID, _correlation_ids(batch, names, size)),
        (wire.TRACING, _object_column(batch, names, cols.TRACING_COLUMN, rejections)),
        (wire.METADATA, _object_column(batch, names, cols.METADATA_COLUMN, rejections)),
        (
            wire.DELIVERY_ATTEMPTS,
            _integers(
                batch, cols.DELIVERY_ATTEMPTS_COLUMN, wire.DEFAULT_DELIVERY_ATTEMPTS, 0, rejections
            ),
        ),
        (wire.ENQUEUED_TIME, f"{enqueued_time:.6f}"),
    ]
    _check_sizes(values, options.max_message_bytes, rejections)

    streams: pa.Array | str
    if isinstance(topics, str):
        streams = options.stream_key(topics)
    else:
        streams = pc.binary_join_element_wise(
            pa.scalar(f"{options.stream_prefix}:", TEXT), topics, pa.scalar("", TEXT)
        )
    commands = _xadd_commands(streams, values, options.max_len, size)
    accepted = rejections.accepted()
    if accepted is not None:
        commands = pc.if_else(accepted, commands, pa.scalar("", TEXT))
    return EncodedBatch(commands, accepted, streams, rejections.result(raw_topics))


# --- the columns ------------------------------------------------------------------------------


def _topics(
    batch: pa.RecordBatch, options: SinkOptions, rejections: _Rejections
) -> tuple[pa.Array | str, pa.Array | str]:
    """The topic per row: the column, with option ``topic`` standing in for nulls.

    A topic the source could not name in its ``topics`` option (``topic_problem``: empty, a
    comma, whitespace at an end) is refused, so whatever is published can be read back by name.
    """
    if cols.TOPIC_COLUMN not in batch.schema.names:
        assert options.topic is not None  # check_input_schema guarantees one or the other
        problem = topic_problem(options.topic)  # parse_sink_options refuses these already
        if problem is not None:
            for row in range(batch.num_rows):
                rejections.add(row, cols.TOPIC_COLUMN, problem, _topic_code(options.topic))
        return options.topic, options.topic
    column = batch.column(cols.TOPIC_COLUMN).cast(TEXT)
    if options.topic is not None:
        column = column.fill_null(options.topic)
    elif column.null_count:
        rejections.add_mask(
            pc.is_null(column),
            cols.TOPIC_COLUMN,
            "is null and option 'topic' is not set",
            NULL_TOPIC,
        )
    # checked once per distinct topic (a batch has few), with the source's own str.strip rules
    problems = {
        name: problem
        for name in pc.unique(column.drop_null()).to_pylist()
        if (problem := topic_problem(name)) is not None
    }
    if problems:
        refused = pc.is_in(column, value_set=pa.array(list(problems), TEXT)).fill_null(False)
        for index in np.flatnonzero(refused.to_numpy(zero_copy_only=False)):
            name = column[int(index)].as_py()
            rejections.add(int(index), cols.TOPIC_COLUMN, problems[name], _topic_code(name))
    return column.fill_null(""), column


def _topic_code(topic: str) -> str:
    return EMPTY_TOPIC if not topic.strip() else INVALID_TOPIC


def _integers(
    batch: pa.RecordBatch, name: str, default: int, low: int, rejections: _Rejections
) -> pa.Array | str:
    if name not in batch.schema.names:
        return str(default)
    column = batch.column(name).cast(pa.int64(), safe=False)
    if column.null_count == len(column):
        return str(default)
    out_of_range = pc.or_(pc.less(column, low), pc.greater(column, INT32_MAX)).fill_null(False)
    if pc.any(out_of_range).as_py():
        for row in np.flatnonzero(out_of_range.to_numpy(zero_copy_only=False)):
            rejections.add(
                int(row),
                name,
                f"must be between {low} and {INT32_MAX}, got {column[row].as_py()}",
                OUT_OF_RANGE,
            )
    return column.fill_null(default).cast(TEXT)


def _payload(column: pa.Array, rejections: _Rejections) -> pa.Array:
    if column.null_count:
        rejections.add_mask(pc.is_null(column), cols.PAYLOAD_COLUMN, "is null", NULL_PAYLOAD)
    if _is_text(column.type):
        text = column.cast(TEXT)
        _check_json_objects(text, cols.PAYLOAD_COLUMN, rejections)
    else:
        text = json_text(column)
    return text.fill_null("")


def _object_column(
    batch: pa.RecordBatch, names: set[str], name: str, rejections: _Rejections
) -> pa.Array | str:
    """``tracing`` / ``metadata``: a JSON object, ``{}`` when absent or null."""
    if name not in names:
        return EMPTY_OBJECT
    column = batch.column(name)
    if column.null_count == len(column):
        return EMPTY_OBJECT
    if _is_text(column.type):
        text = column.cast(TEXT)
        _check_json_objects(text, name, rejections)
    else:
        text = json_text(column)
    return text.fill_null(EMPTY_OBJECT)


def _correlation_ids(batch: pa.RecordBatch, names: set[str], size: int) -> pa.Array:
    """The column where set, else a new UUID4 hex (made in bulk: one urandom call)."""
    if cols.CORRELATION_ID_COLUMN in names:
        column = batch.column(cols.CORRELATION_ID_COLUMN).cast(TEXT)
        if column.null_count == 0:
            return column
        return pc.if_else(pc.is_null(column), _uuid4_hex(size), column)
    return _uuid4_hex(size)


def _uuid4_hex(size: int) -> pa.Array:
    raw = np.frombuffer(os.urandom(16 * size), dtype=np.uint8).reshape(size, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40  # version 4
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80  # RFC 4122 variant
    hexed = pa.py_buffer(binascii.hexlify(raw.tobytes()))
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(32), size, [None, hexed])
    return fixed.cast(pa.large_binary()).cast(TEXT)


# --- JSON ---------------------------------------------------------------------------------------


def _is_text(type_: pa.DataType) -> bool:
    return bool(pat.is_string(type_) or pat.is_large_string(type_))


def _check_json_objects(text: pa.Array, column: str, rejections: _Rejections) -> None:
    """JSON text is published verbatim, so it must already be one JSON object."""
    if all_json_objects(text.drop_null().cast(pa.large_binary()).to_pylist()):
        return  # nulls are the null check's to report
    values = text.cast(pa.large_binary()).to_pylist()
    loads = orjson.loads
    for row, value in enumerate(values):
        if value is None:
            continue
        try:
            parsed = loads(value)
        except orjson.JSONDecodeError as exc:
            rejections.add(row, column, f"is not valid JSON ({exc}): {_show(value)}", INVALID_JSON)
            continue
        if type(parsed) is not dict:
            rejections.add(
                row,
                column,
                f"is not a JSON object (got a JSON {_json_kind(parsed)}): {_show(value)}",
                NOT_JSON_OBJECT,
            )


def json_text(column: pa.Array) -> pa.Array:
    """A struct or map column as JSON object text (null stays null), as the sink publishes it."""
    if (
        pat.is_map(column.type)
        and _is_text(column.type.key_type)
        and _is_text(column.type.item_type)
    ):
        return _string_map_json(column)
    dumps, option = orjson.dumps, orjson.OPT_NON_STR_KEYS
    encoded = [
        None if value is None else dumps(value, default=_json_default, option=option)
        for value in column.to_pylist(maps_as_pydicts="strict")
    ]
    return pa.array(encoded, pa.large_binary()).cast(TEXT)


def _string_map_json(column: pa.MapArray) -> pa.Array:
    """``map<string,string>`` as JSON objects, entirely with Arrow kernels."""
    # keys/items ignore a slice's offset; the offsets do not, so cut the children with them
    offsets = column.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    keys = column.keys.slice(first, last - first).cast(TEXT)
    items = column.items.slice(first, last - first).cast(TEXT)
    members = pc.binary_join_element_wise(
        _json_strings(keys),
        _json_strings(items).fill_null("null"),
        pa.scalar(":", TEXT),
    )
    offsets -= first
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), members)
    joined = pc.binary_join(lists, pa.scalar(",", TEXT))
    objects = pc.binary_join_element_wise(
        pa.scalar("{", TEXT), joined, pa.scalar("}", TEXT), pa.scalar("", TEXT)
    )
    if column.null_count:
        objects = pc.if_else(pc.is_null(column), pa.scalar(None, TEXT), objects)
    return objects


def _json_strings(text: pa.Array) -> pa.Array:
    """Each string as a JSON string literal; orjson only for the rare control characters."""
    escaped = pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
    quoted = pc.binary_join_element_wise(
        pa.scalar('"', TEXT), escaped, pa.scalar('"', TEXT), pa.scalar("", TEXT)
    )
    control = pc.match_substring_regex(text, "[\\x00-\\x1f]").fill_null(False)
    if not pc.any(control).as_py():
        return quoted
    slow = [
        orjson.dumps(value).decode() if flag else None
        for value, flag in zip(text.to_pylist(), control.to_pylist(), strict=True)
    ]
    return pc.if_else(control, pa.array(slow, TEXT), quoted)


def _json_default(value: Any) -> Any:
    """Types orjson does not know, as Spark's ``to_json`` writes them."""
    import base64
    import decimal

    if isinstance(value, decimal.Decimal):
        return orjson.Fragment(str(value))
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _show(value: bytes, limit: int = 60) -> str:
    text = value.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


# --- sizes and the wire -------------------------------------------------------------------------


def _check_sizes(
    values: Sequence[tuple[bytes, pa.Array | str]], limit: int, rejections: _Rejections
) -> None:
    """An entry's size is its field names plus values, in bytes; refuse those over the limit."""
    constant = _NAMES_BYTES
    arrays: list[tuple[bytes, pa.Array]] = []
    for name, value in values:
        if isinstance(value, str):
            constant += len(value.encode())
        else:
            arrays.append((name, value))
    lengths = [(name, pc.binary_length(value)) for name, value in arrays]
    total: pa.Array = pa.scalar(constant, pa.int64())
    for _, length in lengths:
        total = pc.add(total, length.cast(pa.int64()))
    over = pc.greater(total, limit).fill_null(False)
    if not pc.any(over).as_py():
        return
    for row in np.flatnonzero(over.to_numpy(zero_copy_only=False)):
        name, biggest = max(
            ((n, length[row].as_py() or 0) for n, length in lengths), key=lambda p: p[1]
        )
        rejections.add(
            int(row),
            name.decode(),
            f"is too big: the message would be {total[row].as_py()} bytes, over "
            f"maxMessageBytes ({limit}); this column holds {biggest} bytes",
            TOO_BIG,
        )


def _bulk(text: str) -> str:
    return f"${len(text.encode())}\r\n{text}\r\n"


def _xadd_commands(
    streams: pa.Array | str,
    values: Sequence[tuple[bytes, pa.Array | str]],
    max_len: int | None,
    size: int,
) -> pa.LargeStringArray:
    """``XADD stream [MAXLEN ~ n] * field value ...`` in RESP, one string per row."""
    argc = 3 + (3 if max_len is not None else 0) + 2 * len(values)
    parts: list[pa.Array | str] = [f"*{argc}\r\n$4\r\nXADD\r\n"]
    parts.extend(_bulk_parts(streams))
    if max_len is not None:
        parts.append(_bulk("MAXLEN") + _bulk("~") + _bulk(str(max_len)))
    parts.append(_bulk("*"))
    for name, value in values:
        parts.append(_bulk(name.decode()))
        parts.extend(_bulk_parts(value))
    merged: list[pa.Array | pa.Scalar] = []
    pending = ""
    for part in parts:
        if isinstance(part, str):
            pending += part
            continue
        if pending:
            merged.append(pa.scalar(pending, TEXT))
            pending = ""
        merged.append(part)
    if pending:
        merged.append(pa.scalar(pending, TEXT))
    if not any(isinstance(part, pa.Array) for part in merged):
        merged.insert(0, pa.array([""] * size, TEXT))
    commands = pc.binary_join_element_wise(*merged, pa.scalar("", TEXT))
    assert isinstance(commands, pa.LargeStringArray)
    return commands


def _bulk_parts(value: pa.Array | str) -> list[pa.Array | str]:
    if isinstance(value, str):
        return [_bulk(value)]
    text = value.cast(TEXT)
    return ["$", pc.binary_length(text).cast(TEXT), "\r\n", text, "\r\n"]

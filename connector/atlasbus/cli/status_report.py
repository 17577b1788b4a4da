"""``BusStatus`` as text: a readable table, JSON, and the Prometheus text exposition format.

Pure functions of a ``BusStatus`` (no I/O), used by ``atlasbus status`` and usable from a
notebook or a cron job. All times are UTC. A figure that is unknown (a lag that cannot be had
without reading entries, ``entries_added`` on Redis 6) is ``-`` in the table, ``null`` in JSON,
and has no sample at all in the Prometheus text: a missing sample, not ``NaN``, so an alert on
it does not fire on a value that was never measured.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from atlasbus.cli.common import format_table
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.operations.bus_status import BusStatus, GroupStatus, StreamStatus, id_time

__all__ = ["PROMETHEUS_PREFIX", "render_json", "render_prometheus", "render_table", "to_dict"]

PROMETHEUS_PREFIX: Final = "atlasbus_"
UNKNOWN: Final = "-"


# --- shared --------------------------------------------------------------------------------------


def iso_time(when: datetime) -> str:
    """ISO-8601 in UTC to the millisecond (what entry IDs hold): ``2024-05-01T12:00:00.000Z``."""
    when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _table_time(when: datetime | None) -> str:
    return UNKNOWN if when is None else iso_time(when).replace("T", " ").removesuffix("Z")


def _text(value: object) -> str:
    return UNKNOWN if value is None else str(value)


# --- table ---------------------------------------------------------------------------------------


def render_table(status: BusStatus) -> str:
    """Streams, groups and dead letters as aligned plain-text tables."""
    where = f"streams under '{status.stream_prefix}:'"
    if status.topics is not None:
        where = f"topics {', '.join(status.topics)} under '{status.stream_prefix}:'"
    parts = [
        f"atlasbus status at {_table_time(status.at)} UTC: Redis {status.redis_version} at "
        f"{status.server}, {where}\n"
    ]
    if status.streams:
        parts.append("\nSTREAMS (times UTC)\n")
        parts.append(
            format_table(
                [
                    "topic",
                    "stream",
                    "length",
                    "entries added",
                    "first id",
                    "first entry",
                    "last id",
                    "last entry",
                ],
                [
                    [
                        s.topic,
                        s.stream,
                        str(s.length),
                        _text(s.entries_added),
                        _text(s.first_id),
                        _table_time(s.first_time),
                        _text(s.last_id),
                        _table_time(s.last_time),
                    ]
                    for s in status.streams
                ],
            )
        )
    elif status.topics is None:
        parts.append(f"\nno streams under '{status.stream_prefix}:'\n")
    if status.missing:
        parts.append(f"no such stream: {', '.join(status.missing)}\n")

    groups = [(s, g) for s in status.streams for g in s.groups]
    if groups:
        parts.append("\nCONSUMER GROUPS\n")
        parts.append(
            format_table(
                [
                    "stream",
                    "group",
                    "consumers",
                    "pending",
                    "last delivered",
                    "lag",
                    "oldest pending",
                    "idle s",
                    "deliveries",
                ],
                [
                    [
                        s.stream,
                        g.name,
                        str(g.consumers),
                        str(g.pending),
                        str(g.last_delivered),
                        _text(g.lag),
                        _text(g.oldest_pending_id),
                        UNKNOWN
                        if g.oldest_pending_idle_ms is None
                        else _seconds(g.oldest_pending_idle_ms),
                        _text(g.oldest_pending_deliveries),
                    ]
                    for s, g in groups
                ],
            )
        )
        if any(g.lag is None for _, g in groups):
            parts.append(
                "lag -: unknown without reading the entries (Redis 6; on Redis 7, entries "
                "deleted with XDEL that Redis cannot count across)\n"
            )
    elif status.streams:
        parts.append("\nno consumer groups\n")

    letters = status.dead_letters
    if letters is not None:
        parts.append(
            f"\nDEAD LETTERS in {letters.table} (last hour: after "
            f"{_table_time(letters.since)} UTC)\n"
        )
        rows = [[c.stage, c.reason, str(c.last_hour), str(c.total)] for c in letters.counts]
        rows.append(["total", "", str(letters.last_hour), str(letters.total)])
        parts.append(format_table(["stage", "reason", "last hour", "all"], rows))
    return "".join(parts)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.3f}"


# --- JSON ----------------------------------------------------------------------------------------


def to_dict(status: BusStatus) -> dict[str, Any]:
    """The status as JSON-ready data: stable keys, entry IDs as strings, times ISO-8601 UTC."""
    letters = status.dead_letters
    return {
        "at": iso_time(status.at),
        "redis": {"server": status.server, "version": status.redis_version},
        "stream_prefix": status.stream_prefix,
        "topics": None if status.topics is None else list(status.topics),
        "streams": [_stream_dict(s) for s in status.streams],
        "missing_streams": list(status.missing),
        "dead_letters": None
        if letters is None
        else {
            "table": letters.table,
            "since": iso_time(letters.since),
            "last_hour": letters.last_hour,
            "total": letters.total,
            "by_stage_reason": [
                {"stage": c.stage, "reason": c.reason, "last_hour": c.last_hour, "total": c.total}
                for c in letters.counts
            ],
        },
    }


def _entry(entry_id: EntryId | None) -> dict[str, str] | None:
    return None if entry_id is None else {"id": str(entry_id), "time": iso_time(id_time(entry_id))}


def _stream_dict(stream: StreamStatus) -> dict[str, Any]:
    return {
        "stream": stream.stream,
        "topic": stream.topic,
        "length": stream.length,
        "entries_added": stream.entries_added,
        "first_entry": _entry(stream.first_id),
        "last_entry": _entry(stream.last_id),
        "last_generated_id": str(stream.last_generated_id),
        "groups": [_group_dict(g) for g in stream.groups],
    }


def _group_dict(group: GroupStatus) -> dict[str, Any]:
    oldest = None
    if group.oldest_pending_id is not None:
        oldest = {
            "id": str(group.oldest_pending_id),
            "idle_ms": group.oldest_pending_idle_ms,
            "deliveries": group.oldest_pending_deliveries,
        }
    return {
        "name": group.name,
        "consumers": group.consumers,
        "pending": group.pending,
        "last_delivered_id": str(group.last_delivered),
        "lag": group.lag,
        "lag_source": group.lag_source,
        "oldest_pending": oldest,
    }


def render_json(status: BusStatus, *, indent: int | None = 2) -> str:
    """``to_dict`` as JSON text and a newline (``indent=None``: one line, for JSON Lines)."""
    return json.dumps(to_dict(status), indent=indent, ensure_ascii=False) + "\n"


# --- Prometheus ----------------------------------------------------------------------------------


@dataclass
class _Family:
    name: str
    help: str
    samples: list[tuple[Mapping[str, str], str]] = field(default_factory=list)

    def add(
        self, labels: Mapping[str, str], value: int | float | None, *, ms: bool = False
    ) -> None:
        """A sample; none when ``value`` is unknown. ``ms``: milliseconds shown as seconds."""
        if value is None:
            return
        text = f"{value / 1000:.3f}" if ms else str(value)
        self.samples.append((labels, text))


def render_prometheus(status: BusStatus) -> str:
    """The text exposition format (version 0.0.4): one gauge family per figure.

    Metric names start with ``atlasbus_``; streams carry ``stream`` and ``topic`` labels,
    groups ``stream`` and ``group``, dead letters ``stage``, ``reason`` and ``window``
    (``1h`` or ``all``). An unknown figure has no sample (see the module docstring).
    """
    f = {
        name: _Family(PROMETHEUS_PREFIX + name, text)
        for name, text in (
            ("stream_exists", "1 if the stream exists, 0 for a named topic whose stream does not"),
            ("stream_length", "Entries in the stream (XINFO STREAM length)"),
            (
                "stream_entries_added",
                "Entries ever added to the stream, deleted ones included (Redis 7+)",
            ),
            (
                "stream_first_entry_timestamp_seconds",
                "Time of the stream's first entry (the ms part of its ID), Unix seconds",
            ),
            (
                "stream_last_entry_timestamp_seconds",
                "Time of the stream's last entry (the ms part of its ID), Unix seconds",
            ),
            ("group_consumers", "Consumers in the consumer group (XINFO GROUPS)"),
            ("group_pending", "Entries delivered to the group and not acknowledged (PEL size)"),
            (
                "group_lag",
                "Entries not yet delivered to the group (Redis 7 lag, or computed when certain; "
                "no sample when unknown)",
            ),
            (
                "group_last_delivered_timestamp_seconds",
                "Time of the group's last-delivered ID (its ms part), Unix seconds",
            ),
            (
                "group_oldest_pending_idle_seconds",
                "Seconds since the group's oldest pending entry (lowest ID) was last delivered",
            ),
            (
                "group_oldest_pending_deliveries",
                "Times the group's oldest pending entry was delivered",
            ),
            (
                "dead_letters",
                "Dead letters in the table by stage and reason, recorded in the last hour "
                '(window="1h") or ever (window="all")',
            ),
        )
    }
    exists = [(s.stream, s.topic, 1) for s in status.streams]
    exists += [(name, _topic(status, name), 0) for name in status.missing]
    for stream, topic, flag in sorted(exists):
        f["stream_exists"].add({"stream": stream, "topic": topic}, flag)
    for s in status.streams:
        labels = {"stream": s.stream, "topic": s.topic}
        f["stream_length"].add(labels, s.length)
        f["stream_entries_added"].add(labels, s.entries_added)
        f["stream_first_entry_timestamp_seconds"].add(labels, _ms(s.first_id), ms=True)
        f["stream_last_entry_timestamp_seconds"].add(labels, _ms(s.last_id), ms=True)
        for g in s.groups:
            group = {"stream": s.stream, "group": g.name}
            f["group_consumers"].add(group, g.consumers)
            f["group_pending"].add(group, g.pending)
            f["group_lag"].add(group, g.lag)
            delivered = None if g.last_delivered == ZERO else g.last_delivered.ms
            f["group_last_delivered_timestamp_seconds"].add(group, delivered, ms=True)
            f["group_oldest_pending_idle_seconds"].add(group, g.oldest_pending_idle_ms, ms=True)
            f["group_oldest_pending_deliveries"].add(group, g.oldest_pending_deliveries)
    if status.dead_letters is not None:
        for c in status.dead_letters.counts:
            for window, count in (("1h", c.last_hour), ("all", c.total)):
                f["dead_letters"].add(
                    {"stage": c.stage, "reason": c.reason, "window": window}, count
                )
    lines = [
        f"# atlasbus status of Redis {status.redis_version} at {status.server}, "
        f"{iso_time(status.at)}"
    ]
    for family in f.values():
        lines.extend(_family_lines(family))
    return "\n".join(lines) + "\n"


def _topic(status: BusStatus, stream: str) -> str:
    head = f"{status.stream_prefix}:"
    return stream[len(head) :] if stream.startswith(head) else stream


def _ms(entry_id: EntryId | None) -> int | None:
    return None if entry_id is None else entry_id.ms


def _family_lines(family: _Family) -> Iterable[str]:
    yield f"# HELP {family.name} {_escape_help(family.help)}"
    yield f"# TYPE {family.name} gauge"
    for labels, value in family.samples:
        inside = ",".join(f'{key}="{escape_label_value(v)}"' for key, v in labels.items())
        yield f"{family.name}{{{inside}}} {value}"


def escape_label_value(value: str) -> str:
    """A label value as the exposition format wants it: ``\\``, ``"`` and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")

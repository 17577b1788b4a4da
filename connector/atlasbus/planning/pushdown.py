"""Filters pushed to a batch read, as the entries they can keep: an ID range and stream sets.

Runs on the driver. Spark's pushed filters are translated by the adapter
(``pyspark_atlasbus.pushed_filters``) into a ``PushedBounds``; planning then reads only
``(after, upto]`` of each kept stream (``narrow``), intersected with
``startingOffsets``/``endingOffsets``. A bound only ever narrows to a superset of what the
filters keep: the adapter hands every filter it cannot apply exactly back to Spark.

The ``timestamp`` column is the ID's ms part as microseconds, so a time bound is an ID bound:
``timestamp > t`` keeps IDs from ``(floor(t/1000)+1)-0``, ``timestamp <= t`` IDs up to
``floor(t/1000)-MAX_SEQ`` (``t`` in microseconds; see ``after_time``/``upto_time``).
The column is null past ``LAST_TIMESTAMP_MS`` (docs/options.md), and a null never passes a
comparison, so every time bound also caps the range there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.model.entry_id import MAX_SEQ, ZERO, EntryId

MAX_ID = EntryId(2**64 - 1, MAX_SEQ)
"""The greatest entry ID Redis accepts."""

LAST_TIMESTAMP_MS = 253_402_127_999_999
"""The last ID ms whose ``timestamp`` is not null (9999-12-29T23:59:59.999Z): the decoder's
bound (``atlasbus.decoding.decoder``), which tests hold equal."""


@dataclass(frozen=True)
class PushedBounds:
    """What the pushed filters keep: IDs in ``(after, upto]`` of the streams kept.

    ``topics``/``streams`` None keep every stream; a set keeps only those (an empty set:
    none). ``after`` ZERO and ``upto`` ``MAX_ID`` bound nothing. Frozen and picklable: it
    travels with the reader from Spark's planning worker.
    """

    after: EntryId = ZERO
    upto: EntryId = MAX_ID
    topics: frozenset[str] | None = None
    streams: frozenset[str] | None = None
    # ``id`` compared as text (``(">", "1700000000000-5")``...): a superset per stream, where
    # every ID read has as many ms digits (``text_bounds``); Spark checks the rows.
    id_text: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        """No entry can pass: the range is empty, or no topic or stream is kept."""
        return self.upto <= self.after or self.topics == frozenset() or self.streams == frozenset()

    @property
    def narrows(self) -> bool:
        """Whether anything is narrowed at all."""
        return self != PushedBounds()

    def with_ids(self, *, after: EntryId = ZERO, upto: EntryId = MAX_ID) -> PushedBounds:
        """These bounds and IDs in ``(after, upto]`` too (the intersection)."""
        return replace(self, after=max(self.after, after), upto=min(self.upto, upto))

    def with_topics(self, topics: Iterable[str]) -> PushedBounds:
        """These bounds and only the streams of ``topics`` too."""
        kept = frozenset(topics) if self.topics is None else self.topics & frozenset(topics)
        return replace(self, topics=kept)

    def with_streams(self, streams: Iterable[str]) -> PushedBounds:
        """These bounds and only the stream keys ``streams`` too."""
        kept = frozenset(streams) if self.streams is None else self.streams & frozenset(streams)
        return replace(self, streams=kept)

    def with_id_text(self, op: str, text: str) -> PushedBounds:
        """These bounds and ``id <op> text`` (text order) too: see ``text_bounds``."""
        return replace(self, id_text=(*self.id_text, (op, text)))

    def keeps(self, stream: str, topic: str) -> bool:
        """Whether entries of ``stream`` (carrying ``topic``) can pass at all."""
        if self.empty:
            return False
        if self.topics is not None and topic not in self.topics:
            return False
        return self.streams is None or stream in self.streams


def after_time(micros: int, *, inclusive: bool) -> EntryId:
    """The ``after`` bound of ``timestamp > micros`` (``>=`` when ``inclusive``): exact.

    An ID's timestamp is ``ms * 1000``; ``ms * 1000 > t`` holds exactly for
    ``ms >= floor(t / 1000) + 1``, and ``ms * 1000 >= t`` for ``ms >= ceil(t / 1000)``.
    """
    first_ms = -((-micros) // 1000) if inclusive else micros // 1000 + 1
    if first_ms <= 0:
        return ZERO
    if first_ms > MAX_ID.ms:
        return MAX_ID
    return EntryId(first_ms, 0).predecessor()


def upto_time(micros: int, *, inclusive: bool) -> EntryId | None:
    """The ``upto`` bound of ``timestamp <= micros`` (``<`` unless ``inclusive``): exact.

    ``ms * 1000 <= t`` holds for ``ms <= floor(t / 1000)``, ``ms * 1000 < t`` for
    ``ms <= ceil(t / 1000) - 1``. None when no ID passes (a time before 1970).
    """
    last_ms = micros // 1000 if inclusive else -((-micros) // 1000) - 1
    if last_ms < 0:
        return None
    return EntryId(min(last_ms, LAST_TIMESTAMP_MS), MAX_SEQ)


def canonical_id(text: str) -> EntryId | None:
    """The ID whose ``id`` column reads exactly ``text``, or None when no entry's does.

    Redis writes IDs as ``ms-seq`` in plain decimal: ``'07-0'``, ``'7'`` or ``' 7-0'`` name
    no entry's ``id``, whatever ID they would parse to.
    """
    ms_text, sep, seq_text = text.partition("-")
    if not sep or not ms_text.isdigit() or not seq_text.isdigit():
        return None
    if not (ms_text.isascii() and seq_text.isascii()):
        return None
    ms, seq = int(ms_text), int(seq_text)
    if ms > MAX_ID.ms or seq > MAX_SEQ:  # no entry has it, and XRANGE would refuse it
        return None
    entry = EntryId(ms, seq)
    if str(entry) != text:
        return None
    return entry


_DIGITS = frozenset("0123456789")


def text_bounds(
    id_text: tuple[tuple[str, str], ...], lowest_ms: int, highest_ms: int
) -> tuple[EntryId, EntryId]:
    """``(after, upto)`` holding every ID whose ``id`` text passes ``id_text``: a superset.

    Only for IDs whose ms all have D digits (``lowest_ms`` and ``highest_ms`` have as many);
    else nothing is narrowed. An ``id`` reads ``M-Q``, M of D digits; against a text whose
    first D characters are ASCII digits P, the first D characters decide unless M == P, so
    ``id > text`` (or ``>=``) needs ``M >= P``, ``id < text`` (or ``<=``) needs ``M <= P``.
    Any other text (shorter, or not digits there) narrows nothing.
    """
    after, upto = ZERO, MAX_ID
    digits = len(str(lowest_ms))
    if digits != len(str(highest_ms)):
        return after, upto
    for op, text in id_text:
        head = text[:digits]
        if len(head) < digits or not set(head) <= _DIGITS:
            continue
        ms = int(head)
        if op in (">", ">="):
            after = max(after, EntryId(ms, 0).predecessor())
        elif op in ("<", "<="):
            upto = min(upto, EntryId(ms, MAX_SEQ))
    return after, upto


def narrow(
    bounds: PushedBounds,
    start: Mapping[str, EntryId],
    end: Mapping[str, EntryId],
    topic_of: Mapping[str, str],
) -> tuple[dict[str, EntryId], dict[str, EntryId]]:
    """A batch's ``(start, end)`` offsets intersected with ``bounds``: pure.

    Streams the bounds do not keep leave both; a kept stream is read from the later of its
    start and ``bounds.after`` to the earlier of its end and ``bounds.upto`` (a stream whose
    intersection is empty ends where it starts: nothing is read). A stream absent from
    ``start`` starts at ZERO, its beginning.
    """
    new_start: dict[str, EntryId] = {}
    new_end: dict[str, EntryId] = {}
    for stream, upto in end.items():
        if not bounds.keeps(stream, topic_of[stream]):
            continue
        after = max(start.get(stream, ZERO), bounds.after)
        last = min(upto, bounds.upto)
        if after != ZERO:
            new_start[stream] = after
        new_end[stream] = max(last, after)
    return new_start, new_end


def pushed_offsets(
    catalog: StreamCatalog,
    bounds: PushedBounds,
    start: Mapping[str, EntryId],
    end: Mapping[str, EntryId],
    topic_of: Mapping[str, str],
) -> tuple[dict[str, EntryId], dict[str, EntryId]]:
    """``narrow``, each start moved back to the newest entry at or before it; driver.

    Reading after X is reading after the newest entry at or before X, and a start that is an
    entry (or ZERO, when there is none) is what data-loss checks expect of a start
    (``positions.starting_offsets`` does the same): entries trimmed or deleted before the
    window are never reported lost. Two round trips for all the moved streams: XINFO, and
    XREVRANGE ... COUNT 1. A start is moved only where the stream has generated an ID at or
    past it: no entry can be added below that any more, so the entries read are the same.
    """
    new_start, new_end = narrow(bounds, start, end, topic_of)
    if bounds.id_text:
        _narrow_by_text(catalog, bounds.id_text, new_start, new_end)
    moved = [s for s, p in new_start.items() if p != start.get(s, ZERO) and new_end[s] > p]
    infos = catalog.info(moved) if moved else {}
    moved = [
        s for s in moved if (info := infos[s]) is not None and info.last_generated >= new_start[s]
    ]
    found = catalog.last_at_or_before_each({s: new_start[s] for s in moved}) if moved else {}
    for stream in moved:
        entry = found[stream]
        if entry is None:
            del new_start[stream]
        else:
            new_start[stream] = entry
    return new_start, new_end


def _narrow_by_text(
    catalog: StreamCatalog,
    id_text: tuple[tuple[str, str], ...],
    start: dict[str, EntryId],
    end: dict[str, EntryId],
) -> None:
    """Each stream's range within ``text_bounds`` of the IDs it can read; one XINFO for all.

    The IDs read lie between the later of the range's start and the stream's first entry
    (nothing can be added below its newest ID) and the range's end.
    """
    streams = [s for s in end if end[s] > start.get(s, ZERO)]
    infos = catalog.info(streams) if streams else {}
    for stream in streams:
        info = infos[stream]
        if info is None or info.first is None:
            continue
        lowest = max(start.get(stream, ZERO), info.first)
        after, upto = text_bounds(id_text, lowest.ms, end[stream].ms)
        if after > start.get(stream, ZERO):
            start[stream] = after
        end[stream] = max(min(end[stream], upto), start.get(stream, ZERO))

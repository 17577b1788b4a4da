"""How far a query is behind its streams, from the offsets Spark puts in its progress reports.

Spark's ``StreamingQueryProgress`` shows, per source, the batch's ``endOffset`` and the
source's ``latestOffset`` (what ``reportLatestOffset`` answered, right after the batch's end
was chosen). atlasbus puts in the latter, per stream, ``behind``: the entries after the batch's
end when it was chosen, where the driver knew it without asking Redis more (``entries_after``:
exact for a stream read from its beginning or caught up, and on Redis 7 from the entry counts,
over-counting entries deleted meanwhile). Otherwise the two offsets' ``index`` (Redis 7's
``entries-added`` at each position) give it, where both carry one. Without either, only
"caught up" (0) can be told from the IDs; the figure is then ``None`` and the mirrored
``group``'s ``XINFO GROUPS`` lag is the gauge to use (docs/operations.md). ``entries_behind``
is pure: callable from a listener on the driver, a notebook or a job that reads progress JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from atlasbus.bus.stream_catalog import StreamCatalog, StreamInfo, Walk
from atlasbus.errors import OffsetError
from atlasbus.model.entry_id import ZERO
from atlasbus.model.offsets import StreamOffsets
from atlasbus.model.stream_plan import StreamPlan
from atlasbus.options.source import SourceOptions


def latest_with_counts(
    catalog: StreamCatalog,
    options: SourceOptions,
    *,
    infos: Mapping[str, StreamInfo | None] | None = None,
    behind: Mapping[str, int | None] | None = None,
) -> dict[str, object]:
    """What the stream reader's ``reportLatestOffset`` answers; driver.

    Each stream's newest ID, its ``index`` (Redis 7's ``entries-added``) and, where known,
    ``behind``: entries after the end of the batch just chosen (``entries_after``). ``infos``
    are the XINFO STREAM replies ``latestOffset`` took for that batch; without them, one SCAN
    (for a pattern) and one pipelined XINFO STREAM.
    """
    if infos is None:
        infos = catalog.info(catalog.discover(options.subscription))
    report: dict[str, object] = {}
    for stream, info in sorted(infos.items()):
        if info is None:
            continue
        value = StreamPlan(info.last_generated, index=info.entries_added).to_json_value()
        count = (behind or {}).get(stream)
        if count is not None:
            value = {"id": str(info.last_generated), **(value if isinstance(value, dict) else {})}
            value["behind"] = count
        report[stream] = value
    return report


def entries_after(
    start: StreamOffsets,
    end: StreamOffsets,
    infos: Mapping[str, StreamInfo | None],
    walks: Mapping[str, Walk],
) -> dict[str, int | None]:
    """Per stream, the entries after ``end`` (the batch just chosen) when it was chosen; driver.

    From what ``latestOffset`` already knows, asking Redis nothing: 0 at the stream's newest
    entry; the stream's length for a stream not read at all; on Redis 7, ``entries-added``
    less the entries received up to ``end`` (``StreamPlan.entries_read``; over-counts
    entries deleted meanwhile); for a stream read from its beginning, its length less the
    entries walked. None where nothing tells.
    """
    behind: dict[str, int | None] = {}
    for stream, info in infos.items():
        if info is None:
            continue
        after = start.get(stream, ZERO)
        position = end.get(stream, after)
        read = end.plan(stream).entries_read if stream in end else None
        walk = walks.get(stream)
        if position >= info.last_generated:
            behind[stream] = 0
        elif position == ZERO:
            behind[stream] = info.length
        elif read is not None and info.entries_added is not None:
            behind[stream] = max(0, info.entries_added - read)
        elif walk is not None and after == ZERO:
            behind[stream] = max(0, info.length - walk.total)
        else:
            behind[stream] = None
    return behind


def entries_behind(
    end: str | Mapping[str, object] | None, latest: str | Mapping[str, object] | None
) -> dict[str, int | None] | None:
    """Per stream, entries between a batch's end and the latest offset; ``None`` if unknown.

    ``end`` and ``latest`` are a progress report's ``endOffset`` and ``latestOffset`` (JSON
    text or parsed). Returns ``None`` when either is not an atlasbus offset (another source).
    """
    end_offsets, latest_offsets = _parse(end), _parse(latest)
    if end_offsets is None or latest_offsets is None:
        return None
    behind: dict[str, int | None] = {}
    reported = _reported_behind(latest)
    for stream in latest_offsets:
        newest = latest_offsets.plan(stream)
        read = end_offsets.plan(stream) if stream in end_offsets else None
        if reported.get(stream) is not None:
            behind[stream] = reported[stream]
        elif read is not None and read.position >= newest.position:
            behind[stream] = 0
        elif newest.index is not None and read is None:
            behind[stream] = newest.index  # not read at all yet (counts deleted entries too)
        elif newest.index is not None and read is not None and read.entries_read is not None:
            behind[stream] = max(0, newest.index - read.entries_read)
        else:
            behind[stream] = None
    return behind


def _reported_behind(latest: str | Mapping[str, object] | None) -> dict[str, int]:
    """The ``behind`` counts ``latest_with_counts`` put in a latest offset."""
    raw = json.loads(latest) if isinstance(latest, str) else latest
    counts: dict[str, int] = {}
    for stream, value in (raw or {}).items():
        if isinstance(value, Mapping) and isinstance(value.get("behind"), int):
            counts[str(stream)] = value["behind"]
    return counts


def _parse(value: str | Mapping[str, object] | None) -> StreamOffsets | None:
    if value is None:
        return None
    try:
        raw = json.loads(value) if isinstance(value, str) else value
        if not isinstance(raw, Mapping):
            return None
        return StreamOffsets.from_dict(raw)
    except (OffsetError, json.JSONDecodeError):
        return None

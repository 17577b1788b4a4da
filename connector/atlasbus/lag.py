"""How far a query is behind its streams, from the offsets Spark puts in its progress reports.

Spark's ``StreamingQueryProgress`` shows, per source, the batch's ``endOffset`` and the
source's ``latestOffset`` (what ``reportLatestOffset`` answered). On Redis 7 both carry each
stream's ``index``: how many entries the stream had ever received up to that position
(``entries-added``). Their difference is the entries the query has yet to read, exact unless
entries were deleted in between (then it counts them too). Without an index (Redis 6.2, or a
batch cut short with no count), only "caught up" (0) can be told from the IDs alone; the
figure is then ``None`` and the mirrored ``group``'s ``XINFO GROUPS`` lag is the gauge to use
(docs/operations.md). Pure functions: callable from a listener on the driver, a notebook or a
monitoring job that reads progress JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from atlasbus.errors import OffsetError
from atlasbus.offsets import StreamOffsets
from atlasbus.source_options import SourceOptions
from atlasbus.stream_plan import StreamPlan
from atlasbus.streams import StreamCatalog


def latest_with_counts(catalog: StreamCatalog, options: SourceOptions) -> StreamOffsets:
    """Each subscribed stream's newest ID and, on Redis 7, its ``entries-added``; driver.

    What the stream reader's ``reportLatestOffset`` answers: one SCAN (for a pattern) and one
    pipelined XINFO STREAM for all streams.
    """
    streams = catalog.discover(options.subscription)
    infos = catalog.info(streams)
    return StreamOffsets.from_plans(
        {
            stream: StreamPlan(info.last_generated, index=info.entries_added)
            for stream, info in infos.items()
            if info is not None
        }
    )


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
    for stream in latest_offsets:
        newest = latest_offsets.plan(stream)
        read = end_offsets.plan(stream) if stream in end_offsets else None
        if read is not None and read.position >= newest.position:
            behind[stream] = 0
        elif newest.index is not None and read is None:
            behind[stream] = newest.index  # not read at all yet (counts deleted entries too)
        elif newest.index is not None and read is not None and read.index is not None:
            behind[stream] = max(0, newest.index - read.index)
        else:
            behind[stream] = None
    return behind


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

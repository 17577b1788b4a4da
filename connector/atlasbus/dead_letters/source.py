"""Dead letters from a decoded source page: the rows whose ``error`` is set.

The source decodes a page into the envelope schema; malformed entries come back as rows with
``error`` and the raw ``fields``. ``split_decoded`` keeps the good rows for the output and turns
the bad ones into ``source-decode`` dead letters, so none is dropped. Runs on executors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from atlasbus.dead_letters.record import DeadLetter, QueryContext
from atlasbus.dead_letters.schema import SOURCE_DECODE
from atlasbus.model.conversions import int32_or_none, text_or_none
from atlasbus.wire.raw_text import original_text

MALFORMED_ENTRY = "malformed-entry"


def split_decoded(
    batch: pa.RecordBatch,
    *,
    context: QueryContext,
    reasons: Sequence[str | None] | None = None,
    at: datetime | None = None,
) -> tuple[pa.RecordBatch, list[DeadLetter]]:
    """``batch`` without its error rows, and those rows as dead letters (in entry order).

    ``reasons`` are the decoder's reason codes per row (``DecodedPage.reasons``); without them
    every dead letter gets the generic ``malformed-entry``.
    """
    errors = batch.column("error")
    if errors.null_count == len(errors):
        return batch, []
    bad = pc.is_valid(errors)
    good = batch.filter(pc.invert(bad))
    rows = [i for i, flag in enumerate(bad.to_pylist()) if flag]
    letters = [
        _letter(
            row,
            (reasons[index] if reasons is not None else None) or MALFORMED_ENTRY,
            context,
            at,
        )
        for index, row in zip(rows, batch.filter(bad).to_pylist(), strict=True)
    ]
    return good, letters


def _letter(
    row: Mapping[str, object], reason: str, context: QueryContext, at: datetime | None
) -> DeadLetter:
    raw = dict(row["fields"] or [])  # type: ignore[call-overload]
    return DeadLetter.for_entry(
        SOURCE_DECODE,
        reason,
        str(row["error"]),
        stream=str(row["stream"]),
        entry_id=str(row["id"]),
        topic=text_or_none(row["topic"]),
        correlation_id=original_text(raw.get("correlation_id")),
        priority=int32_or_none(raw.get("priority")),  # the raw text stays in fields
        delivery_attempts=int32_or_none(raw.get("delivery_attempts")),
        payload=original_text(raw.get("payload")),
        fields=raw,
        context=context,
        at=at,
    )

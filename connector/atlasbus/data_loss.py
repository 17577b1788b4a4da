"""Deciding whether entries vanished before the query read them, and what to do about it.

One place decides, so the message is the same wherever loss is found: it names the stream,
the missing range and the ``failOnDataLoss`` option.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from atlasbus.entry_id import EntryId
from atlasbus.errors import DataLossError
from atlasbus.streams import StreamInfo

log = logging.getLogger("atlasbus.data_loss")


@dataclass(frozen=True)
class LostRange:
    """Entries in ``(after, upto]`` of ``stream`` were removed before they were read."""

    stream: str
    after: EntryId
    upto: EntryId

    def describe(self) -> str:
        return (
            f"stream {self.stream!r}: entries after {self.after} up to {self.upto} were removed "
            "(trimmed or deleted) before the query read them"
        )


def find_lost_range(
    stream: str, position: EntryId, batch_end: EntryId, info: StreamInfo | None, *,
    position_still_present: bool | None,
) -> LostRange | None:
    """Compare the checkpointed ``position`` with what the stream still holds.

    Redis 7 records the greatest deleted ID: anything deleted after our position is loss.
    Older servers do not, so there loss is inferred when our last-read entry is gone and the
    stream now starts after it (trimming passed us).
    """
    if info is None:
        return None
    if info.max_deleted is not None:
        if info.max_deleted > position:
            return LostRange(stream, position, min(info.max_deleted, batch_end))
        return None
    if position_still_present is False and info.first is not None and info.first > position:
        return LostRange(stream, position, info.first.predecessor())
    if position_still_present is False and info.first is None and info.last_generated > position:
        return LostRange(stream, position, info.last_generated)
    return None


def on_data_loss(lost: LostRange, *, fail_on_data_loss: bool) -> None:
    """Raise (the default) or warn, naming ``failOnDataLoss`` either way."""
    if fail_on_data_loss:
        raise DataLossError(
            f"{lost.describe()}. The query stops so nothing is skipped silently; set option "
            "failOnDataLoss=false to continue from the entries still in the stream."
        )
    log.warning("%s; continuing because failOnDataLoss=false", lost.describe())

"""Deciding whether entries vanished before the query read them, and what to do about it.

One place decides, so the message is the same wherever loss is found: it names the stream,
the missing range and the ``failOnDataLoss`` option.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from atlasbus.entry_id import ZERO, EntryId
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
    stream: str,
    position: EntryId,
    batch_end: EntryId,
    info: StreamInfo | None,
    *,
    position_still_present: bool,
) -> LostRange | None:
    """Compare the checkpointed ``position`` (an entry the query read) with the stream now.

    Two ways entries vanish: XDEL, which Redis 7 records as the greatest deleted ID, and
    trimming (XTRIM, XADD MAXLEN), which removes the oldest entries and is recorded nowhere,
    but which removed our own last-read entry if it passed us.
    """
    if info is None or position == ZERO:
        return None
    if info.max_deleted is not None and info.max_deleted > position:
        return LostRange(stream, position, min(info.max_deleted, batch_end))
    deleted_by_xdel = info.max_deleted is not None and info.max_deleted >= position
    if position_still_present or deleted_by_xdel:
        return None
    if info.first is None:
        if info.last_generated > position:
            return LostRange(stream, position, min(info.last_generated, batch_end))
        return None
    if info.first > position.successor():
        return LostRange(stream, position, min(info.first.predecessor(), batch_end))
    return None


def on_data_loss(
    lost: LostRange,
    *,
    fail_on_data_loss: bool,
    dead_letter_table: str | None = None,
    topic: str | None = None,
) -> None:
    """Raise (the default) or warn, naming ``failOnDataLoss`` either way.

    With ``failOnDataLoss=false`` and a ``deadLetterTable``, the lost range also becomes one
    ``data-loss`` dead letter; its ID is made of the stream and the range, so finding the same
    loss again (a replanned or replayed batch) records nothing new. Driver.
    """
    if fail_on_data_loss:
        raise DataLossError(
            f"{lost.describe()}. The query stops so nothing is skipped silently; set option "
            "failOnDataLoss=false to continue from the entries still in the stream."
        )
    log.warning("%s; continuing because failOnDataLoss=false", lost.describe())
    if dead_letter_table is not None:
        from atlasbus.dead_letters import DeadLetter, DeadLetterTable

        letter = DeadLetter.for_data_loss(
            stream=lost.stream,
            after=str(lost.after),
            upto=str(lost.upto),
            topic=topic,
            error=lost.describe(),
        )
        DeadLetterTable(dead_letter_table).append([letter])

"""Trigger pacing (``minEntriesPerTrigger`` with ``maxTriggerDelay``), as Kafka's source has it.

Runs on the driver, inside the stream reader's ``latestOffset``: a Python source cannot hand
Spark a delay-bounded read limit (pyspark 4.2 has ``ReadMinRows`` but no ``maxTriggerDelay``),
so the policy lives here. A trigger that finds fewer than ``min_entries`` new entries, less
than ``max_delay_ms`` after the last batch was released, answers with its start offset: Spark
then runs no batch and asks again at the next trigger. As in Kafka's source, the first trigger
is never held (a restarted query goes on at once) and the delay counts from the last trigger
that was let through, so a trickle is read at most ``max_delay_ms`` after it, a burst at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from atlasbus.bus.stream_catalog import StreamCatalog, StreamInfo, Walk
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.model.offsets import StreamOffsets
from atlasbus.options.source import TriggerPacing


class TriggerPacer:
    """Decides, trigger by trigger, whether enough entries wait or the delay ran out; driver."""

    def __init__(self, policy: TriggerPacing, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._released_at: float | None = None  # Kafka's lastTriggerMillis = 0: none yet

    def released_elsewhere(self) -> None:
        """A batch ran without asking (a ``latest`` start's empty first batch): it counts as
        the first trigger, never held, and the delay's clock starts now."""
        self._released_at = self._clock()

    def hold(self, new_entries: int) -> bool:
        """True to run no batch now; False releases one (and restarts the delay's clock)."""
        waited_ms = (
            math.inf if self._released_at is None else (self._clock() - self._released_at) * 1000
        )
        if new_entries >= self.policy.min_entries or waited_ms >= self.policy.max_delay_ms:
            self._released_at = self._clock()
            return False
        return True


def new_entries_at_least(
    catalog: StreamCatalog,
    start: StreamOffsets,
    end: Mapping[str, EntryId],
    infos: Mapping[str, StreamInfo | None],
    walks: Mapping[str, Walk],
    enough: int,
) -> int:
    """How many entries lie between ``start`` and ``end``, counted only up to ``enough``.

    Cheapest answer first, stream by stream: the admission-control walk when there was one;
    the whole stream's length for a stream the query has not read yet; Redis 7's
    ``entries-added`` minus the count recorded at ``start`` (``entries_read``; an over-count
    when entries were deleted meanwhile, which releases a batch early, never late); else a
    walk of at most the entries still missing.
    """
    total = 0
    for stream in sorted(end):
        if total >= enough:
            break
        after = start.get(stream, ZERO)
        if end[stream] <= after:
            continue
        walk = walks.get(stream)
        info = infos.get(stream)
        if walk is not None:
            total += walk.total
            continue
        if info is not None and after == ZERO and end[stream] == info.last_generated:
            total += info.length
            continue
        index = start.plan(stream).entries_read if stream in start else None
        if (
            info is not None
            and info.entries_added is not None
            and index is not None
            and end[stream] == info.last_generated
        ):
            total += info.entries_added - index
            continue
        counted = Walk(piece_size=enough)
        _, walked = catalog.advance(stream, after, end[stream], enough - total, counted)
        total += walked
    return total

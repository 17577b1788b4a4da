"""The progress display: a legend once, then one line of figures that add up at every tick.

``read``, ``written`` and ``dead letters`` come from the tally of the last committed
micro-batch (one moment, one source); ``published`` is what Redis says its streams received
(``XINFO STREAM``, one command per stream), and ``lag`` is ``published - read``. So every line
satisfies ``read = written + dead letters`` and ``published = read + lag``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from pyspark_atlasbus.demo.server import group_caught_up, published_entries
from pyspark_atlasbus.demo.writer import EventsWriter

LEGEND = (
    "progress: published = entries in the demo's Redis streams; read = entries of the "
    "committed micro-batches = written (events table) + dead letters (dead-letter table); "
    "lag = published - read; batch = the last committed micro-batch"
)


class Progress:
    """Redrawn in place on a terminal, one line every few seconds otherwise (logs, CI)."""

    def __init__(self, client: Any, writer: EventsWriter) -> None:
        self.client, self.writer = client, writer
        self.tty = sys.stdout.isatty()
        self.interval = 0.5 if self.tty else 0.25
        self._every = 0.5 if self.tty else 5.0
        self._last_shown = 0.0
        self._drawn = False
        self._legend_shown = False
        self.first_reported = False
        """Whether the first micro-batch's delay after the traffic started was printed."""

    def caught_up(self, published_by_thread: int) -> bool:
        """Every published entry committed, and the group moved there (at the next trigger)."""
        published = published_entries(self.client)
        return (
            published >= published_by_thread
            and self.writer.tally.read == published
            and group_caught_up(self.client)
        )

    def show(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_shown < self._every:
            return
        self._last_shown = now
        if not self._legend_shown:
            self.finish_line()
            print(LEGEND, flush=True)
            self._legend_shown = True
        tally = self.writer.tally  # one batch's figures, read once
        published = published_entries(self.client)
        batch = "-" if tally.batch_id is None else tally.batch_id
        line = (
            f"published {published:>9,} | read {tally.read:>9,} = written {tally.written:>9,} "
            f"+ dead letters {tally.dead_letters:>6,} | lag {published - tally.read:>7,} "
            f"| batch {batch}"
        )
        if self.tty:
            print(f"\r{line}\x1b[K", end="", flush=True)
            self._drawn = True
        else:
            print(line, flush=True)

    def finish_line(self) -> None:
        if self._drawn:
            print(flush=True)
            self._drawn = False

"""The sink of the demo's query: good events to a Delta table, by one of two engines.

With the Delta Lake jars loaded, Spark's own Delta sink (``writeStream.format("delta")``:
exactly once through the checkpoint and the table's app transaction per batch), its tally
taken by a ``StreamingQueryListener`` when each batch is committed. Without them, a
``foreachBatch`` function appending with delta-rs, idempotent by the same kind of app
transaction. Either way the tally the progress display shows is taken at one moment (when a
batch is committed), so the figures of one line always add up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark_atlasbus.demo.common import EVENTS_APP_ID


@dataclass(frozen=True)
class Tally:
    """What the query had done when micro-batch ``batch_id`` was committed.

    ``written``: rows in the events table; ``dead_letters``: rows in the dead-letter table
    (the source records a batch's malformed entries there while reading it, before the
    ``foreachBatch`` function gets the good ones). Every entry read goes to exactly one of
    the two, so ``read`` is their sum.
    """

    batch_id: int | None = None
    written: int = 0
    dead_letters: int = 0

    @property
    def read(self) -> int:
        return self.written + self.dead_letters


class EventsWriter:
    """``foreachBatch``: append a micro-batch's good events to a Delta table with delta-rs.

    (Also the tally's holder when Spark's Delta sink writes instead: ``DeltaSinkTally``.)

    Each commit records the Delta app transaction (``EVENTS_APP_ID``, batch id) and a batch
    the table already holds is skipped, so a micro-batch Spark replays after a failure is not
    written twice. Runs on the driver (foreachBatch functions do), so ``tally`` is exact; it is
    replaced whole after each batch, so a reader in another thread sees one batch's figures.
    """

    def __init__(self, events: Path, dead_letters: Path) -> None:
        self.path = str(events)
        self.dead_letters_path = dead_letters
        self.tally = Tally()
        self.first_read_at: float | None = None
        """When the first batch with entries was committed (``time.monotonic()``)."""

    def __call__(self, frame: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        written = self.tally.written
        done: int | None = None
        if DeltaTable.is_deltatable(self.path):
            done = DeltaTable(self.path).transaction_version(EVENTS_APP_ID)
        if done is None or done < batch_id:
            table = frame.drop("error", "fields").toArrow()  # reads the batch
            write_deltalake(
                self.path,
                table,
                mode="append",
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(EVENTS_APP_ID, batch_id)]
                ),
            )
            written += table.num_rows
        self.record(Tally(batch_id, written, table_rows(self.dead_letters_path)))

    def record(self, tally: Tally) -> None:
        """Publish one batch's figures (replaced whole: readers in other threads see one)."""
        if self.first_read_at is None and tally.read > 0:
            self.first_read_at = time.monotonic()
        self.tally = tally


def delta_sink_tally(writer: EventsWriter) -> Any:
    """A ``StreamingQueryListener`` that records ``writer``'s tally after each committed batch
    of Spark's Delta sink: rows in the events table and the dead-letter table then (read with
    delta-rs from the tables' logs). Runs on the driver, in Spark's listener thread."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class DeltaSinkTally(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            batch_id = int(event.progress.batchId)
            events = Path(writer.path)
            writer.record(Tally(batch_id, table_rows(events), table_rows(writer.dead_letters_path)))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return DeltaSinkTally()


def table_rows(path: Path) -> int:
    """Rows in the Delta table at ``path`` (0 when there is none yet)."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return 0
    return int(DeltaTable(str(path)).count())

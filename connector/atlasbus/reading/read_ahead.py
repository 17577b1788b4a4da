"""A generator run on a thread of its own, a bounded number of items ahead of its consumer.

A task reading a range has two stages that each need a core part of the time: receiving
XRANGE replies (waiting while Redis serves a page, then walking its bytes in compiled code
that releases the GIL) and cutting and decoding them. On one thread the task sat idle while
Redis served each page; with the receiving on a thread of its own, Redis serves the next pages
while the task decodes. Runs wherever the reader runs (executors; the driver for batch reads
planned there).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator
from contextlib import suppress
from typing import TypeVar

T = TypeVar("T")


class _Ended:
    """What the producing thread hands over last: nothing (it ran out) or the error it raised."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


def read_ahead(items: Callable[[], Generator[T]], *, ahead: int = 1) -> Generator[T]:
    """Yield what ``items()`` yields, produced on another thread at most ``ahead`` items early.

    An error ``items()`` raises is raised here, after the items before it. When the consumer
    stops early (it raised, or closed this generator), the producer is closed at its next item
    (so its ``with`` blocks end on its own thread) and joined before this returns.
    """
    handed: queue.Queue[T | _Ended] = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def produce() -> None:
        produced = items()
        try:
            for item in produced:
                handed.put(item)
                if stop.is_set():
                    return
        except BaseException as error:
            handed.put(_Ended(error))
        else:
            handed.put(_Ended())
        finally:
            produced.close()

    thread = threading.Thread(target=produce, name="atlasbus-read-ahead", daemon=True)
    thread.start()
    try:
        while not isinstance(item := handed.get(), _Ended):
            yield item
        if item.error is not None:
            raise item.error
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting to hand over, until it ends
            with suppress(queue.Empty):
                handed.get(timeout=0.05)
        thread.join()

"""The traffic: a thread publishing ATLAS checkout flows to the demo's streams; driver."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from atlasbus.sandbox.traffic import TrafficGenerator
from pyspark_atlasbus.demo.common import STREAM_PREFIX


class TrafficPublisher(threading.Thread):
    """Publishes ``rate`` entries/s (pipelined XADD) until ``duration`` ends or it is stopped.

    Counts what Redis acknowledged: ``published`` entries, ``malformed`` by expected reason.
    ``started_at`` is when it began (``time.monotonic()``), to time the first micro-batch.
    """

    def __init__(self, client: Any, rate: float, duration: float) -> None:
        super().__init__(name="atlasbus-demo-publisher", daemon=True)
        self.client, self.rate, self.duration = client, rate, duration
        self.published = 0
        self.malformed: Counter[str] = Counter()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.started_at: float | None = None

    def stop(self, timeout: float = 10.0) -> None:
        """Publish nothing more; wait (up to ``timeout`` seconds) for the pipeline in flight."""
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout=timeout)

    def run(self) -> None:
        generator = TrafficGenerator(seed=7, malformed_share=0.01)
        started = self.started_at = time.monotonic()
        try:
            while not self.stop_event.is_set():
                elapsed = time.monotonic() - started
                due = min(int(elapsed * self.rate) + 1, int(self.duration * self.rate))
                if due > self.published:
                    messages = generator.take(due - self.published)
                    pipe = self.client.pipeline(transaction=False)
                    for message in messages:
                        pipe.xadd(f"{STREAM_PREFIX}:{message.topic}", message.fields)
                    pipe.execute()
                    self.published += len(messages)
                    self.malformed.update(m.reason for m in messages if m.reason is not None)
                if elapsed >= self.duration:
                    break
                self.stop_event.wait(0.05)
        except BaseException as exc:  # reported by the main thread
            self.error = exc

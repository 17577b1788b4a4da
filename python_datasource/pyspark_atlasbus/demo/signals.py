"""Ctrl-C and SIGTERM: stop cleanly between micro-batches, or at once when pressed twice."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import FrameType

from pyspark_atlasbus.demo.common import STOP_DRAIN_TIMEOUT_S


@dataclass
class StopRequest:
    """Ctrl-C: the first asks to stop publishing and then the query between micro-batches
    (``pipeline.run_pipeline``), the second forces it."""

    event: threading.Event = field(default_factory=threading.Event)
    presses: int = 0

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.presses += 1
        if self.presses > 1:
            raise KeyboardInterrupt
        self.event.set()
        print(
            "\nCtrl-C: stopping: no more traffic; the query reads what was published "
            f"(for at most {STOP_DRAIN_TIMEOUT_S:g} s), then stops between micro-batches "
            "(press again to stop now) ...",
            flush=True,
        )


def exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM unwinds like an exception, so a killed demo still stops its Redis."""
    raise SystemExit(128 + signum)

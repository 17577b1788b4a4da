"""A Redis Cluster's slot map, read again when it changed, and the replies that say so
(MOVED, ASK, TRYAGAIN); driver and executors. Apart from ``atlasbus.bus.cluster`` so that the
connection module can use it without importing that one, and without importing redis-py at
import time (the command line starts without it).
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

# How long to wait before asking again after TRYAGAIN or an ASK to a node mid-migration.
REDIRECT_PAUSE_S = 0.05
# How often a cluster is asked for its slot map while a failed master is replaced.
FAILOVER_POLL_S = 0.5

_refresh_lock = threading.Lock()


def refresh_slot_map(client: Any) -> None:
    """Read the slot map again (after MOVED, or when a master stopped answering)."""
    with _refresh_lock:
        client.nodes_manager.initialize()


@cache
def redirect_errors() -> tuple[type[Exception], ...]:
    """redis-py's errors for the replies that send a command elsewhere, or to wait: MOVED,
    ASK and TRYAGAIN."""
    from redis.exceptions import AskError, MovedError, TryAgainError

    return (MovedError, AskError, TryAgainError)


def is_moved(error: BaseException) -> bool:
    """MOVED: the slot has a new master (not ASK or TRYAGAIN: its keys are migrating)."""
    from redis.exceptions import MovedError

    return isinstance(error, MovedError)

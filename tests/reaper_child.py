"""A reaper killed mid-sweep: run steps 1 and 2 (and 3), then SIGKILL this very process.

Used by test_reaper.py's crash tests: the dead letters are durable in the table, the entries
not yet acknowledged (still with their consumer after ``record``, held by ``atlasbus-reaper``
after ``claim``). Nothing in the reaper knows about this script: it calls the public steps.

Usage: python reaper_child.py URL STREAM GROUP MAX_DELIVERIES MIN_IDLE_MS TABLE record|claim
"""

from __future__ import annotations

import os
import signal
import sys

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.dead_letters import DeadLetterTable
from atlasbus.operations.reaper import (
    claim_exhausted,
    find_exhausted,
    record_dead_letters,
    start_cursors,
)
from atlasbus.options.source import SweepPolicy


def main(argv: list[str]) -> None:
    url, stream, group, max_deliveries, min_idle_ms, table, stop_after = argv
    if stop_after not in ("record", "claim"):
        raise SystemExit(f"stop after 'record' or 'claim', not {stop_after!r}")
    endpoint = RedisEndpoint.from_options(url, None, None)
    policy = SweepPolicy(group, int(max_deliveries), int(min_idle_ms))
    found = find_exhausted(endpoint, policy, start_cursors([stream]))
    recorded = record_dead_letters(
        found, DeadLetterTable(table), policy, topic_of=lambda key: key.partition(":")[2]
    )
    print(f"recorded {len(recorded.written)}", flush=True)
    if stop_after == "claim":
        claimed = claim_exhausted(endpoint, found, policy)
        print(f"claimed {sum(map(len, claimed.held.values()))}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])

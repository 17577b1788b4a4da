"""``trimConsumed``: a running query trims each stream to what every consumer has consumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from tests.helpers import publish, stream_reader


def remaining(r: redis.Redis, stream: str) -> list[str]:
    return [entry_id.decode() for entry_id, _ in r.xrange(stream)]


def test_trimmed_to_the_slowest_consumer_and_never_past_it(
    spark: Any, redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    stream, lone = f"{prefix}:orders", f"{prefix}:audit"
    ids = publish(r, prefix, "orders", 100)
    lone_ids = publish(r, prefix, "audit", 10)
    r.xgroup_create(stream, "fast", id=ids[59])  # consumed up to the 60th entry
    r.xgroup_create(stream, "slow", id=ids[19])
    r.xreadgroup("slow", "worker", {stream: ">"}, count=10)  # 21st-30th delivered, not acked
    frame = stream_reader(spark, redis_url, prefix, topics="orders,audit", trimConsumed="true")
    query = (
        frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    )
    try:
        query.processAllAvailable()
        query.processAllAvailable()  # the commit of the last batch comes with the next trigger
        # The query read everything; "slow" still holds its oldest pending entry, the 21st.
        assert remaining(r, stream) == ids[20:]
        # A stream no group reads is trimmed to the query, keeping the entry it stands on.
        assert remaining(r, lone) == lone_ids[-1:]

        # "slow" acknowledges and moves past "fast": now "fast" is the slowest.
        r.xack(stream, "slow", *ids[20:30])
        r.xgroup_setid(stream, "slow", id=ids[89])
        more = publish(r, prefix, "orders", 20, start=100)
        query.processAllAvailable()
        query.processAllAvailable()
        assert remaining(r, stream) == ids[59:] + more

        # A group created later from 0 holds everything from then on.
        r.xgroup_create(stream, "late", id="0")
        later = publish(r, prefix, "orders", 5, start=120)
        query.processAllAvailable()
        query.processAllAvailable()
        assert remaining(r, stream) == ids[59:] + more + later
        # ... until it consumes: then the next commit trims to the next slowest.
        r.xgroup_setid(stream, "late", id=more[9])
        last = publish(r, prefix, "orders", 1, start=125)
        query.processAllAvailable()
        query.processAllAvailable()
        assert remaining(r, stream) == ids[59:] + more + later + last
        r.xgroup_setid(stream, "fast", id=more[4])  # now "slow" (at the 90th) is the slowest
        final = publish(r, prefix, "orders", 1, start=126)
        query.processAllAvailable()
        query.processAllAvailable()
        assert remaining(r, stream) == ids[89:] + more + later + last + final
    finally:
        query.stop()


def test_nothing_is_trimmed_before_the_first_batch_is_committed(
    spark: Any, redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """startingOffsets=latest skips the history, but the query has consumed none of it."""
    stream = f"{prefix}:orders"
    history = publish(r, prefix, "orders", 10)
    frame = stream_reader(
        spark, redis_url, prefix, topics="orders", startingOffsets="latest", trimConsumed="true"
    )
    query = (
        frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    )
    try:
        query.processAllAvailable()
        query.processAllAvailable()
        assert remaining(r, stream) == history  # no batch ran: nothing was consumed
        new = publish(r, prefix, "orders", 5, start=10)
        query.processAllAvailable()
        query.processAllAvailable()
        assert remaining(r, stream) == new[-1:]  # trimmed to the entry the query stands on
    finally:
        query.stop()

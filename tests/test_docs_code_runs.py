"""The Python blocks of docs/*.md that need Spark, run as a user pastes them (the slow tier).

Each block runs unchanged on the session's one SparkSession (the ``spark`` fixture), with only
its places replaced (``run_block``, ``with_places`` in test_docs_code.py): folders become the
test's, Redis URLs (every block names one) the URL of this module's own redis-server, whose
streams use the default prefix ``atlas_bus``: a server no other module shares. The
names a fragment assumes (``spark``, ``df``, ``customers``, ``r``, ``dead_letter``, ...) are
real objects; ``notify`` and ``gauge`` stand for the user's pager and metrics and record what
they are given. Each test prepares real data (entries in Redis, Delta dead-letter tables
written with ``DeadLetterTable``), drains and stops the queries a block starts, and asserts
what the block did.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from deltalake import DeltaTable

from atlasbus.dead_letters import (
    PROCESSING,
    SINK_PUBLISH,
    SOURCE_DECODE,
    DeadLetter,
    DeadLetterTable,
)
from atlasbus.sandbox.redis_server import RedisServer
from helpers import BatchCollector, envelope, publish, redis_major, run_available_now, wait_until
from test_docs_code import ROOT, block, run_block, with_places

TABLE = "/lake/atlasbus/dead_letters"
BUS = "redis://bus-redis:6379/0"  # the blocks' Redis: the module's own server here


def documented_envelope_columns() -> list[str]:
    """The columns of a ``format=envelope`` read, from docs/wire-format.md's example table."""
    text = (ROOT / "docs" / "wire-format.md").read_text()
    header = text.split("read with the default `format=envelope` as:", 1)[1].strip().splitlines()[0]
    return [cell.strip() for cell in header.strip("|").split("|")]


ENVELOPE_COLUMNS = documented_envelope_columns()
# docs/operations.md, "Pending entries": the columns of a pendingOf read (format=envelope).
PENDING_COLUMNS = [
    *("topic", "stream", "id", "consumer", "idle_ms", "delivery_count", "entry_deleted"),
    *ENVELOPE_COLUMNS[3:],
]


@pytest.fixture(scope="module")
def private_redis() -> Iterator[RedisServer]:
    """This module's own redis-server: the blocks use the default prefix ``atlas_bus``."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def redis_env(private_redis: RedisServer) -> str:
    """The module's server's URL: what the blocks' "redis://bus-redis:6379/0" becomes."""
    return private_redis.url


@pytest.fixture
def bus(redis_env: str) -> Iterator[redis.Redis]:
    """A client of the module's server, emptied first: each block starts on an empty bus."""
    client = redis.Redis.from_url(redis_env)
    client.flushall()
    yield client
    client.close()


@contextmanager
def queries_drained(spark: Any) -> Iterator[None]:
    """After the block: every query it started reads all there is, then all are stopped."""
    assert spark.streams.active == [], "a query of an earlier test is still running"
    try:
        yield
        for query in spark.streams.active:
            query.processAllAvailable()
    finally:
        for query in spark.streams.active:
            query.stop()


@contextmanager
def listeners_removed(spark: Any) -> Iterator[None]:
    """Streaming listeners a block adds (unnamed, so not removable by name) removed after."""
    manager = spark.streams._jsqm
    before = {listener.hashCode() for listener in manager.listListeners()}
    try:
        yield
    finally:
        for listener in manager.listListeners():
            if listener.hashCode() not in before:
                manager.removeListener(listener)


@contextmanager
def session_settings_kept(spark: Any, *keys: str) -> Iterator[None]:
    """The session's settings of ``keys`` put back as they were (set, or not) after the block."""
    before = {key: spark.conf.get(key, None) for key in keys}
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def database_in(spark: Any, folder: Path) -> Iterator[str]:
    """A database of the test's own, in its folder, as the current one: a block's
    ``saveAsTable`` writes there, not into the working folder's spark-warehouse."""
    name = f"docs_{uuid.uuid4().hex[:10]}"
    before = spark.catalog.currentDatabase()
    spark.sql(f"CREATE DATABASE {name} LOCATION '{folder}'")
    spark.catalog.setCurrentDatabase(name)
    try:
        yield name
    finally:
        spark.catalog.setCurrentDatabase(before)
        spark.sql(f"DROP DATABASE {name} CASCADE")


def shown(text: str) -> list[list[list[str]]]:
    """The tables ``DataFrame.show()`` printed, each a header row then its rows, cells stripped."""
    tables: list[list[list[str]]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("|"):
            if not inside:
                tables.append([])
                inside = True
            tables[-1].append([cell.strip() for cell in line.strip()[1:-1].split("|")])
        elif not line.startswith("+"):
            inside = False
    return tables


# --- docs/dead-letters.md ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def decoded(spark: Any, redis_env: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """docs/dead-letters.md#0's streaming DataFrame, run once to the end of ``atlas_bus:orders``:
    five good entries and three malformed ones, one of them with bytes that are not UTF-8."""
    r = redis.Redis.from_url(redis_env)
    r.flushall()
    raw = [  # a field name and values that are not UTF-8, and the text \xe9 beside the byte
        (b"topic", b"orders"),
        (b"priority", b"1"),
        (b"payload", b'{"note": "caf\xe9"}'),
        (b"origin\xff", b"C:\\xe9 and caf\xe9"),
    ]
    good = publish(r, "atlas_bus", "orders", 2)
    json_bad = r.xadd("atlas_bus:orders", envelope("orders", 2, payload="{not json")).decode()
    good += publish(r, "atlas_bus", "orders", 2, start=3)
    priority_bad = r.xadd("atlas_bus:orders", envelope("orders", 5, priority="high")).decode()
    utf8_bad = r.xadd("atlas_bus:orders", dict(raw)).decode()
    good += publish(r, "atlas_bus", "orders", 1, start=6)
    r.close()

    folder = tmp_path_factory.mktemp("source_dead_letters")
    code = with_places(
        block("docs/dead-letters.md#0"), {TABLE: str(folder / "dead_letters"), BUS: redis_env}
    )
    (frame,) = run_block(code, {"spark": spark}, "docs/dead-letters.md#0")
    collector = BatchCollector(("id", "payload", "error"))
    run_available_now(frame, str(folder / "checkpoint"), collector).stop()
    return SimpleNamespace(
        frame=frame,
        rows=collector.rows,
        table=DeadLetterTable(folder / "dead_letters"),
        good=good,
        bad={json_bad: "invalid-json", priority_bad: "invalid-integer", utf8_bad: "invalid-utf8"},
        raw=raw,
        utf8_bad=utf8_bad,
    )


def test_source_dead_letters(decoded: Any) -> None:
    """docs/dead-letters.md#0: a streaming DataFrame of the documented columns whose output
    holds only the well-formed entries, each malformed one a source-decode dead letter."""
    assert decoded.frame.isStreaming
    assert decoded.frame.columns == ENVELOPE_COLUMNS
    assert [row["id"] for row in decoded.rows] == decoded.good
    assert [json.loads(row["payload"])["n"] for row in decoded.rows] == [0, 1, 3, 4, 6]
    assert {row["error"] for row in decoded.rows} == {None}
    letters = decoded.table.to_arrow().to_pylist()
    assert {row["entry_id"]: (row["stage"], row["reason"]) for row in letters} == {
        entry: ("source-decode", reason) for entry, reason in decoded.bad.items()
    }
    (json_bad,) = [row for row in letters if row["reason"] == "invalid-json"]
    assert json_bad["error"] == "field 'payload' is not valid JSON: '{not json'"
    assert {row["stream"] for row in letters} == {"atlas_bus:orders"}


def test_raw_entry_round_trips(decoded: Any, bus: redis.Redis) -> None:
    """docs/wire-format.md#0: a dead letter's ``fields``, read from the table, give back the
    entry exactly as Redis had it, byte for byte and in order, for ``XADD``."""
    (dead_letter,) = decoded.table.to_arrow(f"entry_id = '{decoded.utf8_bad}'").to_pylist()
    namespace = {"r": bus, "stream": "atlas_bus:orders-restored", "dead_letter": dead_letter}
    run_block(block("docs/wire-format.md#0"), namespace, "docs/wire-format.md#0")
    ((_, fields),) = bus.xrange("atlas_bus:orders-restored")
    assert list(fields.items()) == decoded.raw


def order(n: int, customer: str, amount: float | None) -> dict[str, str]:
    body: dict[str, Any] = {"order_id": n, "customer_id": customer}
    if amount is not None:
        body["amount"] = amount
    return envelope("orders", n, payload=json.dumps(body))


def test_with_dead_letters(spark: Any, bus: redis.Redis, redis_env: str, tmp_path: Path) -> None:
    """docs/dead-letters.md#1: orders of known customers with a positive amount are written
    to ``orders_enriched``; orders of unknown customers are recorded as ``unknown-customer``
    dead letters, and those failing the check as ``check-failed`` ones, each once."""
    ids = [
        bus.xadd("atlas_bus:orders", fields).decode()
        for fields in (
            order(0, "c1", 10),
            order(1, "c9", 5),  # unknown customer
            order(2, "c2", 0),  # fails the check
            order(3, "c2", 7.5),  # a decimal: the check must cast the JSON text to a number
            order(4, "c1", None),  # no amount: the check is null, so it fails
        )
    ]
    customers = spark.createDataFrame(
        [("c1", "Ada"), ("c2", "Grace")], "customer_id string, name string"
    )
    code = with_places(
        block("docs/dead-letters.md#1"),
        {
            TABLE: str(tmp_path / "dead_letters"),
            "/checkpoints/orders": str(tmp_path / "cp"),
            BUS: redis_env,
        },
    )

    with database_in(spark, tmp_path / "warehouse") as database:
        with queries_drained(spark):
            run_block(code, {"spark": spark, "customers": customers}, "docs/dead-letters.md#1")
        written = spark.table(f"{database}.orders_enriched").select("id", "name").collect()
    assert sorted((row["id"], row["name"]) for row in written) == [
        (ids[0], "Ada"),
        (ids[3], "Grace"),
    ]
    letters = DeadLetterTable(tmp_path / "dead_letters").to_arrow().to_pylist()
    check = "failed check: try_cast(get_json_object(payload, '$.amount') AS DOUBLE) > 0"
    assert sorted((r["entry_id"], r["stage"], r["reason"], r["error"]) for r in letters) == [
        (ids[1], PROCESSING, "unknown-customer", "rejected by upsert"),
        (ids[2], PROCESSING, "check-failed", check),
        (ids[4], PROCESSING, "check-failed", check),
    ]
    (unknown,) = [row for row in letters if row["reason"] == "unknown-customer"]
    assert json.loads(unknown["payload"]) == {"order_id": 1, "customer_id": "c9", "amount": 5}


# A dead-letter table of 16 versions after its creation, one letter each (so time travel has
# versions to go to): a data-loss letter of three days ago, then 15 of now.
RECENT = [
    *[(SOURCE_DECODE, "invalid-json", "orders")] * 8,
    *[(SOURCE_DECODE, "missing-field", "payments")] * 4,
    *[(SINK_PUBLISH, "too-big", "orders")] * 2,
    (PROCESSING, "check-failed", "orders"),
]


def versioned_table(path: Path) -> list[DeadLetter]:
    """The letters, appended one commit each: version ``n`` holds the first ``n``."""
    old = datetime.now(UTC) - timedelta(days=3)
    letters = [
        DeadLetter.for_data_loss(
            stream="atlas_bus:orders", after="1-0", upto="9-0", topic="orders", at=old
        )
    ]
    for n, (stage, reason, topic) in enumerate(RECENT):
        if stage == SINK_PUBLISH:
            letter = DeadLetter.for_row(
                reason, "too big", write_id="q/3/0", row=n, topic=topic, payload="{}"
            )
        else:
            letter = DeadLetter.for_entry(
                stage,
                reason,
                reason,
                stream=f"atlas_bus:{topic}",
                entry_id=f"1714564800000-{n}",
                topic=topic,
            )
        letters.append(letter)
    table = DeadLetterTable(path)
    for letter in letters:
        table.append([letter])
    assert table.version() == len(letters)
    return letters


@pytest.fixture(scope="module")
def versioned(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One such table for the blocks that only read it."""
    path = tmp_path_factory.mktemp("versioned") / "dead_letters"
    return SimpleNamespace(path=path, letters=versioned_table(path))


def test_read_dead_letters(spark: Any, versioned: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/dead-letters.md#4: the table as a DataFrame, counted by topic and stage, and as it
    was at version 12 (its first 12 letters)."""
    code = with_places(block("docs/dead-letters.md#4"), {TABLE: str(versioned.path)})
    namespace = {"spark": spark}
    capsys.readouterr()
    _, at_12 = run_block(code, namespace, "docs/dead-letters.md#4")
    (counts,) = shown(capsys.readouterr().out)
    assert counts[0] == ["topic", "stage", "count"]
    assert sorted(counts[1:]) == [
        ["orders", "data-loss", "1"],
        ["orders", "processing", "1"],
        ["orders", "sink-publish", "2"],
        ["orders", "source-decode", "8"],
        ["payments", "source-decode", "4"],
    ]
    assert namespace["df"].count() == 16
    assert sorted(row["dead_letter_id"] for row in at_12.collect()) == sorted(
        letter.dead_letter_id for letter in versioned.letters[:12]
    )


@pytest.mark.delta_jars
def test_spark_sql_time_travel_and_history(
    delta_spark: Any, versioned: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/dead-letters.md#5: Spark SQL counts the last day's letters by stage and reason
    (the three-day-old one left out), time travel sees version 3's three letters (SQL and
    DataFrame alike), and the history lists every commit."""
    code = with_places(block("docs/dead-letters.md#5"), {TABLE: str(versioned.path)})
    capsys.readouterr()
    values = run_block(code, {"spark": delta_spark}, "docs/dead-letters.md#5")
    by_reason, at_3, history = shown(capsys.readouterr().out)
    assert by_reason == [
        ["stage", "reason", "n"],
        ["source-decode", "invalid-json", "8"],
        ["source-decode", "missing-field", "4"],
        ["sink-publish", "too-big", "2"],
        ["processing", "check-failed", "1"],
    ]
    assert at_3 == [["count(1)"], ["3"]]
    assert values[2].count() == 3
    assert history == [
        ["version", "operation"],
        *[[str(v), "WRITE"] for v in range(16, 0, -1)],
        ["0", "CREATE TABLE"],
    ]


@pytest.mark.delta_jars
def test_alerting_stream(delta_spark: Any, versioned: Any, tmp_path: Path) -> None:
    """docs/dead-letters.md#6: the stream's first batch hands every letter already in the
    table to ``alert``, which pages once per topic and reason with the count.

    The block triggers every minute, so ``processAllAvailable`` would wait for the second
    trigger to find nothing new: the test waits for the first batch's progress instead."""
    code = with_places(
        block("docs/dead-letters.md#6"),
        {
            TABLE: str(versioned.path),
            "/lake/checkpoints/dead-letter-alerts": str(tmp_path / "alerts"),
        },
    )
    pages: list[str] = []
    assert delta_spark.streams.active == []
    try:
        (query,) = run_block(
            code, {"spark": delta_spark, "notify": pages.append}, "docs/dead-letters.md#6"
        )
        wait_until(lambda: any(p["batchId"] == 0 for p in query.recentProgress), timeout=120)
        assert query.exception() is None
    finally:
        for running in delta_spark.streams.active:
            running.stop()
    assert sorted(pages) == [
        "1 new dead letters on orders: check-failed",
        "1 new dead letters on orders: entries-removed",
        "2 new dead letters on orders: too-big",
        "4 new dead letters on payments: missing-field",
        "8 new dead letters on orders: invalid-json",
    ]
    assert [p["numInputRows"] for p in query.recentProgress if p["batchId"] == 0] == [16]


@pytest.mark.delta_jars
def test_table_maintenance(delta_spark: Any, tmp_path: Path) -> None:
    """docs/dead-letters.md#7: OPTIMIZE leaves one live file holding every letter, and neither
    VACUUM deletes a file removed less than 24 hours ago; the session's settings the block
    changes are put back after."""
    path = tmp_path / "dead_letters"
    versioned_table(path)
    code = with_places(block("docs/dead-letters.md#7"), {TABLE: str(path)})
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    before = [delta_spark.conf.get(key, None) for key in (check, listing)]
    with session_settings_kept(delta_spark, check, listing):
        # VACUUM lists the folder in this many tasks: 10,000 by default, a minute on local[2]
        delta_spark.conf.set(listing, "2")
        run_block(code, {"spark": delta_spark}, "docs/dead-letters.md#7")
        assert delta_spark.conf.get(check) == "false"
    assert [delta_spark.conf.get(key, None) for key in (check, listing)] == before
    table = DeltaTable(str(path))
    assert len(table.file_uris()) == 1
    assert len(list(path.glob("*.parquet"))) == 17  # the 16 compacted, kept within retention
    assert DeadLetterTable(path).to_arrow().num_rows == 16
    operations = [entry["operation"] for entry in reversed(table.history())]
    assert operations[-5:] == [
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
        "VACUUM START",
        "VACUUM END",
    ]


# --- docs/operations.md --------------------------------------------------------------------------


class Gauge:
    """Stands for the user's metrics gauge (prometheus_client's ``Gauge``): keeps each value
    set, with its labels."""

    def __init__(self) -> None:
        self.values: list[tuple[dict[str, str], int]] = []

    def labels(self, **labels: str) -> Any:
        return SimpleNamespace(set=lambda value: self.values.append((labels, value)))


def test_lag_listener(spark: Any, bus: redis.Redis, redis_env: str, tmp_path: Path) -> None:
    """docs/operations.md#0: once the block has added its listener, a query reading 1,000
    entries 250 a batch sets the gauge to the entries behind after each batch."""
    publish(bus, "atlas_bus", "orders", 1000)
    gauge = Gauge()
    with listeners_removed(spark):
        run_block(
            block("docs/operations.md#0"), {"spark": spark, "gauge": gauge}, "docs/operations.md#0"
        )
        query = (
            spark.readStream.format("atlasbus")
            .option("url", redis_env)
            .option("topics", "orders")
            .option("maxEntriesPerTrigger", "250")
            .load()
            .writeStream.format("noop")
            .queryName("orders-lag")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        expected = [750, 500, 250, 0] if redis_major(bus) >= 7 else [750, 0]  # 6.2: no counts
        wait_until(lambda: len(gauge.values) >= len(expected), timeout=60)  # events are async
    labels = {"query": "orders-lag", "stream": "atlas_bus:orders"}
    assert gauge.values == [(labels, n) for n in expected]


def pending_bus(bus: redis.Redis) -> dict[tuple[str, str], tuple[str, int, bool, Any]]:
    """Group ``billing`` on orders and payments: worker-1 holds one order delivered twice,
    worker-2 three orders (one since deleted) and both payments; one order was acknowledged.
    Returns each pending entry's (holder, deliveries, deleted, payload) by (topic, ID)."""
    orders = publish(bus, "atlas_bus", "orders", 5)
    payments = publish(bus, "atlas_bus", "payments", 2, start=10)
    for stream in ("atlas_bus:orders", "atlas_bus:payments"):
        bus.xgroup_create(stream, "billing", id="0")
    bus.xreadgroup("billing", "worker-1", {"atlas_bus:orders": ">"}, count=2)
    bus.xreadgroup("billing", "worker-2", {"atlas_bus:orders": ">", "atlas_bus:payments": ">"})
    bus.xack("atlas_bus:orders", "billing", orders[1])
    bus.xclaim("atlas_bus:orders", "billing", "worker-1", 0, [orders[0]])  # delivered again
    bus.xdel("atlas_bus:orders", orders[2])

    def payload(topic: str, n: int) -> dict[str, Any]:
        return {"n": n, "topic": topic, "note": "événement ✓"}  # as helpers.envelope writes it

    return {
        ("orders", orders[0]): ("worker-1", 2, False, payload("orders", 0)),
        ("orders", orders[2]): ("worker-2", 1, True, None),
        ("orders", orders[3]): ("worker-2", 1, False, payload("orders", 3)),
        ("orders", orders[4]): ("worker-2", 1, False, payload("orders", 4)),
        ("payments", payments[0]): ("worker-2", 1, False, payload("payments", 10)),
        ("payments", payments[1]): ("worker-2", 1, False, payload("payments", 11)),
    }


def test_pending_entries(
    spark: Any, bus: redis.Redis, redis_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/operations.md#1 and #2: the pending read returns exactly the group's pending
    entries (holder, deliveries, deleted or not, the entry decoded); the summary counts them
    per topic and consumer."""
    expected = pending_bus(bus)
    namespace = {"spark": spark}
    run_block(
        with_places(block("docs/operations.md#1"), {BUS: redis_env}),
        namespace,
        "docs/operations.md#1",
    )
    pending = namespace["pending"]
    assert not pending.isStreaming
    assert pending.columns == PENDING_COLUMNS
    rows = pending.collect()
    found = {
        (row["topic"], row["id"]): (
            row["consumer"],
            row["delivery_count"],
            row["entry_deleted"],
            None if row["payload"] is None else json.loads(row["payload"]),
        )
        for row in rows
    }
    assert found == expected
    assert len(rows) == len(expected)
    assert all(0 <= row["idle_ms"] < 120_000 for row in rows)

    capsys.readouterr()
    run_block(block("docs/operations.md#2"), namespace, "docs/operations.md#2")
    (table,) = shown(capsys.readouterr().out)
    header, *lines = table
    assert sorted(header) == sorted(
        ["topic", "consumer", "count(1)", "max(idle_ms)", "max(delivery_count)"]
    )
    picked = [
        [line[header.index(c)] for c in ("topic", "consumer", "count(1)", "max(delivery_count)")]
        for line in lines
    ]
    assert picked == [
        ["orders", "worker-1", "1", "2"],
        ["orders", "worker-2", "3", "1"],
        ["payments", "worker-2", "2", "1"],
    ]


@pytest.mark.parametrize(
    ("block_id", "places"),
    [("docs/operations.md#3", {"/data/dlq": "dlq"}), ("docs/operations.md#4", {})],
)
def test_lazy_streaming_frames(
    spark: Any,
    bus: redis.Redis,
    redis_env: str,
    tmp_path: Path,
    block_id: str,
    places: dict[str, str],
) -> None:
    """docs/operations.md#3 (a sweep per trigger) and #4 (trigger pacing) only define a
    streaming DataFrame: their options are accepted, and it has the documented columns."""
    code = with_places(
        block(block_id),
        {BUS: redis_env, **{place: str(tmp_path / name) for place, name in places.items()}},
    )
    namespace = {"spark": spark}
    run_block(code, namespace, block_id)
    assert namespace["frame"].isStreaming
    assert namespace["frame"].columns == ENVELOPE_COLUMNS


# --- docs/sink.md --------------------------------------------------------------------------------


def test_sink(
    spark: Any, bus: redis.Redis, redis_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/sink.md#0: the batch write publishes one ``orders`` envelope per row of ``df``; the
    streaming query then publishes every ``orders`` entry (those and the ones already there)
    once to ``orders-enriched``, payload, priority and correlation ID as they were."""
    publish(bus, "atlas_bus", "orders", 4)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the block sets it: put back after
    code = with_places(
        block("docs/sink.md#0"),
        {BUS: redis_env, "/checkpoints/enrich": str(tmp_path / "cp")},
    )
    with queries_drained(spark):
        run_block(code, {"spark": spark, "df": spark.range(3)}, "docs/sink.md#0")
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    orders = [f for _, f in bus.xrange("atlas_bus:orders")]
    assert sorted((f[b"topic"], f[b"payload"], f[b"priority"]) for f in orders[4:]) == [
        (b"orders", b'{"order_id":%d}' % n, b"5") for n in range(3)
    ]  # written by two tasks, in either order
    assert len(orders) == 7
    enriched = [f for _, f in bus.xrange("atlas_bus:orders-enriched")]
    assert {f[b"topic"] for f in enriched} == {b"orders-enriched"}
    assert sorted(
        (f[b"payload"], f[b"priority"], f[b"correlation_id"]) for f in enriched
    ) == sorted((f[b"payload"], f[b"priority"], f[b"correlation_id"]) for f in orders)


def test_filtering_batch_reads(
    spark: Any, bus: redis.Redis, redis_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/options.md#0: the window's rows of orders only, and the plan lists the filters
    atlasbus applied."""
    start = int(datetime(2026, 1, 1, 10, tzinfo=UTC).timestamp() * 1000)
    kept = []
    for topic in ("orders", "payments"):
        for minute in range(-2, 8):  # 09:58 to 10:07, an entry a minute
            entry_id = f"{start + minute * 60_000}-0"
            bus.xadd(f"atlas_bus:{topic}", envelope(topic, minute), id=entry_id)
            if topic == "orders" and 0 <= minute < 5:
                kept.append(entry_id)
    conf = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(conf, "false")
    namespace = {"spark": spark}
    capsys.readouterr()
    try:
        run_block(
            with_places(block("docs/options.md#0"), {BUS: redis_env}),
            namespace,
            "docs/options.md#0",
        )
    finally:
        spark.conf.set(conf, before)
    plan = capsys.readouterr().out
    assert sorted(row["id"] for row in namespace["window"].collect()) == kept
    pushed = next(line for line in plan.splitlines() if line.startswith("PushedFilters:"))
    assert "EqualTo(topic,orders)" in pushed
    assert "GreaterThanOrEqual(timestamp,2026-01-01 10:00:00.0)" in pushed

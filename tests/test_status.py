"""``atlasbus status`` and ``bus_status`` on a fixture of known streams, groups and dead letters.

Three streams (one with an XDEL'd entry, one whose topic needs escaping in Prometheus labels),
two consumer groups with known pending entries (one consumer never acknowledges), a group that
read nothing, and a dead-letter table with rows inside and outside the last hour. Every figure is
asserted exactly, except idle times, which grow with the clock: those are set with XCLAIM IDLE
and checked to be at least that (and under a generous bound). Runs on Redis 7 and 6.2;
``entries_added`` exists only on 7, and the lag Redis reports there is computed on 6.2.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus import cli
from atlasbus.bus.connection import RedisEndpoint
from atlasbus.cli.status_report import render_json, render_prometheus, render_table, to_dict
from atlasbus.dead_letters import DeadLetter, DeadLetterTable
from atlasbus.errors import RedisPermissionError
from atlasbus.model.entry_id import EntryId
from atlasbus.operations.bus_status import (
    BusStatus,
    DeadLetterCount,
    DeadLetterStatus,
    GroupStatus,
    StreamStatus,
    bus_status,
)
from atlasbus.sandbox.redis_server import free_port
from helpers import redis_major

P = "stfx"  # this file's own prefix (the glob test uses another)
ODD = 'odd "topic"\\x'  # a quote and a backslash: escaped in Prometheus labels
T0, T1, T2 = 1_700_000_000_000, 1_700_000_100_000, 1_700_000_200_000
ORDERS_IDLE_MS = 7_200_000  # set with XCLAIM ... IDLE: the idle time at least
LEDGER_IDLE_MS = 600_000
IDLE_SLACK_MS = 600_000  # idle grows with the clock while the tests run; never this much


def eid(ms: int, seq: int = 0) -> EntryId:
    return EntryId(ms, seq)


@dataclass(frozen=True)
class Fixture:
    url: str
    table: str
    now: datetime
    major: int


def build(r: redis.Redis, table: str, now: datetime) -> None:
    orders, payments, odd = f"{P}:orders", f"{P}:payments", f"{P}:{ODD}"
    for ms in (T0, T0 + 1000, T0 + 2000, T0 + 3000, T0 + 4000):
        r.xadd(orders, {"n": str(ms)}, id=f"{ms}-0")
    r.xdel(orders, f"{T0 + 2000}-0")
    r.xgroup_create(orders, "audit", id="0")  # reads nothing: all 4 entries undelivered
    r.xgroup_create(orders, "billing", id="0")
    r.xreadgroup("billing", "c1", {orders: ">"}, count=3)  # T0, T0+1000, T0+3000
    r.xack(orders, "billing", f"{T0 + 1000}-0")
    r.xclaim(orders, "billing", "c1", 0, [f"{T0}-0"], idle=ORDERS_IDLE_MS, justid=True)

    for seq in range(3):
        r.xadd(payments, {"n": str(seq)}, id=f"{T1}-{seq}")
    r.xgroup_create(payments, "ledger", id="0")
    r.xreadgroup("ledger", "c1", {payments: ">"}, count=2)  # T1-0, T1-1
    r.xack(payments, "ledger", f"{T1}-0")
    r.xreadgroup("ledger", "c2", {payments: ">"}, count=1)  # T1-2, never acknowledged
    r.xclaim(payments, "ledger", "c1", 0, [f"{T1}-1"], idle=LEDGER_IDLE_MS, justid=True)

    r.xadd(odd, {"n": "0"}, id=f"{T2}-0")
    r.xadd(odd, {"n": "1"}, id=f"{T2 + 500}-0")

    r.set(f"{P}:config", "not a stream")  # SCAN's TYPE filter leaves it out
    r.xadd(f"{P}x:orders", {"n": "0"})  # another prefix that starts the same

    def decode(minutes: float, entry: int) -> DeadLetter:
        return DeadLetter.for_entry(
            "source-decode",
            "invalid-json",
            "payload is not JSON",
            stream=orders,
            entry_id=f"{T0}-{entry}",
            at=now - timedelta(minutes=minutes),
        )

    DeadLetterTable(table).append(
        [
            decode(10, 1),
            decode(50, 2),
            decode(120, 3),  # older than an hour
            DeadLetter.for_row(
                "too-big", "row too big", write_id="w/-/0", row=0, at=now - timedelta(days=3)
            ),
            DeadLetter.for_entry(
                "retry-exhausted",
                "max-deliveries",
                "delivered 5 times",
                stream=payments,
                entry_id=f"{T1}-0",
                at=now - timedelta(minutes=5),
            ),
            DeadLetter.for_data_loss(
                stream=orders, after="0-0", upto=f"{T0}-0", at=now - timedelta(minutes=70)
            ),
        ]
    )


@pytest.fixture(scope="module")
def fx(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    client = redis.Redis.from_url(redis_url)
    table = str(tmp_path_factory.mktemp("status") / "dead_letters")
    now = datetime.now(UTC).replace(microsecond=0)
    build(client, table, now)
    yield Fixture(redis_url, table, now, redis_major(client))
    client.close()


def core(fx: Fixture, **kwargs: Any) -> BusStatus:
    options: dict[str, Any] = {"stream_prefix": P, "dead_letter_table": fx.table, "now": fx.now}
    options.update(kwargs)
    return bus_status(RedisEndpoint.from_options(fx.url, None, None), **options)


def added(fx: Fixture, count: int) -> int | None:
    return count if fx.major >= 7 else None


def expected_streams(fx: Fixture, orders_idle: int, ledger_idle: int) -> tuple[StreamStatus, ...]:
    """The fixture's figures, worked out by hand from ``build``."""
    return (
        StreamStatus(
            stream=f"{P}:{ODD}",
            topic=ODD,
            length=2,
            first_id=eid(T2),
            last_id=eid(T2 + 500),
            last_generated_id=eid(T2 + 500),
            entries_added=added(fx, 2),
            groups=(),
        ),
        StreamStatus(
            stream=f"{P}:orders",
            topic="orders",
            length=4,
            first_id=eid(T0),
            last_id=eid(T0 + 4000),
            last_generated_id=eid(T0 + 4000),
            entries_added=added(fx, 5),
            groups=(
                # before the first entry: every entry is undelivered (Redis 7 says nil: an XDEL)
                GroupStatus("audit", 0, 0, eid(0), 4, "computed"),
                # after the XDEL'd entry, before the last: unknown without reading entries
                GroupStatus("billing", 1, 2, eid(T0 + 3000), None, None, eid(T0), orders_idle, 1),
            ),
        ),
        StreamStatus(
            stream=f"{P}:payments",
            topic="payments",
            length=3,
            first_id=eid(T1, 0),
            last_id=eid(T1, 2),
            last_generated_id=eid(T1, 2),
            entries_added=added(fx, 3),
            groups=(
                GroupStatus(
                    "ledger",
                    2,
                    2,
                    eid(T1, 2),
                    0,
                    "redis" if fx.major >= 7 else "computed",
                    eid(T1, 1),
                    ledger_idle,
                    1,
                ),
            ),
        ),
    )


EXPECTED_COUNTS = (
    DeadLetterCount("data-loss", "entries-removed", last_hour=0, total=1),
    DeadLetterCount("retry-exhausted", "max-deliveries", last_hour=1, total=1),
    DeadLetterCount("sink-publish", "too-big", last_hour=0, total=1),
    DeadLetterCount("source-decode", "invalid-json", last_hour=2, total=3),
)


def idle_of(status: BusStatus) -> tuple[int, int]:
    """The two idle times, checked to be what XCLAIM set plus the time since."""
    groups = {(s.topic, g.name): g for s in status.streams for g in s.groups}
    orders = groups["orders", "billing"].oldest_pending_idle_ms
    ledger = groups["payments", "ledger"].oldest_pending_idle_ms
    assert orders is not None and ORDERS_IDLE_MS <= orders < ORDERS_IDLE_MS + IDLE_SLACK_MS
    assert ledger is not None and LEDGER_IDLE_MS <= ledger < LEDGER_IDLE_MS + IDLE_SLACK_MS
    return orders, ledger


# --- the core ------------------------------------------------------------------------------------


def test_core_figures(fx: Fixture) -> None:
    status = core(fx)
    orders_idle, ledger_idle = idle_of(status)
    assert status == BusStatus(
        at=fx.now,
        server=RedisEndpoint.from_options(fx.url, None, None).description,
        redis_version=status.redis_version,
        stream_prefix=P,
        topics=None,
        streams=expected_streams(fx, orders_idle, ledger_idle),
        missing=(),
        dead_letters=DeadLetterStatus(fx.table, fx.now - timedelta(hours=1), EXPECTED_COUNTS),
    )
    assert status.redis_major == fx.major
    assert (status.dead_letters.last_hour, status.dead_letters.total) == (3, 6)  # type: ignore[union-attr]
    assert status.streams[1].first_time == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)


def test_named_topics_and_missing_ones(fx: Fixture) -> None:
    status = core(fx, topics=["payments", "nope"], dead_letter_table=None)
    (got,) = status.streams
    idle = got.groups[0].oldest_pending_idle_ms
    assert idle is not None and LEDGER_IDLE_MS <= idle < LEDGER_IDLE_MS + IDLE_SLACK_MS
    assert got == expected_streams(fx, 0, idle)[2]
    assert (status.topics, status.missing) == (("payments", "nope"), (f"{P}:nope",))
    assert status.dead_letters is None


def test_prefix_is_matched_literally(r: redis.Redis, redis_url: str, prefix: str) -> None:
    glob = f"{prefix}[x]"  # a glob character class if it were not escaped
    r.xadd(f"{glob}:a", {"n": "0"}, id="1-0")
    r.xadd(f"{prefix}x:b", {"n": "0"}, id="1-0")
    status = bus_status(RedisEndpoint.from_options(redis_url, None, None), stream_prefix=glob)
    assert [(s.stream, s.topic, s.length) for s in status.streams] == [(f"{glob}:a", "a", 1)]


def test_constant_round_trips_and_no_entry_read(
    r: redis.Redis, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pipelines after discovery, whatever the number of streams; no XRANGE, no XREAD.

    Counts what redis-py sends (one packed send per command or pipeline) while ``bus_status``
    runs, for 3 streams and for 30.
    """
    from redis.connection import Connection

    endpoint = RedisEndpoint.from_options(redis_url, None, None)
    sends: list[bytes] = []
    original = Connection.send_packed_command

    def counting(self: Connection, command: Any, check_health: bool = True) -> None:
        sends.append(command)
        original(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counting)

    def round_trips(under: str, streams: int) -> int:
        for n in range(streams):
            r.xadd(f"{under}:s{n}", {"n": "0"}, id="1-0")
            r.xgroup_create(f"{under}:s{n}", "g", id="0")
            r.xreadgroup("g", "c", {f"{under}:s{n}": ">"})
        endpoint.client()  # connected before counting
        sends.clear()
        status = bus_status(endpoint, stream_prefix=under)
        assert [g.pending for s in status.streams for g in s.groups] == [1] * streams
        scans = [c for c in sends if b"SCAN" in b"".join(c if isinstance(c, list) else [c])[:40]]
        assert scans  # one per 1,000 keys in the database, whatever the stream count
        return len(sends) - len(scans)

    r.config_resetstat()
    # after SCAN: the XINFO pipeline and the XPENDING pipeline
    assert (round_trips(f"{prefix}a", 3), round_trips(f"{prefix}b", 30)) == (2, 2)
    names = {name.removeprefix("cmdstat_").split("|")[0] for name in r.info("commandstats")}
    assert names.isdisjoint({"xrange", "xrevrange", "xread", "xlen"})


# --- the renderings ------------------------------------------------------------------------------


def expected_table(fx: Fixture, status: BusStatus, *, header: str, since: str) -> str:
    added_cells = [c.rjust(13) for c in (("2", "5", "3") if fx.major >= 7 else ("-", "-", "-"))]
    orders_idle, ledger_idle = (f"{ms / 1000:.3f}".rjust(8) for ms in idle_of(status))
    odd = f"{P}:{ODD}"
    return (
        f"{header}\n"
        "\n"
        "STREAMS (times UTC)\n"
        "topic          stream              length  entries added  first id         first entry              last id          last entry\n"
        "-------------  ------------------  ------  -------------  ---------------  -----------------------  ---------------  -----------------------\n"
        f"{ODD}  {odd}       2  {added_cells[0]}  1700000200000-0  2023-11-14 22:16:40.000  1700000200500-0  2023-11-14 22:16:40.500\n"
        f"orders         {P}:orders              4  {added_cells[1]}  1700000000000-0  2023-11-14 22:13:20.000  1700000004000-0  2023-11-14 22:13:24.000\n"
        f"payments       {P}:payments            3  {added_cells[2]}  1700000100000-0  2023-11-14 22:15:00.000  1700000100000-2  2023-11-14 22:15:00.000\n"
        "\n"
        "CONSUMER GROUPS\n"
        "stream         group    consumers  pending  last delivered   lag  oldest pending     idle s  deliveries\n"
        "-------------  -------  ---------  -------  ---------------  ---  ---------------  --------  ----------\n"
        f"{P}:orders    audit            0        0  0-0                4  -                       -           -\n"
        f"{P}:orders    billing          1        2  1700000003000-0    -  1700000000000-0  {orders_idle}           1\n"
        f"{P}:payments  ledger           2        2  1700000100000-2    0  1700000100000-1  {ledger_idle}           1\n"
        "lag -: unknown without reading the entries (Redis 6; on Redis 7, entries deleted with "
        "XDEL that Redis cannot count across)\n"
        "\n"
        f"DEAD LETTERS in {fx.table} (last hour: after {since} UTC)\n"
        "stage            reason           last hour  all\n"
        "---------------  ---------------  ---------  ---\n"
        "data-loss        entries-removed          0    1\n"
        "retry-exhausted  max-deliveries           1    1\n"
        "sink-publish     too-big                  0    1\n"
        "source-decode    invalid-json             2    3\n"
        "total                                     3    6\n"
    )


def header(status: BusStatus, at: str) -> str:
    return f"atlasbus status at {at} UTC: Redis {status.redis_version} at {status.server}, streams under '{P}:'"


def test_table_of_the_core_result(fx: Fixture) -> None:
    status = core(fx)
    at = fx.now.strftime("%Y-%m-%d %H:%M:%S.000")
    since = (fx.now - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S.000")
    assert render_table(status) == expected_table(
        fx, status, header=header(status, at), since=since
    )


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(["status", *argv])
    except SystemExit as exc:  # argparse refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def fixture_args(fx: Fixture) -> list[str]:
    return ["--url", fx.url, "--prefix", P, "--table", fx.table]


TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"
IDLE = r"\d+\.\d{3}"


def table_pattern(fx: Fixture, status: BusStatus) -> str:
    """The expected table as a regular expression: the clock's times and idle times vary."""
    text = expected_table(fx, status, header=header(status, "@AT@"), since="@SINCE@")
    orders_idle, ledger_idle = idle_of(status)
    pattern = re.escape(text)
    for ms in (orders_idle, ledger_idle):
        pattern = pattern.replace(re.escape(f"{ms / 1000:.3f}"), IDLE, 1)
    return pattern.replace("@AT@", TIME).replace("@SINCE@", TIME)


def test_cli_table(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *fixture_args(fx))
    assert (code, err) == (0, "")
    assert re.fullmatch(table_pattern(fx, core(fx)), out), out


def clock_free(document: dict[str, Any]) -> dict[str, Any]:
    """A JSON status with the times of the run and the idle times taken out (checked apart)."""
    doc = json.loads(json.dumps(document))
    for key in ("at",):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc.pop(key))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc["dead_letters"].pop("since"))
    for stream in doc["streams"]:
        for group in stream["groups"]:
            if group["oldest_pending"] is not None:
                idle = group["oldest_pending"].pop("idle_ms")
                assert isinstance(idle, int) and idle >= LEDGER_IDLE_MS
    return doc


def expected_json(fx: Fixture, status: BusStatus) -> dict[str, Any]:
    def entry(ms: int, seq: int, time: str) -> dict[str, str]:
        return {"id": f"{ms}-{seq}", "time": time}

    def group(name: str, consumers: int, pending: int, last: str, lag: int | None,
              source: str | None, oldest: str | None) -> dict[str, Any]:  # fmt: skip
        return {
            "name": name,
            "consumers": consumers,
            "pending": pending,
            "last_delivered_id": last,
            "lag": lag,
            "lag_source": source,
            "oldest_pending": None if oldest is None else {"id": oldest, "deliveries": 1},
        }

    return {
        "redis": {"server": status.server, "version": status.redis_version},
        "stream_prefix": P,
        "topics": None,
        "streams": [
            {
                "stream": f"{P}:{ODD}",
                "topic": ODD,
                "length": 2,
                "entries_added": added(fx, 2),
                "first_entry": entry(T2, 0, "2023-11-14T22:16:40.000Z"),
                "last_entry": entry(T2 + 500, 0, "2023-11-14T22:16:40.500Z"),
                "last_generated_id": f"{T2 + 500}-0",
                "groups": [],
            },
            {
                "stream": f"{P}:orders",
                "topic": "orders",
                "length": 4,
                "entries_added": added(fx, 5),
                "first_entry": entry(T0, 0, "2023-11-14T22:13:20.000Z"),
                "last_entry": entry(T0 + 4000, 0, "2023-11-14T22:13:24.000Z"),
                "last_generated_id": f"{T0 + 4000}-0",
                "groups": [
                    group("audit", 0, 0, "0-0", 4, "computed", None),
                    group("billing", 1, 2, f"{T0 + 3000}-0", None, None, f"{T0}-0"),
                ],
            },
            {
                "stream": f"{P}:payments",
                "topic": "payments",
                "length": 3,
                "entries_added": added(fx, 3),
                "first_entry": entry(T1, 0, "2023-11-14T22:15:00.000Z"),
                "last_entry": entry(T1, 2, "2023-11-14T22:15:00.000Z"),
                "last_generated_id": f"{T1}-2",
                "groups": [
                    group(
                        "ledger",
                        2,
                        2,
                        f"{T1}-2",
                        0,
                        "redis" if fx.major >= 7 else "computed",
                        f"{T1}-1",
                    )
                ],
            },
        ],
        "missing_streams": [],
        "dead_letters": {
            "table": fx.table,
            "last_hour": 3,
            "total": 6,
            "by_stage_reason": [
                {"stage": c.stage, "reason": c.reason, "last_hour": c.last_hour, "total": c.total}
                for c in EXPECTED_COUNTS
            ],
        },
    }


def test_json_of_the_core_and_of_the_cli(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    status = core(fx)
    document = json.loads(render_json(status))
    assert document == to_dict(status)
    assert list(document) == [
        "at", "redis", "stream_prefix", "topics", "streams", "missing_streams", "dead_letters"
    ]  # fmt: skip
    assert document["at"] == fx.now.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert clock_free(document) == expected_json(fx, status)
    orders_idle, ledger_idle = idle_of(status)
    assert document["streams"][1]["groups"][1]["oldest_pending"]["idle_ms"] == orders_idle
    assert document["streams"][2]["groups"][0]["oldest_pending"]["idle_ms"] == ledger_idle

    code, out, err = run_cli(capsys, *fixture_args(fx), "--json")
    assert (code, err) == (0, "")
    assert clock_free(json.loads(out)) == expected_json(fx, status)


# --- Prometheus ----------------------------------------------------------------------------------

_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_prometheus(text: str) -> tuple[Samples, dict[str, str], dict[str, str]]:
    """A small parser of the text exposition format: samples, HELP and TYPE per family.

    Checks what the format requires: a family's TYPE before its samples, its samples together,
    label values escaped, no label repeated, no sample twice.
    """
    samples: Samples = {}
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    done: set[str] = set()
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            helps[name] = doc
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert name not in types and name not in done, line
            types[name] = kind
            if current is not None:
                done.add(current)
            current = name
        elif line.startswith("#") or not line:
            continue
        else:
            match = _SAMPLE.fullmatch(line)
            assert match, line
            name, inside, value = match.groups()
            assert name == current, f"{name} outside its family: {line}"
            labels = []
            rest = inside or ""
            while rest:
                label = _LABEL.match(rest)
                assert label, line
                raw = label.group(2)
                unescaped = re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m[1], m[1]), raw)
                labels.append((label.group(1), unescaped))
                rest = rest[label.end() :]
            assert len({k for k, _ in labels}) == len(labels), line
            key = (name, frozenset(labels))
            assert key not in samples, line
            assert value.lower() not in ("nan", "+inf", "-inf"), line
            samples[key] = float(value)
    return samples, helps, types


def sample(name: str, value: float, **labels: str) -> tuple[tuple[str, frozenset[Any]], float]:
    return (f"atlasbus_{name}", frozenset(labels.items())), value


def expected_samples(fx: Fixture, orders_idle: float, ledger_idle: float) -> Samples:
    odd, orders, payments = f"{P}:{ODD}", f"{P}:orders", f"{P}:payments"
    streams = [(odd, ODD, 2, 2, T2, T2 + 500), (orders, "orders", 4, 5, T0, T0 + 4000),
               (payments, "payments", 3, 3, T1, T1)]  # fmt: skip
    expected = []
    for stream, topic, length, ever, first, last in streams:
        expected += [
            sample("stream_exists", 1, stream=stream, topic=topic),
            sample("stream_length", length, stream=stream, topic=topic),
            sample(
                "stream_first_entry_timestamp_seconds", first / 1000, stream=stream, topic=topic
            ),
            sample("stream_last_entry_timestamp_seconds", last / 1000, stream=stream, topic=topic),
        ]
        if fx.major >= 7:
            expected.append(sample("stream_entries_added", ever, stream=stream, topic=topic))
    expected += [
        sample("group_consumers", 0, stream=orders, group="audit"),
        sample("group_pending", 0, stream=orders, group="audit"),
        sample("group_lag", 4, stream=orders, group="audit"),
        # audit was delivered nothing: no last-delivered time; billing's lag is unknown: none
        sample("group_consumers", 1, stream=orders, group="billing"),
        sample("group_pending", 2, stream=orders, group="billing"),
        sample(
            "group_last_delivered_timestamp_seconds", 1_700_000_003, stream=orders, group="billing"
        ),
        sample("group_oldest_pending_idle_seconds", orders_idle, stream=orders, group="billing"),
        sample("group_oldest_pending_deliveries", 1, stream=orders, group="billing"),
        sample("group_consumers", 2, stream=payments, group="ledger"),
        sample("group_pending", 2, stream=payments, group="ledger"),
        sample("group_lag", 0, stream=payments, group="ledger"),
        sample(
            "group_last_delivered_timestamp_seconds", 1_700_000_100, stream=payments, group="ledger"
        ),
        sample("group_oldest_pending_idle_seconds", ledger_idle, stream=payments, group="ledger"),
        sample("group_oldest_pending_deliveries", 1, stream=payments, group="ledger"),
    ]
    for c in EXPECTED_COUNTS:
        expected.append(sample("dead_letters", c.last_hour, stage=c.stage, reason=c.reason,
                               window="1h"))  # fmt: skip
        expected.append(sample("dead_letters", c.total, stage=c.stage, reason=c.reason,
                               window="all"))  # fmt: skip
    return dict(expected)


FAMILIES = [
    "stream_exists",
    "stream_length",
    "stream_entries_added",
    "stream_first_entry_timestamp_seconds",
    "stream_last_entry_timestamp_seconds",
    "group_consumers",
    "group_pending",
    "group_lag",
    "group_last_delivered_timestamp_seconds",
    "group_oldest_pending_idle_seconds",
    "group_oldest_pending_deliveries",
    "dead_letters",
]


def idle_samples(samples: Samples) -> tuple[float, float]:
    """The two idle samples, checked against what XCLAIM set."""
    got = [
        (dict(labels)["group"], value)
        for (name, labels), value in samples.items()
        if name == "atlasbus_group_oldest_pending_idle_seconds"
    ]
    idle = dict(got)
    assert ORDERS_IDLE_MS / 1000 <= idle["billing"] < (ORDERS_IDLE_MS + IDLE_SLACK_MS) / 1000
    assert LEDGER_IDLE_MS / 1000 <= idle["ledger"] < (LEDGER_IDLE_MS + IDLE_SLACK_MS) / 1000
    return idle["billing"], idle["ledger"]


def check_prometheus(fx: Fixture, text: str) -> None:
    samples, helps, types = parse_prometheus(text)
    assert list(types) == [f"atlasbus_{f}" for f in FAMILIES]
    assert set(types.values()) == {"gauge"}
    assert list(helps) == list(types)
    assert samples == expected_samples(fx, *idle_samples(samples))


def test_prometheus_of_the_core(fx: Fixture) -> None:
    status = core(fx)
    text = render_prometheus(status)
    check_prometheus(fx, text)
    orders_idle, _ = idle_of(status)
    assert f'group="billing"}} {orders_idle / 1000:.3f}\n' in text
    # the label values as the format escapes them
    assert (
        f'atlasbus_stream_length{{stream="{P}:odd \\"topic\\"\\\\x",topic="odd \\"topic\\"\\\\x"}} 2\n'
        in text
    )


def test_prometheus_of_the_cli(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *fixture_args(fx), "--prometheus")
    assert (code, err) == (0, "")
    check_prometheus(fx, out)


def atlasbus_command() -> str:
    return str(Path(sys.executable).parent / "atlasbus")


def test_prometheus_from_the_installed_command(fx: Fixture) -> None:
    done = subprocess.run(
        [atlasbus_command(), "status", *fixture_args(fx), "--prometheus"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    check_prometheus(fx, done.stdout)


def test_named_topics_in_prometheus(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "--url", fx.url, "--prefix", P, "--topics", "payments,nope", "--prometheus"
    )
    assert (code, err) == (0, "")
    samples, _, types = parse_prometheus(out)
    assert samples[sample("stream_exists", 0, stream=f"{P}:nope", topic="nope")[0]] == 0
    assert samples[sample("stream_exists", 1, stream=f"{P}:payments", topic="payments")[0]] == 1
    assert not [k for k in samples if k[0] == "atlasbus_dead_letters"]  # no --table
    assert "atlasbus_dead_letters" in types  # the family is declared all the same


# --- --watch -------------------------------------------------------------------------------------


def test_watch_prints_one_json_document_per_refresh(
    fx: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, *fixture_args(fx), "--json", "--watch", "0.01", "--count", "2")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 2
    expected = expected_json(fx, core(fx))
    assert [clock_free(json.loads(line)) for line in lines] == [expected, expected]


def test_watch_table_from_the_installed_command(fx: Fixture) -> None:
    done = subprocess.run(
        [atlasbus_command(), "status", *fixture_args(fx), "--watch", "0.01", "--count", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    one = table_pattern(fx, core(fx))
    assert re.fullmatch(f"{one}\n{one}", done.stdout), done.stdout  # a blank line between


def test_watch_replaces_the_output_file(
    fx: Fixture, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "atlasbus.prom"
    code, out, err = run_cli(
        capsys, *fixture_args(fx), "--prometheus", "--output", str(target), "--watch", "0.01",
        "--count", "2",
    )  # fmt: skip
    assert (code, out, err) == (0, "", "")
    check_prometheus(fx, target.read_text())
    assert [p.name for p in tmp_path.iterdir()] == ["atlasbus.prom"]  # no temporary file left
    assert target.stat().st_mode & 0o777 == 0o644


# --- errors: one line, exit status 2, no traceback, no password ----------------------------------

SECRET = "s3cret-Pa55"


def test_unreachable_redis(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    done = subprocess.run(
        [atlasbus_command(), "status", "--url", f"redis://ops:{SECRET}@127.0.0.1:{port}/0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"atlasbus status: error: cannot reach Redis at 127.0.0.1:{port}: Error 111 connecting "
        f"to 127.0.0.1:{port}. Connection refused. Check that the server is running and that "
        "--url (or $REDIS_URL) points to it.\n"
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--table", "{missing}"],
            "atlasbus status: error: no dead-letter table at '{missing}': it is created by the "
            "first dead letter written there; check --table for a typo",
        ),
        (
            ["--topics", "config"],
            "atlasbus status: error: key 'stfx:config' on Redis at {server} is not a stream: "
            "check the topics and the stream prefix (a topic names the stream "
            "'{{stream_prefix}}:{{topic}}')",
        ),
        (
            ["--topics", " , "],
            "atlasbus status: error: argument --topics: must be comma-separated topic names, "
            "got ' , '",
        ),
        (
            ["--watch", "0"],
            "atlasbus status: error: argument --watch: must be a positive number of seconds, "
            "got '0'",
        ),
        (
            ["--prometheus", "--output", "{missing}/atlasbus.prom"],
            "atlasbus status: error: cannot write '{missing}/atlasbus.prom' (check --output): "
            "No such file or directory",
        ),
        (
            ["--json", "--prometheus"],
            "atlasbus status: error: argument --prometheus: not allowed with argument --json",
        ),
    ],
)
def test_errors(
    fx: Fixture,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    error: str,
) -> None:
    server = RedisEndpoint.from_options(fx.url, None, None).description
    missing = str(tmp_path / "nothing")
    argv = [a.replace("{missing}", missing) for a in argv]
    code, out, err = run_cli(capsys, "--url", fx.url, "--prefix", P, *argv)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == error.format(missing=missing, server=server)
    assert "Traceback" not in err


def test_bad_url_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", f"http://ops:{SECRET}@example")
    code, out, err = run_cli(capsys)
    assert (code, out) == (2, "")
    assert err == (
        "atlasbus status: error: $REDIS_URL must be a Redis URL starting with redis://, "
        "rediss://, unix://, redis+sentinel:// or rediss+sentinel://, got http://...; accepted: "
        "redis://[user:password@]host[:port][/db], "
        "rediss://... (TLS), unix:///path/to.sock or redis+sentinel://[user:password@]sentinel[:port][,sentinel[:port]...]/master-name[/db]\n"
    )
    assert SECRET not in err


def test_least_acl(fx: Fixture, r: redis.Redis) -> None:
    """What a monitoring user needs: SCAN, XINFO STREAM/GROUPS, XPENDING; INFO only for the
    version (without it the version is 'unknown' and every figure is still there)."""
    user = f"status-{P}"
    r.execute_command(
        f"ACL SETUSER {user} on >{SECRET} ~{P}:* resetchannels +ping +hello +auth "
        "+client|setname +select +scan +xinfo|stream +xinfo|groups +xpending"
    )
    url = fx.url.replace("redis://", f"redis://{user}:{SECRET}@")
    status = bus_status(RedisEndpoint.from_options(url, None, None), stream_prefix=P, now=fx.now)
    assert status.redis_version == "unknown"
    assert status.streams == expected_streams(fx, *idle_of(status))
    r.execute_command(f"ACL SETUSER {user} -xpending")
    with pytest.raises(RedisPermissionError) as refused:
        bus_status(RedisEndpoint.from_options(url, None, None), stream_prefix=P)
    assert str(refused.value) == (
        f"Redis at {status.server} refused user {user!r} the command 'xpending': add it to the "
        f"user's ACL (ACL SETUSER {user} +xpending), see docs/operations.md"
    )
    r.execute_command(f"ACL DELUSER {user}")

"""Every ```python block of README.md and docs/*.md, checked as a user would paste it.

Here, without Spark (the everyday tier): each block compiles, and each of its imports names
something that exists; each block is run by a test (this file's Python-only runs, or
``test_docs_code_runs.py``'s Spark runs, or ``test_readme.py`` for the Quick start); and the
blocks that need no Spark run as written on a redis-server and Delta tables of their own, only
their places replaced (``run_block``), with their effect asserted.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import textwrap
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import redis

from atlasbus.dead_letters import (
    SOURCE_DECODE,
    DeadLetter,
    DeadLetterTable,
)
from atlasbus.sandbox.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNS = Path(__file__).with_name("test_docs_code_runs.py")

# A fence (at any indentation, as in a list item) and its closing fence at the same indentation.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
# Blocks run elsewhere, and where.
RUN_ELSEWHERE = {"README.md#0": "test_readme.py (the Quick start, in a process of its own)"}


def python_blocks() -> dict[str, str]:
    """Each ```python block, dedented, by "file#index" (index among the file's Python blocks)."""
    blocks = {}
    for doc in DOCS:
        for index, found in enumerate(FENCE.finditer(doc.read_text())):
            code = textwrap.dedent(found["body"])
            blocks[f"{doc.relative_to(ROOT).as_posix()}#{index}"] = code
    return blocks


BLOCKS = python_blocks()


def block(block_id: str) -> str:
    return BLOCKS[block_id]


def with_places(code: str, places: Mapping[str, str]) -> str:
    """The block with only its places (folders, URIs, Redis URLs) replaced by the test's.

    Every place named must be in the block (so the test follows the doc), and after the
    replacement no other absolute path or URL may remain: the block then touches only the
    test's folders and servers.
    """
    for place in sorted(places, key=len, reverse=True):  # s3://lake/x holds /lake/x
        assert place in code, f"{place!r} is not in the block: the doc changed"
        code = code.replace(place, places[place])
    ours = tuple(places.values())
    for literal in re.findall(r"""["'`]((?:/|[a-z0-9]+://)[^"'`]*)["'`]""", code):
        assert literal.startswith(ours), f"the block still names {literal!r}: replace it too"
    return code


def run_block(code: str, namespace: dict[str, Any], name: str = "<doc block>") -> list[Any]:
    """Run the block's statements in order, as pasted into a notebook; return the values of its
    top-level expression statements (``df.count()`` alone on a line, a query's ``start()``),
    in order, so a test can assert on what the block computed."""
    values = []
    for node in ast.parse(code).body:
        if isinstance(node, ast.Expr):
            values.append(eval(compile(ast.Expression(node.value), name, "eval"), namespace))
        else:
            exec(compile(ast.Module([node], type_ignores=[]), name, "exec"), namespace)
    return values


@pytest.fixture(scope="module")
def private_redis() -> Iterator[RedisServer]:
    """A redis-server of this module's own: the blocks use the default prefix ``atlas_bus``,
    which no other test's server may share."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def bus(private_redis: RedisServer) -> Iterator[redis.Redis]:
    """A client of the module's server, emptied first: each block starts on an empty bus."""
    client = redis.Redis.from_url(private_redis.url)
    client.flushall()
    yield client
    client.close()


# --- cheap checks ----------------------------------------------------------------------------


def test_blocks_are_found() -> None:
    """The fence pattern sees every Python fence (a miss would leave a block untested)."""
    fences = sum(
        len(re.findall(r"^[ \t]*```py", doc.read_text(), re.M)) for doc in DOCS
    )  # ```python, and any ```py / ```python3 / ```pycon that it would miss
    assert BLOCKS and len(BLOCKS) == fences


@pytest.mark.parametrize("block_id", BLOCKS)
def test_block_compiles(block_id: str) -> None:
    """A block that does not compile fails on a user's first paste."""
    compile(BLOCKS[block_id], block_id, "exec")


@pytest.mark.parametrize("block_id", BLOCKS)
def test_block_imports_exist(block_id: str) -> None:
    """Every ``import`` and ``from X import Y`` names a module and a name that exist."""
    for node in ast.walk(ast.parse(BLOCKS[block_id])):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module is not None
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):  # a submodule not yet imported
                    importlib.import_module(f"{node.module}.{alias.name}")


def test_every_block_is_run() -> None:
    """Each block is run by a test: its id is named in this file or test_docs_code_runs.py
    (or it is the Quick start, which test_readme.py runs); and each id named there exists."""
    named = set(re.findall(r'"((?:README\.md|docs/[\w.-]+\.md)#\d+)"', RUNS.read_text()))
    named |= set(re.findall(r'"((?:README\.md|docs/[\w.-]+\.md)#\d+)"', Path(__file__).read_text()))
    assert named - set(BLOCKS) == set(), "ids that name no block (indexes moved?)"
    assert set(BLOCKS) - named - set(RUN_ELSEWHERE) == set(), "blocks no test runs"


# --- blocks that need no Spark, run as written ---------------------------------------------------

T0 = datetime.now(UTC) - timedelta(hours=2)


def sink_letter(row: int, reason: str, topic: str, payload: str | None, **more: Any) -> DeadLetter:
    return DeadLetter.for_row(
        reason,
        f"{reason} (row {row})",
        write_id="q1/4/0",
        row=row,
        topic=topic,
        payload=payload,
        **more,
    )


def test_replay(bus: redis.Redis, private_redis: RedisServer, tmp_path: Path) -> None:
    """docs/dead-letters.md#2: the chosen sink-publish letters of topic ``orders`` are published
    once, with their payload, priority (5 when it was not valid), correlation ID and tracing,
    one more delivery attempt; the others are left; a second run publishes nothing."""
    table = tmp_path / "dead_letters"
    one = sink_letter(
        0,
        "out-of-range",
        "orders",
        '{"order_id": 1}',
        correlation_id="corr-1",
        fields={"tracing": '{"trace_id": "t1"}', "metadata": "{}"},
        delivery_attempts=0,
    )
    two = sink_letter(1, "too-big", "orders", '{"order_id": 2}', priority=3, delivery_attempts=2)
    empty = sink_letter(2, "null-payload", "orders", None)
    elsewhere = sink_letter(3, "too-big", "payments", '{"order_id": 3}')
    decoded = DeadLetter.for_entry(
        SOURCE_DECODE,
        "invalid-json",
        "bad",
        stream="atlas_bus:orders",
        entry_id="1-0",
        topic="orders",
        payload='{"order_id": 4}',
    )
    DeadLetterTable(table).append([one, two, empty, elsewhere, decoded])
    code = with_places(
        block("docs/dead-letters.md#2"),
        {"/lake/atlasbus/dead_letters": str(table), "redis://bus-redis:6379/0": private_redis.url},
    )

    namespace: dict[str, Any] = {}
    run_block(code, namespace, "docs/dead-letters.md#2")
    result = namespace["result"]
    assert sorted((p.dead_letter_id, p.topic, p.stream) for p in result.replayed) == sorted(
        (letter.dead_letter_id, "orders", "atlas_bus:orders") for letter in (one, two)
    )
    assert [refused.dead_letter_id for refused in result.not_replayable] == [empty.dead_letter_id]
    assert result.already_replayed == ()
    entries = {i.decode(): f for i, f in bus.xrange("atlas_bus:orders")}
    assert set(entries) == {p.entry_id for p in result.replayed}
    by_payload = {json.loads(f[b"payload"])["order_id"]: f for f in entries.values()}
    assert sorted(by_payload) == [1, 2]
    first, second = by_payload[1], by_payload[2]
    assert (first[b"payload"], first[b"priority"], first[b"delivery_attempts"]) == (
        b'{"order_id": 1}',
        b"5",  # its priority was out of range
        b"1",
    )
    assert (first[b"correlation_id"], first[b"tracing"], first[b"topic"]) == (
        b"corr-1",
        b'{"trace_id": "t1"}',
        b"orders",
    )
    assert (second[b"priority"], second[b"delivery_attempts"], second[b"tracing"]) == (
        b"3",
        b"3",
        b"{}",
    )
    assert re.fullmatch(rb"[0-9a-f]{32}", second[b"correlation_id"])  # it had none: a new one
    assert bus.keys("*") == [b"atlas_bus:orders"]

    run_block(code, namespace, "docs/dead-letters.md#2")  # again: refused, nothing published
    again = namespace["result"]
    assert again.replayed == ()
    assert sorted(r.dead_letter_id for r in again.already_replayed) == sorted(
        [one.dead_letter_id, two.dead_letter_id]
    )
    assert bus.xlen("atlas_bus:orders") == 2


def test_table_api(tmp_path: Path) -> None:
    """docs/dead-letters.md#3: the reads return what the table holds (filtered by SQL or by a
    pyarrow expression, summarised), and the block's letter ends up in the table once."""
    table = tmp_path / "dead_letters"
    decode = [
        DeadLetter.for_entry(
            SOURCE_DECODE,
            "invalid-json",
            "bad json",
            stream=f"atlas_bus:{topic}",
            entry_id=f"1714564700000-{n}",
            topic=topic,
            at=T0,
        )
        for n, topic in enumerate(["orders", "orders", "payments"])
    ]
    published = sink_letter(0, "too-big", "orders", '{"n": 1}', at=T0)
    DeadLetterTable(table).append([*decode, published])
    code = with_places(
        block("docs/dead-letters.md#3"), {"s3://lake/atlasbus/dead_letters": str(table)}
    )
    query_id, query_name, batch_id = "5b0c1e8e-7f1a-4c3e-9d2b-0a6f4e8c2d11", "enrich", 7
    namespace = {"query_id": query_id, "query_name": query_name, "batch_id": batch_id}

    values = run_block(code, namespace, "docs/dead-letters.md#3")
    orders, unreplayed, summary, hourly, named, unnamed = values
    assert sorted(orders["entry_id"]) == ["1714564700000-0", "1714564700000-1"]
    assert unreplayed.num_rows == 4
    assert summary[["topic", "stage", "reason", "count"]].values.tolist() == [
        ["orders", "sink-publish", "too-big", 1],
        ["orders", "source-decode", "invalid-json", 2],
        ["payments", "source-decode", "invalid-json", 1],
    ]
    hour = pd.Timestamp(T0).floor("1h")
    assert hourly[["stage", "window_start", "count"]].values.tolist() == [
        ["sink-publish", hour, 1],
        ["source-decode", hour, 3],
    ]
    # The two appends are two writes (one named, one keyed by its letters' IDs): each stores
    # the letter, and every read shows it once.
    assert (named, unnamed) == (1, 1)
    letters = DeadLetterTable(table).to_arrow().to_pylist()
    assert len(letters) == 5
    (letter,) = [row for row in letters if row["entry_id"] == "1714564800000-0"]
    assert letter["dead_letter_id"] == namespace["letter"].dead_letter_id
    assert (letter["stage"], letter["reason"], letter["error"], letter["stream"]) == (
        "source-decode",
        "missing-field",
        "missing field 'payload'",
        "atlas_bus:orders",
    )
    assert (letter["query_id"], letter["query_name"], letter["batch_id"]) == (
        query_id,
        query_name,
        batch_id,
    )
    assert DeadLetterTable(table).to_arrow(all_rows=True).num_rows == 6

    assert run_block(code, namespace, "docs/dead-letters.md#3")[4:] == [0, 0]  # again: nothing
    assert DeadLetterTable(table).to_arrow(all_rows=True).num_rows == 6

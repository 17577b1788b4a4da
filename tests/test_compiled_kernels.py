"""The compiled kernels and the pure path: the same rows, and no byte read outside a reply.

- Through a real redis-server and the source's reader, each in a process of its own: with the
  compiled kernels (numba), with ``NUMBA_DISABLE_JIT=1``, without numba installed, and with a
  kernel that fails to compile. Every one gives the same rows, byte for byte.
- XRANGE replies, whole, truncated, garbled and with oversized lengths, are walked where their
  last byte lies just before a guard page (any read past it faults): a walk that completes
  cuts exactly what hiredis parses, and its rows decode as hiredis's lists do.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hiredis
import numpy as np
import pyarrow as pa
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atlasbus.decoding.decoder import decode_envelope_page, decode_raw
from atlasbus.decoding.kernels.cut_any_layout import PairWalk, cut_pairs, walk_pairs
from atlasbus.decoding.kernels.cut_one_layout import (
    COMPLETE,
    LAYOUT_CHANGES,
    MORE,
    NOT_XRANGE,
    Walk,
    cut_reply,
)
from atlasbus.decoding.kernels.cut_one_layout import walk_reply as walk_by_layout
from guarded_memory import GuardedBuffer

HERE = Path(__file__).parent

READ_IN_A_CHILD = """
import sys

mode, url, stream, out = sys.argv[1:5]
if mode == "numba-missing":
    sys.modules["numba"] = None  # `import numba` raises ImportError, as when not installed
elif mode == "kernel-fails-to-compile":
    import numba

    import atlasbus.decoding.kernels.cut_one_layout as cutter

    @numba.njit
    def walk_that_cannot_compile(*args):
        return name_that_is_not_defined  # noqa: F821 (numba's typing fails at the first call)

    cutter._walk = walk_that_cannot_compile

import pyarrow as pa

from atlasbus.decoding.kernels.selection import compiled_kernels_usable
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.planning.batch_plan import ReadRange
from atlasbus.reading.range_reader import read_range
from atlasbus.options.source import parse_source_options

whole = ReadRange(stream, "t", ZERO, EntryId(2**63, 0))
layouts = {
    "envelope": {"includeRawFields": "true"},
    "envelope-lean": {},
    "raw": {"format": "raw"},
}
for name, extra in layouts.items():
    options = parse_source_options({"url": url, "streams": stream, "pageSize": "97", **extra})
    table = pa.Table.from_batches(list(read_range(options, whole)))
    with pa.OSFile(f"{out}.{name}.arrow", "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
print("compiled" if compiled_kernels_usable() else "pure", sys.modules.get("numba") is not None)
"""

MODES = ("compiled", "jit-disabled", "numba-missing", "kernel-fails-to-compile")


def envelope_fields(rng: random.Random, index: int) -> list[bytes]:
    """An entry's fields: mostly good envelopes, some malformed, some of other layouts."""
    fields = {
        b"topic": b"t",
        b"priority": str(index % 10).encode(),
        b"payload": json.dumps({"n": index, "s": "caf\u00e9 " * (index % 5)}).encode(),
        b"correlation_id": f"c{index}".encode(),
        b"tracing": json.dumps({"trace_id": f"t{index}", "n": index}).encode(),
        b"metadata": b"{}",
        b"delivery_attempts": str(index % 3).encode(),
        b"enqueued_time": f"{1_700_000_000 + index}.{index % 1_000_000:06d}".encode(),
    }
    kind = rng.randrange(20)
    if kind == 0:
        fields[b"priority"] = b"high"
    elif kind == 1:
        fields[b"payload"] = b'{"cut": '
    elif kind == 2:
        fields[b"payload"] = b"\xff\xfe not utf-8"
    elif kind == 3:
        del fields[b"correlation_id"]
    elif kind == 4:
        fields[b"extra\r\n$3\r\n"] = b"*2\r\n$1\r\na\r\n"  # RESP framing inside a name and value
    elif kind == 5:
        fields[b"payload"] = json.dumps({"big": "x" * rng.randrange(40_000, 300_000)}).encode()
    elif kind == 6:
        fields[b"tracing"] = b'{"a": "\\u00e9\\ud83d\\ude00", "b": null, "c": [1, 2.50]}'
    elif kind == 7:
        fields[b"enqueued_time"] = b"soon"
    flat = [part for pair in fields.items() for part in pair]
    if kind == 8:
        flat += [b"topic", b"again"]  # a name repeated in one entry
    return flat


@pytest.fixture
def varied_stream(redis_url: str) -> Iterator[str]:
    """2,500 entries: good and malformed envelopes, several layouts, CRLFs in names and
    values, values of 40-300 kB, a name repeated in an entry."""
    client = redis.Redis.from_url(redis_url)
    stream = f"k{uuid.uuid4().hex[:10]}:t"
    rng = random.Random(57)
    with client.pipeline(transaction=False) as pipe:
        for index in range(2_500):
            pipe.execute_command("XADD", stream, "*", *envelope_fields(rng, index))
        pipe.execute()
    yield stream
    client.delete(stream)
    client.close()


def read_in_a_child(mode: str, url: str, stream: str, out: Path) -> str:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    environment.pop("NUMBA_DISABLE_JIT", None)
    if mode == "jit-disabled":
        environment["NUMBA_DISABLE_JIT"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", READ_IN_A_CHILD, mode, url, stream, str(out / mode)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() + "\n" + done.stderr


def test_every_path_reads_the_same_rows(redis_url: str, varied_stream: str, tmp_path: Path) -> None:
    said = {mode: read_in_a_child(mode, redis_url, varied_stream, tmp_path) for mode in MODES}

    assert said["compiled"].startswith("compiled True")
    assert said["jit-disabled"].startswith("pure False")  # numba never imported
    assert said["numba-missing"].startswith("pure False")
    assert said["kernel-fails-to-compile"].startswith("pure True")
    assert (
        "the compiled kernels failed to load (TypingError" in said["kernel-fails-to-compile"]
        and "XRANGE replies are parsed by hiredis instead" in said["kernel-fails-to-compile"]
    )
    for layout in ("envelope", "envelope-lean", "raw"):
        compiled = pa.ipc.open_file(tmp_path / f"compiled.{layout}.arrow").read_all()
        assert compiled.num_rows == 2_500
        for mode in MODES[1:]:
            pure = pa.ipc.open_file(tmp_path / f"{mode}.{layout}.arrow").read_all()
            assert pure.schema == compiled.schema
            assert pure.to_pylist() == compiled.to_pylist(), (mode, layout)
    errors = pa.ipc.open_file(tmp_path / "compiled.envelope.arrow").read_all().column("error")
    assert 0 < errors.null_count < 2_500  # malformed entries are there, and decoded as such


# --- replies walked up to a guard page ---------------------------------------------------------

NAMES = [b"topic", b"priority", b"payload", b"tracing", b"a", b"\r\n", b"$2\r\n"]
VALUES = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"\r\n", b"$5\r\nhello\r\n", b"*2\r\n", b"-ERR x\r\n", b"9" * 20]),
    st.builds(lambda n: b'{"k": "%s"}' % (b"v" * n), st.integers(0, 3000)),
    st.builds(str.encode, st.sampled_from(["7", "high", "1700000000.5", '{"a": null}', "{"])),
)


def resp_reply(entries: list[tuple[bytes, list[bytes]]]) -> bytes:
    """The RESP2 bytes Redis sends for an XRANGE that finds ``entries``."""

    def bulk(value: bytes) -> bytes:
        return b"$%d\r\n%s\r\n" % (len(value), value)

    parts = [b"*%d\r\n" % len(entries)]
    for entry_id, flat in entries:
        parts.append(b"*2\r\n" + bulk(entry_id) + b"*%d\r\n" % len(flat))
        parts.extend(map(bulk, flat))
    return b"".join(parts)


@st.composite
def replies(draw: st.DrawFn) -> bytes:
    """An XRANGE reply (one layout or several), then maybe truncated, garbled or given a
    length far beyond its bytes."""
    layouts = draw(st.lists(st.lists(st.sampled_from(NAMES), max_size=5), min_size=1, max_size=3))
    entries = []
    for index in range(draw(st.integers(0, 12))):
        names = layouts[draw(st.integers(0, len(layouts) - 1))]
        flat = [part for name in names for part in (name, draw(VALUES))]
        entries.append((b"%d-%d" % (1_700_000_000_000 + index, index), flat))
    data = resp_reply(entries)
    change = draw(st.sampled_from(["whole", "truncated", "garbled", "oversized"]))
    if change == "truncated" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif change == "garbled":
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    elif change == "oversized":
        heads = [at for at in range(len(data)) if data[at : at + 1] in (b"$", b"*")]
        at = heads[draw(st.integers(0, len(heads) - 1))]
        after = data.index(b"\r\n", at)
        claimed = draw(st.sampled_from([b"999999", b"2147483648", b"999999999999999999", b"-7"]))
        data = data[: at + 1] + claimed + data[after:]
    return data


def hiredis_reply(data: bytes) -> Any:
    """hiredis's reply for ``data``: False when incomplete, the exception when malformed."""
    reader = hiredis.Reader()
    reader.feed(data)
    try:
        return reader.gets()
    except hiredis.ProtocolError as exc:
        return exc


def is_xrange_reply(reply: Any) -> bool:
    return isinstance(reply, list) and all(
        isinstance(entry, list)
        and len(entry) == 2
        and isinstance(entry[0], bytes)
        and isinstance(entry[1], list)
        and len(entry[1]) % 2 == 0
        for entry in reply
    )


def decoded(page: Any) -> list[Any]:
    """The page's rows as the source gives them, or the error decoding raised (an entry ID
    that is not Redis's ``ms-seq``, which only garbled bytes carry, is refused)."""
    try:
        envelope = decode_envelope_page(page, topic="t", stream="s:t", include_raw_fields=True)
        raw = decode_raw(page, topic="t", stream="s:t")
    except pa.ArrowInvalid as exc:
        return [type(exc).__name__]
    return [envelope.batch.to_pylist(), raw.to_pylist()]


@pytest.fixture(scope="module")
def guarded() -> GuardedBuffer:
    return GuardedBuffer(1 << 20)


def check_walk(status: int, position: int, data: bytes, cut: Any) -> None:
    """What a walk that ended with ``status`` (at ``position``) says must agree with hiredis."""
    whole = hiredis_reply(data)
    if status == MORE:
        # hiredis needs more bytes too, or calls the bytes malformed
        assert whole is False or isinstance(whole, Exception), whole
    elif status == COMPLETE:
        reply = hiredis_reply(data[:position])
        assert is_xrange_reply(reply), reply
        page = cut()
        if page is not None:
            entries = [[entry_id, list(fields)] for entry_id, fields in page.entries()]
            assert entries == reply
            assert decoded(page) == decoded(reply)
    else:  # the reader hands the rest to hiredis, whatever it is
        assert status in (NOT_XRANGE, LAYOUT_CHANGES)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies())
def test_a_reply_ending_at_a_guard_page_walks_within_its_bytes(
    guarded: GuardedBuffer, data: bytes
) -> None:
    buffer = guarded.ending_with(data)

    walk = Walk()
    status = walk_by_layout(buffer, len(data), walk)
    check_walk(status, walk.position, data, lambda: cut_reply(buffer, walk))

    pairs = PairWalk()
    status = walk_pairs(buffer, len(data), pairs)
    assert status != LAYOUT_CHANGES
    check_walk(status, pairs.position, data, lambda: cut_pairs(buffer, [pairs]))


def test_a_header_claiming_a_trillion_entries_allocates_for_a_few() -> None:
    """A garbled header must not make the walk allocate for what it claims: it waits for
    more bytes, holding room for a few thousand entries."""
    data = b"*1000000000000\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    buffer = np.frombuffer(data, np.uint8)
    walk, pairs = Walk(), PairWalk()
    assert walk_by_layout(buffer, len(data), walk) == MORE
    assert walk_pairs(buffer, len(data), pairs) == MORE
    assert walk.walked == pairs.walked == 1
    assert sum(notes.nbytes for notes in (*walk.places, *pairs.places)) < 4_000_000


def test_an_entry_claiming_two_billion_fields_waits_for_their_bytes() -> None:
    """A field count beyond the bytes received grows no notes for it: the walk waits for
    more, as hiredis does (it had doubled its notes to 24 GiB and failed)."""
    data = b"*1\r\n*2\r\n$3\r\n1-1\r\n*2147483648\r\n$1\r\na\r\n$1\r\nb\r\n"
    buffer = np.frombuffer(data, np.uint8)
    walk, pairs = Walk(), PairWalk()
    assert walk_by_layout(buffer, len(data), walk) == MORE
    assert walk_pairs(buffer, len(data), pairs) == MORE
    assert sum(notes.nbytes for notes in (*walk.places, *pairs.places)) < 1_000_000
    assert hiredis_reply(data) is False


def test_more_entries_than_the_first_notes_hold_are_all_cut() -> None:
    """A reply of more entries than the walk first makes room for grows its notes."""
    entries = [(b"1-%d" % index, [b"a", b"%d" % index]) for index in range(10_000)]
    data = resp_reply(entries)
    buffer = np.frombuffer(data, np.uint8)
    walk, pairs = Walk(), PairWalk()
    assert walk_by_layout(buffer, len(data), walk) == COMPLETE
    assert walk_pairs(buffer, len(data), pairs) == COMPLETE
    expected = [[entry_id, flat] for entry_id, flat in entries]
    for page in (cut_reply(buffer, walk), cut_pairs(buffer, [pairs])):
        assert page is not None
        assert [[entry_id, list(flat)] for entry_id, flat in page.entries()] == expected


def test_the_guard_page_faults_a_read_past_the_end() -> None:
    """The guard works: a read one byte past the placed data kills the process (SIGSEGV)."""
    script = (
        "from guarded_memory import GuardedBuffer\n"
        "buffer = GuardedBuffer(4096).ending_with(b'abc')\n"
        "print(GuardedBuffer.byte_past_the_end(buffer))\n"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, timeout=60
    )
    assert done.returncode == -11, (done.returncode, done.stderr)

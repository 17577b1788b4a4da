"""XRANGE replies cut into columns straight from the socket's bytes: a column per field
(atlasbus.decoding.kernels.cut_one_layout), or columns of names and values (atlasbus.decoding.kernels.cut_any_layout).

Every reply comes from a real redis-server. What the cutter gives must be, entry for entry and
byte for byte, what hiredis gives for the same bytes: whatever the values hold (CRLF, RESP
markers, invalid UTF-8, megabytes), however the bytes arrive in pieces, whatever the layout of
the page's entries.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import hiredis
import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atlasbus.bus.connection import RedisEndpoint, raw_connection
from atlasbus.decoding.cut_pages import ColumnPage, MixedPage, PairPage
from atlasbus.decoding.kernels.cut_any_layout import PairWalk, cut_pairs, walk_pairs
from atlasbus.decoding.kernels.cut_one_layout import (
    COMPLETE,
    LAYOUT_CHANGES,
    MORE,
    NOT_XRANGE,
    Walk,
    cut_reply,
    walk_reply,
)
from atlasbus.reading.reply_receiver import XrangePages

# Values that look like RESP framing, or are not text at all.
HOSTILE = [
    b"",
    b"\r\n",
    b"$5\r\nhello\r\n",
    b"*2\r\n$1\r\na\r\n",
    b"-ERR not an error\r\n",
    b"\x00\xff\xfe\r",
    "caf\u00e9 \U0001f600".encode(),
    b"9" * 40,
]


def resp(*parts: bytes | str | int) -> bytes:
    encoded = [part if isinstance(part, bytes) else str(part).encode() for part in parts]
    return b"*%d\r\n" % len(encoded) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in encoded)


def raw_reply(redis_url: str, *command: bytes | str | int) -> bytes:
    """The exact bytes a redis-server sends for ``command``, read until hiredis has them all."""
    url = redis.connection.parse_url(redis_url)
    reader = hiredis.Reader()
    received = b""
    with socket.create_connection((url.get("host", "localhost"), url.get("port", 6379))) as sock:
        sock.sendall(resp(*command))
        while reader.gets() is False:
            chunk = sock.recv(1 << 16)
            assert chunk, "the server closed the connection"
            received += chunk
            reader.feed(chunk)
    return received


def hiredis_of(data: bytes) -> Any:
    reader = hiredis.Reader()
    reader.feed(data)
    return reader.gets()


def as_entries(page: ColumnPage | PairPage | MixedPage | list[Any]) -> list[Any]:
    """Any form as hiredis's [ID, [name, value, ...]] items, for comparing."""
    items = page if isinstance(page, list) else page.entries()
    return [[entry_id, list(fields)] for entry_id, fields in items]


def entries_of(parts: Sequence[ColumnPage | PairPage | MixedPage | list[Any]]) -> list[Any]:
    """The parts a hand-over is cut into, one after another, as ``as_entries`` gives them."""
    return [entry for part in parts for entry in as_entries(part)]


def cut_whole(data: bytes) -> ColumnPage | None:
    """The reply cut into a column per field; None where its layout changes or a name
    repeats."""
    buffer = np.frombuffer(data, np.uint8)
    walk = Walk()
    status = walk_reply(buffer, len(data), walk)
    if status == LAYOUT_CHANGES:
        return None
    assert status == COMPLETE
    assert walk.position == len(data)
    return cut_reply(buffer, walk)


def cut_arriving_byte_by_byte(data: bytes) -> ColumnPage | None:
    """Walk ``data`` as if its bytes arrived one at a time: every cut point must ask for more,
    never misread, until the end or an entry of another layout; then cut it."""
    buffer = np.frombuffer(data, np.uint8)
    walk = Walk()
    for end in range(len(data)):
        status = walk_reply(buffer, end, walk)
        if status == LAYOUT_CHANGES:
            return None
        assert status == MORE, end
    assert walk_reply(buffer, len(data), walk) == COMPLETE
    return cut_reply(buffer, walk)


@pytest.fixture
def stream(r: redis.Redis) -> Iterator[str]:
    name = f"x{uuid.uuid4().hex[:10]}:t"
    yield name
    r.delete(name)


def test_a_uniform_page_becomes_columns_equal_to_hiredis(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    for index, value in enumerate(HOSTILE * 3):
        r.xadd(stream, {"a": value, "b": str(index), "payload": value[::-1]})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    page = cut_whole(data)
    assert isinstance(page, ColumnPage)
    assert page.names == [b"a", b"b", b"payload"]
    assert page.columns[b"a"].to_pylist() == HOSTILE * 3
    assert as_entries(page) == hiredis_of(data)


def test_pages_whose_layouts_differ_are_not_cut_into_a_column_per_field(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    r.xadd(stream, {"a": "1", "b": "2"})
    r.xadd(stream, {"b": "2", "a": "1"})  # same names, another order
    r.xadd(stream, {"a": "1", "b": "2"})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    assert cut_whole(data) is None
    assert cut_arriving_byte_by_byte(data) is None
    r.delete(stream)
    r.xadd(stream, {"a": "1", "b": "2"})
    r.xadd(stream, {"a": "1"})  # a field fewer
    r.xadd(stream, {"a": "1", "b": "2"})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    assert cut_whole(data) is None
    assert cut_arriving_byte_by_byte(data) is None
    r.delete(stream)
    r.execute_command("XADD", stream, "*", "a", "1", "a", "2")  # a repeated name
    assert cut_whole(raw_reply(redis_url, "XRANGE", stream, "-", "+")) is None


def test_a_walk_stops_where_the_layout_changes_however_the_bytes_arrive(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    """Each cut point of the bytes before the fourth entry's names asks for more, never
    misreads; then the walk stops at the fourth entry's start, its names in another order."""
    layouts = [{"a": "1", "b": "2"}] * 3 + [{"b": "2", "a": "1"}, {"a": "1"}]
    for index, fields in enumerate(layouts):
        r.xadd(stream, {name: f"{value}{index}" for name, value in fields.items()})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    buffer = np.frombuffer(data, np.uint8)
    walk = Walk()
    ends = iter(range(len(data) + 1))
    while (status := walk_reply(buffer, next(ends), walk)) == MORE:
        pass
    assert status == LAYOUT_CHANGES
    assert walk.walked == 3
    fourth_id = hiredis_of(data)[3][0]
    assert walk.position == data.index(b"*2\r\n$%d\r\n%s" % (len(fourth_id), fourth_id))


def test_names_differing_in_any_one_byte_are_seen(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    """Names are compared a word at a time (the last word overlapping), a name shorter than a
    word in one masked word: a difference anywhere counts, and the bytes after a name (its
    value's length and bytes, which differ from entry to entry) never do."""
    full = "correlation_identifier_19"  # 25 bytes: three words and a tail
    for name in [full[:size] for size in (1, 2, 7, 8, 9, 15, 16, 17)] + [full]:
        for at in range(len(name)):
            other = name[:at] + chr(ord(name[at]) ^ 1) + name[at + 1 :]
            r.delete(stream)
            r.xadd(stream, {"a": "1", name: "2"})
            r.xadd(stream, {"a": "1", name: "2"})
            r.xadd(stream, {"a": "1", other: "2"})
            data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
            assert cut_whole(data) is None, other
        r.delete(stream)
        r.xadd(stream, {"a": "1", name: "2"})
        r.xadd(stream, {"a": "1", name: "3" * 20})
        r.xadd(stream, {"a": "1", name: ""})
        page = cut_whole(raw_reply(redis_url, "XRANGE", stream, "-", "+"))
        assert page is not None and page.names == [b"a", name.encode()]


def test_entries_of_many_fields_grow_the_walks_notes_and_keep_them(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    """A walk notes room for 16 names and 8 values an entry before it grows: 20 fields an
    entry outgrow both, mid-entry and with bytes still to arrive, and nothing noted is lost."""
    names = [f"field_{index:02d}" for index in range(20)]
    for row in range(5):
        r.xadd(stream, {name: f"{row}:{name}" for name in names})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    for page in (cut_whole(data), cut_arriving_byte_by_byte(data)):
        assert page is not None
        assert page.names == [name.encode() for name in names]
        assert page.columns[b"field_19"].to_pylist() == [f"{r}:field_19".encode() for r in range(5)]
        assert as_entries(page) == hiredis_of(data)
    r.xadd(stream, {**{name: "x" for name in names[:19]}, "field_XX": "x"})  # the last differs
    assert cut_whole(raw_reply(redis_url, "XRANGE", stream, "-", "+")) is None


def test_an_empty_reply_is_an_empty_page(redis_url: str, stream: str) -> None:
    page = cut_whole(raw_reply(redis_url, "XRANGE", stream, "-", "+"))
    assert isinstance(page, ColumnPage) and len(page) == 0


def test_a_reply_cut_anywhere_resumes_to_the_same_page(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    """The bytes arrive one at a time: every cut point must ask for more, never misread."""
    for value in HOSTILE:
        r.xadd(stream, {"k": value, "n": b"12"})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    page = cut_arriving_byte_by_byte(data)
    assert page is not None and as_entries(page) == hiredis_of(data)


def test_values_of_every_length_read_whole_however_the_bytes_arrive(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    """Lengths of 1 to 3 digits are read unrolled, longer ones by the general loop: both, at
    each digit count's edges, byte by byte as well as all at once."""
    lengths = [0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 12345]
    for length in lengths:
        r.xadd(stream, {"v": b"x" * length, "n": str(length)})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    page = cut_arriving_byte_by_byte(data)
    assert page is not None
    assert [len(value) for value in page.columns[b"v"].to_pylist()] == lengths
    assert as_entries(page) == hiredis_of(data)
    whole = cut_whole(data)
    assert whole is not None and as_entries(whole) == as_entries(page)


def test_short_values_are_copied_byte_for_byte(r: redis.Redis, redis_url: str, stream: str) -> None:
    """Values up to 16 bytes are copied as two words or half-words that may overlap: every
    length from 0 to 20, each byte different, beside neighbours of other lengths."""
    alphabet = bytes(range(33, 127))
    for length in range(21):
        r.xadd(stream, {"v": alphabet[length : 2 * length], "w": alphabet[: 20 - length][::-1]})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    page = cut_whole(data)
    assert page is not None
    assert page.columns[b"v"].to_pylist() == [alphabet[n : 2 * n] for n in range(21)]
    assert as_entries(page) == hiredis_of(data)


@pytest.mark.parametrize(
    "length", [b"1x", b"x", b"", b"-1", b"1\n", b"12x", b"123x", b"1234x"], ids=repr
)
def test_a_length_that_is_not_a_number_is_refused(length: bytes) -> None:
    data = b"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\na\r\n$" + length + b"\r\nbbbbbbbbbbbb\r\n"
    assert walk_reply(np.frombuffer(data, np.uint8), len(data), Walk()) == NOT_XRANGE


def test_what_is_not_an_array_of_entries_is_refused(redis_url: str) -> None:
    for data in (b"-WRONGTYPE Operation against a key\r\n", b":1\r\n", b"*1\r\n:1\r\n"):
        assert walk_reply(np.frombuffer(data, np.uint8), len(data), Walk()) == NOT_XRANGE


@pytest.fixture(scope="module")
def endpoint(redis_url: str) -> RedisEndpoint:
    from atlasbus.options.source import parse_source_options

    return parse_source_options({"url": redis_url, "topics": "t"}).endpoint


def read_pages(
    endpoint: RedisEndpoint, commands: list[tuple[Any, ...]], *, any_layout: bool = False
) -> list[Any]:
    """Send all commands at once (pipelined, as the reader does), then read and cut each reply
    alone (the bytes of the replies after it already in the buffer, some of them)."""
    with raw_connection(endpoint) as connection:
        pages = XrangePages(connection, any_layout=any_layout)
        for command in commands:
            pages.send(*command)
        return [pages.hand_over([pages.read()]).cut() for _ in commands]


def one_part(parts: list[Any]) -> Any:
    assert len(parts) == 1
    return parts[0]


def read_joined(
    endpoint: RedisEndpoint, commands: list[tuple[Any, ...]], *, any_layout: bool = False
) -> Any:
    """Send all commands at once, read every reply, then cut them together, as the reader does."""
    with raw_connection(endpoint) as connection:
        pages = XrangePages(connection, any_layout=any_layout)
        for command in commands:
            pages.send(*command)
        return pages.hand_over([pages.read() for _ in commands]).cut()


def test_pipelined_pages_off_a_real_connection_match_redis_py(
    r: redis.Redis, endpoint: RedisEndpoint, stream: str
) -> None:
    for index in range(50):
        fields = {"a": HOSTILE[index % len(HOSTILE)], "b": str(index)}
        if index % 17 == 5:
            fields["extra"] = "x"  # entries 5, 22 and 39: a layout of their own
        r.xadd(stream, fields)
    ids = [entry_id for entry_id, _ in r.xrange(stream)]
    commands = [("XRANGE", stream, ids[i], ids[min(i + 9, 49)]) for i in range(0, 50, 10)]
    pages = read_pages(endpoint, commands)
    expected = [
        [[entry_id, [x for pair in fields.items() for x in pair]] for entry_id, fields in page]
        for page in (r.xrange(stream, c[2], c[3]) for c in commands)
    ]
    assert [entries_of(parts) for parts in pages] == expected
    # A page whose entries' layout changes is cut into names and values, whole.
    assert [[(type(part), len(part)) for part in parts] for parts in pages] == [
        [(PairPage, 10)],
        [(ColumnPage, 10)],
        [(PairPage, 10)],
        [(PairPage, 10)],
        [(ColumnPage, 10)],
    ]
    # Cut together: each run of pages cut the same way is one part, and the runs one page.
    (mixed,) = read_joined(endpoint, commands)
    assert isinstance(mixed, MixedPage) and len(mixed) == 50
    assert [(type(part), len(part)) for part in mixed.parts] == [
        (PairPage, 10),
        (ColumnPage, 10),
        (PairPage, 20),
        (ColumnPage, 10),
    ]
    assert entries_of([mixed]) == [e for page in expected for e in page]
    assert mixed.ids.to_pylist() == ids


def test_a_layout_that_changes_at_every_entry_is_one_page_of_names_and_values(
    r: redis.Redis, redis_url: str, endpoint: RedisEndpoint, stream: str
) -> None:
    for index in range(30):
        r.xadd(stream, {"a" if index % 2 else "b": str(index)})
    r.xadd(stream, {"k": "1"})
    r.execute_command("XADD", stream, "*", "k", "1", "k", "2")  # a repeated name
    expected = hiredis_of(raw_reply(redis_url, "XRANGE", stream, "-", "+"))
    (parts,) = read_pages(endpoint, [("XRANGE", stream, "-", "+")])
    assert entries_of(parts) == expected
    assert [(type(part), len(part)) for part in parts] == [(PairPage, 32)]


def test_pages_of_one_layout_that_repeat_a_name_are_cut_into_names_and_values(
    r: redis.Redis, redis_url: str, endpoint: RedisEndpoint, stream: str
) -> None:
    for index in range(6):
        r.execute_command("XADD", stream, "*", "k", str(index), "v", "x", "k", "last")
    ids = [entry_id for entry_id, _ in r.xrange(stream)]
    commands = [("XRANGE", stream, ids[0], ids[2]), ("XRANGE", stream, ids[3], ids[5])]
    parts = read_joined(endpoint, commands)
    assert [(type(part), len(part)) for part in parts] == [(PairPage, 6)]
    assert entries_of(parts) == hiredis_of(raw_reply(redis_url, "XRANGE", stream, "-", "+"))


def test_replies_cut_together_are_one_page_of_columns_equal_to_redis_py(
    r: redis.Redis, endpoint: RedisEndpoint, stream: str
) -> None:
    for index in range(50):
        r.xadd(stream, {"a": HOSTILE[index % len(HOSTILE)], "b": str(index)})
    ids = [entry_id for entry_id, _ in r.xrange(stream)]
    commands = [("XRANGE", stream, ids[i], ids[min(i + 9, 49)]) for i in range(0, 50, 10)]
    commands.append(("XRANGE", stream, "(" + ids[-1].decode(), "+"))  # an empty reply, last
    joined = one_part(read_joined(endpoint, commands))
    assert isinstance(joined, ColumnPage) and len(joined) == 50
    assert joined.ids.to_pylist() == ids
    assert joined.columns[b"a"].to_pylist() == [HOSTILE[i % len(HOSTILE)] for i in range(50)]
    assert joined.columns[b"b"].to_pylist() == [str(i).encode() for i in range(50)]


def test_replies_with_other_names_than_the_first_are_cut_apart(
    r: redis.Redis, endpoint: RedisEndpoint, stream: str
) -> None:
    for index in range(20):  # each page uniform, but the second's names differ
        r.xadd(stream, {"a" if index < 10 else "z": str(index)})
    ids = [entry_id for entry_id, _ in r.xrange(stream)]
    commands = [("XRANGE", stream, ids[0], ids[9]), ("XRANGE", stream, ids[10], ids[19])]
    (mixed,) = read_joined(endpoint, commands)
    assert isinstance(mixed, MixedPage)
    assert [(type(part), len(part)) for part in mixed.parts] == [(ColumnPage, 10), (ColumnPage, 10)]
    assert entries_of([mixed]) == [
        [entry_id, [b"a" if i < 10 else b"z", str(i).encode()]] for i, entry_id in enumerate(ids)
    ]


def test_a_page_larger_than_the_buffer_grows_it(
    r: redis.Redis, endpoint: RedisEndpoint, stream: str
) -> None:
    big = bytes(range(256)) * 12_000  # 3 MB per value: the buffer starts at 1 MiB
    for index in range(3):
        r.xadd(stream, {"v": big[index:], "i": str(index)})
    ((page,),) = read_pages(endpoint, [("XRANGE", stream, "-", "+")])
    assert isinstance(page, ColumnPage)
    assert page.columns[b"v"].to_pylist() == [big, big[1:], big[2:]]


def test_the_buffer_grows_under_replies_not_yet_cut(
    r: redis.Redis, endpoint: RedisEndpoint, stream: str
) -> None:
    value = bytes(range(256)) * 1_000  # 256 kB: 3 entries a page, the buffer starts at 1 MiB
    for index in range(9):
        r.xadd(stream, {"v": value[index:], "i": str(index)})
    ids = [entry_id for entry_id, _ in r.xrange(stream)]
    commands = [("XRANGE", stream, ids[i], ids[i + 2]) for i in range(0, 9, 3)]
    joined = one_part(read_joined(endpoint, commands))
    assert isinstance(joined, ColumnPage)
    assert joined.columns[b"v"].to_pylist() == [value[index:] for index in range(9)]
    assert joined.ids.to_pylist() == ids


@pytest.mark.parametrize("any_layout", [False, True])
def test_an_error_reply_between_replies_not_yet_cut_loses_none_of_them(
    r: redis.Redis, redis_url: str, endpoint: RedisEndpoint, stream: str, any_layout: bool
) -> None:
    r.set(f"{stream}:string", "not a stream")
    publish_any_layouts(r, stream, 4)
    ids = [entry_id for entry_id, _ in r.xrange(stream)]
    with raw_connection(endpoint) as connection:
        pages = XrangePages(connection, any_layout=any_layout)
        pages.send("XRANGE", stream, ids[0], ids[1])
        pages.send("XRANGE", f"{stream}:string", "-", "+")
        pages.send("XRANGE", stream, ids[2], ids[3])
        first = pages.read()
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            pages.read()
        third = pages.read()  # parsed by hiredis from here on
        assert isinstance(third, list)
        parts = pages.hand_over([first, third]).cut()
    assert [(type(part), len(part)) for part in parts] == [(PairPage, 2), (list, 2)]
    assert entries_of(parts) == hiredis_of(raw_reply(redis_url, "XRANGE", stream, "-", "+"))
    r.delete(f"{stream}:string")


def test_an_error_reply_raises_redis_pys_error_and_later_replies_still_read(
    r: redis.Redis, endpoint: RedisEndpoint, stream: str
) -> None:
    r.set(f"{stream}:string", "not a stream")
    r.xadd(stream, {"a": "1"})
    with raw_connection(endpoint) as connection:
        pages = XrangePages(connection)
        pages.send("XRANGE", f"{stream}:string", "-", "+")
        pages.send("XRANGE", stream, "-", "+")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            pages.read()
        assert entries_of(pages.hand_over([pages.read()]).cut()) == [
            [r.xrange(stream)[0][0], [b"a", b"1"]]
        ]
    r.delete(f"{stream}:string")


NAMES = st.sampled_from([b"a", b"b", b"payload", b"\r\n$1"])
ENTRIES = st.lists(
    st.lists(st.tuples(NAMES, st.binary(max_size=12) | st.sampled_from(HOSTILE)), min_size=1),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENTRIES, st.booleans(), st.booleans())
def test_any_entries_read_as_hiredis_reads_them(
    redis_url: str,
    endpoint: RedisEndpoint,
    entries: list[list[tuple[bytes, bytes]]],
    uniform: bool,
    any_layout: bool,
) -> None:
    if uniform:  # every entry with the first one's names: the column path
        names = [name for name, _ in entries[0]]
        entries = [list(zip(names, [v for _, v in e], strict=False)) for e in entries]
        entries = [e for e in entries if len(e) == len(names)]
    client = redis.Redis.from_url(redis_url)
    stream = f"h{uuid.uuid4().hex[:10]}:t"
    try:
        for fields in entries:
            client.execute_command("XADD", stream, "*", *[x for pair in fields for x in pair])
        command = ("XRANGE", stream, "-", "+", "COUNT", 5)
        (parts,) = read_pages(endpoint, [command], any_layout=any_layout)
        assert entries_of(parts) == hiredis_of(raw_reply(redis_url, *command))
        if any_layout:  # whatever the layouts: one page of names and values
            assert [type(part) for part in parts] == [PairPage]
    finally:
        client.delete(stream)
        client.close()


# --- any layouts: names and values (atlasbus.decoding.kernels.cut_any_layout, for format=raw) --------------------


def publish_any_layouts(r: redis.Redis, stream: str, count: int) -> None:
    """Entries whose fields differ from one to the next: names, order, count, repeated names."""
    for index in range(count):
        value = HOSTILE[index % len(HOSTILE)]
        layouts = [
            ["a", value, "b", str(index)],
            ["b", str(index), "a", value],
            ["k", value, "k", str(index)],
            ["payload", value, "x" * (index % 3), "", "\r\n$1", value[::-1]],
            [HOSTILE[5], value],  # a name that is not UTF-8
        ]
        r.execute_command("XADD", stream, "*", *layouts[index % len(layouts)])


def pairs_arriving_byte_by_byte(data: bytes) -> PairPage:
    """Walk ``data`` into names and values as if its bytes arrived one at a time: every cut
    point must ask for more, never misread; then cut it."""
    buffer = np.frombuffer(data, np.uint8)
    walk = PairWalk()
    for end in range(len(data)):
        assert walk_pairs(buffer, end, walk) == MORE, end
    assert walk_pairs(buffer, len(data), walk) == COMPLETE
    assert walk.position == len(data)
    return cut_pairs(buffer, [walk])


def test_a_reply_of_any_layouts_arriving_byte_by_byte_is_one_page_equal_to_hiredis(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    publish_any_layouts(r, stream, 25)
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    page = pairs_arriving_byte_by_byte(data)
    assert as_entries(page) == hiredis_of(data)
    assert page.field_offsets.to_pylist()[:6] == [0, 2, 4, 6, 9, 10]


def test_entries_of_many_fields_grow_the_pair_walks_notes_and_keep_them(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    for count in (1, 40, 3, 300, 2):  # 8 fields an entry fit before the notes grow
        r.xadd(stream, {f"f{field}": f"{count}.{field}" for field in range(count)})
    data = raw_reply(redis_url, "XRANGE", stream, "-", "+")
    buffer = np.frombuffer(data, np.uint8)
    walk = PairWalk()
    assert walk_pairs(buffer, len(data), walk) == COMPLETE
    page = cut_pairs(buffer, [walk])
    assert page.field_offsets.to_pylist() == [0, 1, 41, 44, 344, 346]
    assert as_entries(page) == hiredis_of(data)


def test_an_empty_reply_is_an_empty_page_of_names_and_values(redis_url: str) -> None:
    data = raw_reply(redis_url, "XRANGE", "no-such-stream", "-", "+")
    page = pairs_arriving_byte_by_byte(data)
    assert len(page) == 0 and page.field_offsets.to_pylist() == [0]
    assert len(page.names) == len(page.values) == 0


def test_what_is_not_an_array_of_entries_is_refused_by_the_pair_walk() -> None:
    for data in (
        b"-WRONGTYPE Operation against a key\r\n",
        b":1\r\n",
        b"*1\r\n:1\r\n",
        b"*1\r\n*2\r\n$3\r\n1-0\r\n*1\r\n$1\r\na\r\n",  # a name without a value
        b"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$x\r\n",
    ):
        walk = PairWalk()
        assert walk_pairs(np.frombuffer(data, np.uint8), len(data), walk) == NOT_XRANGE, data


def test_pipelined_replies_of_any_layouts_are_cut_into_one_page_equal_to_hiredis(
    r: redis.Redis, redis_url: str, endpoint: RedisEndpoint, stream: str
) -> None:
    publish_any_layouts(r, stream, 50)
    ids = [entry_id for entry_id, _ in r.xrange(stream)]
    commands = [("XRANGE", stream, ids[i], ids[min(i + 9, 49)]) for i in range(0, 50, 10)]
    commands.append(("XRANGE", stream, "(" + ids[-1].decode(), "+"))  # an empty reply, last
    expected = hiredis_of(raw_reply(redis_url, "XRANGE", stream, "-", "+"))
    alone = read_pages(endpoint, commands, any_layout=True)
    assert [[(type(part), len(part)) for part in parts] for parts in alone] == [
        [(PairPage, 10)]
    ] * 5 + [[]]
    page = one_part(read_joined(endpoint, commands, any_layout=True))
    assert isinstance(page, PairPage) and len(page) == 50
    assert as_entries(page) == expected
    counts = [len(fields) // 2 for _, fields in expected]
    assert page.field_offsets.to_pylist() == np.concatenate([[0], np.cumsum(counts)]).tolist()

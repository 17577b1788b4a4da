"""The driver's questions to Redis (atlasbus.bus.stream_catalog), asked of a real server."""

from __future__ import annotations

import gc
from collections.abc import Sequence

import pytest
import redis

from atlasbus.bus import stream_catalog as streams_module
from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.stream_catalog import Advance, StreamCatalog, StreamInfo, Walk, last_position
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.options.source import Subscription
from helpers import redis_major


@pytest.fixture
def catalog(redis_url: str) -> StreamCatalog:
    return StreamCatalog(RedisEndpoint(redis_url))


def add(r: redis.Redis, stream: str, *ids: str) -> None:
    for entry_id in ids:
        r.xadd(stream, {"n": entry_id}, id=entry_id)


def id_range(ms: int, count: int) -> list[str]:
    return [f"{ms + n}-0" for n in range(count)]


def eid(text: str) -> EntryId:
    return EntryId.parse(text)


# --- discover ------------------------------------------------------------------------------------


def test_a_pattern_finds_the_streams_whose_topic_matches_and_nothing_else(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    for topic in ("orders-eu", "orders-us", "payments", "orders-eu:archive"):
        add(r, f"{prefix}:{topic}", "1-0")
    r.set(f"{prefix}:orders-xx", "not a stream")
    add(r, f"other{prefix}:orders-eu", "1-0")
    found = catalog.discover(Subscription("pattern", ("orders-*",), prefix))
    # fnmatch's * crosses ':' as SCAN's does: the topic of orders-eu:archive matches too
    assert found == [f"{prefix}:orders-eu", f"{prefix}:orders-eu:archive", f"{prefix}:orders-us"]


def test_a_prefix_with_glob_characters_is_matched_literally(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    odd = f"{prefix}[ab]*?"
    add(r, f"{odd}:t", "1-0")
    add(r, f"{prefix}a:t", "1-0")  # what the prefix would match as a glob
    add(r, f"{prefix}[ab]xy:t", "1-0")
    assert catalog.discover(Subscription("pattern", ("*",), odd)) == [f"{odd}:t"]


def test_topics_and_streams_are_listed_as_given_without_asking_redis(prefix: str) -> None:
    offline = StreamCatalog(RedisEndpoint("redis://127.0.0.1:1/0"))  # nothing listens there
    assert offline.discover(Subscription("topics", ("b", "a"), prefix)) == [
        f"{prefix}:b",
        f"{prefix}:a",
    ]
    assert offline.discover(Subscription("streams", ("x", "y:z"), prefix)) == ["x", "y:z"]


# --- info ----------------------------------------------------------------------------------------


def test_info_of_present_empty_and_absent_streams_in_one_call(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    full, empty, absent = f"{prefix}:full", f"{prefix}:empty", f"{prefix}:absent"
    add(r, full, "1000-0", "1000-1", "2000-0", "3000-0")
    r.xdel(full, "1000-1", "3000-0")
    r.xgroup_create(empty, "g", id="0", mkstream=True)
    infos = catalog.info([full, empty, absent])
    assert list(infos) == [full, empty, absent]
    modern = redis_major(r) >= 7
    assert infos[full] == StreamInfo(
        length=2,
        first=eid("1000-0"),
        last=eid("2000-0"),
        last_generated=eid("3000-0"),  # deleted, but still the newest ever added
        max_deleted=eid("3000-0") if modern else None,
        entries_added=4 if modern else None,
    )
    assert infos[full] is not None and infos[full].removed == (2 if modern else None)
    assert infos[empty] == StreamInfo(
        length=0,
        first=None,
        last=None,
        last_generated=ZERO,
        max_deleted=ZERO if modern else None,
        entries_added=0 if modern else None,
    )
    assert infos[absent] is None
    assert catalog.info([]) == {}


def test_info_reads_the_same_under_resp3(
    catalog: StreamCatalog, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    full, empty = f"{prefix}:full", f"{prefix}:empty"
    add(r, full, "1000-0", "2000-0", "3000-0")
    r.xdel(full, "3000-0")
    r.xgroup_create(empty, "g", id="0", mkstream=True)
    resp3 = StreamCatalog(RedisEndpoint(f"{redis_url}?protocol=3"))
    assert resp3.info([full, empty]) == catalog.info([full, empty])


def test_last_position_is_the_newest_id_ever_added_and_zero_for_an_absent_stream() -> None:
    info = StreamInfo(2, eid("1-0"), eid("2-0"), eid("9-0"), None)
    assert (last_position(info), last_position(None)) == (eid("9-0"), ZERO)


# --- single entries ------------------------------------------------------------------------------


def test_first_in_range_and_last_at_or_before(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    stream = f"{prefix}:t"
    add(r, stream, "1000-0", "2000-0", "2000-5", "3000-0")
    assert catalog.first_in_range(stream, eid("1000-0"), eid("3000-0")) == eid("2000-0")
    assert catalog.first_in_range(stream, eid("2000-5"), eid("2999-0")) is None
    assert catalog.first_in_range(f"{prefix}:absent", ZERO, eid("9-0")) is None
    assert catalog.last_at_or_before(stream, eid("2000-4")) == eid("2000-0")
    assert catalog.last_at_or_before(stream, eid("2000-5")) == eid("2000-5")
    assert catalog.last_at_or_before(stream, eid("999-0")) is None


def test_first_entries_and_last_entries_of_many_streams_at_once(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    a, b, absent = f"{prefix}:a", f"{prefix}:b", f"{prefix}:absent"
    add(r, a, "1000-0", "2000-0", "3000-0")
    add(r, b, "5000-0")
    assert catalog.first_in_ranges(
        {a: (eid("1000-0"), eid("3000-0")), b: (eid("5000-0"), eid("9000-0")), absent: (ZERO, ZERO)}
    ) == {a: eid("2000-0"), b: None, absent: None}
    assert catalog.last_at_or_before_each(
        {a: eid("2999-9"), b: eid("4999-0"), absent: eid("1-0")}
    ) == {a: eid("2000-0"), b: None, absent: None}
    assert catalog.first_in_ranges({}) == {}
    assert catalog.last_at_or_before_each({}) == {}


def test_questions_about_many_streams_name_a_key_that_is_not_a_stream(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0")
    r.set(f"{prefix}:s", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        catalog.first_in_ranges({f"{prefix}:a": (ZERO, eid("9-0")), f"{prefix}:s": (ZERO, ZERO)})
    # the connection stayed in step: the next question gets its own answer
    assert catalog.last_at_or_before_each({f"{prefix}:a": eid("1000-0")}) == {
        f"{prefix}:a": eid("1000-0")
    }


# --- advance and Walk ----------------------------------------------------------------------------


def test_walk_counts_pages_into_pieces_of_equal_size() -> None:
    walk = Walk(4)
    walk.feed([b"1-0", b"2-0", b"3-0"])
    walk.feed([b"4-0", b"5-0", b"6-0", b"7-0", b"8-0", b"9-0"])
    walk.feed([])
    assert (walk.total, walk.last, walk.cuts, walk.counts, walk.pending) == (
        9,
        eid("9-0"),
        [eid("4-0"), eid("8-0")],
        [4, 4],
        1,
    )
    assert walk.pieces(eid("9-0")) == ((eid("4-0"), eid("8-0")), (4, 4, 1))
    # a piece that would end at or after ``upto`` is merged into the one before
    assert walk.pieces(eid("8-0")) == ((eid("4-0"),), (4, 5))
    assert walk.pieces(eid("4-0")) == ((), (9,))


def test_walk_ending_exactly_on_a_cut_has_no_empty_last_piece() -> None:
    walk = Walk(3)
    walk.feed([b"1-0", b"2-0", b"3-0", b"4-0", b"5-0", b"6-0"])
    assert walk.pieces(eid("6-0")) == ((eid("3-0"),), (3, 3))
    assert Walk(3).pieces(eid("6-0")) == ((), (0,))


@pytest.mark.parametrize("page", [7, 10_000], ids=["pages-of-7", "one-page"])
def test_advance_counts_every_entry_into_pieces_exactly(
    catalog: StreamCatalog,
    r: redis.Redis,
    prefix: str,
    page: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams_module, "_WALK_PAGE", page)
    stream = f"{prefix}:t"
    ids = id_range(1000, 30)
    add(r, stream, *ids)
    r.xdel(stream, ids[3], ids[4])  # 28 left
    kept = [eid(i) for i in ids if i not in (ids[3], ids[4])]
    walk = Walk(10)
    assert catalog.advance(stream, ZERO, kept[-1], None, walk) == (kept[-1], 28)
    assert (walk.total, walk.cuts, walk.counts, walk.pending) == (
        28,
        [kept[9], kept[19]],
        [10, 10],
        8,
    )
    assert walk.pieces(kept[-1]) == ((kept[9], kept[19]), (10, 10, 8))


def test_advance_with_a_budget_stops_at_the_n_th_entry_and_goes_on_from_there(
    catalog: StreamCatalog, r: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams_module, "_WALK_PAGE", 4)
    stream = f"{prefix}:t"
    ids = [eid(i) for i in id_range(1000, 25)]
    add(r, stream, *map(str, ids))
    walk = Walk(10)
    assert catalog.advance(stream, ZERO, ids[-1], 12, walk) == (ids[11], 12)
    # the same walk goes on counting where it stopped
    assert catalog.advance(stream, ids[11], ids[-1], 100, walk) == (ids[-1], 13)
    assert walk.pieces(ids[-1]) == ((ids[9], ids[19]), (10, 10, 5))
    # ``upto`` bounds the walk, whatever the budget; nothing after ``after``: nothing walked
    assert catalog.advance(stream, ids[2], ids[5], None, Walk(10)) == (ids[5], 3)
    assert catalog.advance(stream, ids[-1], eid("9999-0"), None, Walk(10)) == (ids[-1], 0)
    assert catalog.advance(f"{prefix}:absent", ZERO, eid("9-0"), 5, Walk(10)) == (ZERO, 0)


class GcWitness(Walk):
    """A walk that notes, page by page, whether Python's cycle collector ran meanwhile."""

    def __init__(self, piece_size: int) -> None:
        super().__init__(piece_size)
        self.collector_on: list[bool] = []

    def feed(self, ids: Sequence[bytes]) -> None:
        self.collector_on.append(gc.isenabled())
        super().feed(ids)


def test_advance_pauses_the_cycle_collector_while_walking_and_restores_it(
    catalog: StreamCatalog, r: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # hiredis's replies are tens of thousands of lists and bytes per page: the collector's
    # passes over them found nothing and cost the driver some 40% of a walk's CPU
    monkeypatch.setattr(streams_module, "_WALK_PAGE", 4)
    stream = f"{prefix}:t"
    ids = [eid(i) for i in id_range(1000, 10)]
    add(r, stream, *map(str, ids))
    walk = GcWitness(5)
    assert gc.isenabled()
    assert catalog.advance(stream, ZERO, ids[-1], None, walk) == (ids[-1], 10)
    assert walk.collector_on == [False, False, False]
    assert gc.isenabled()

    r.set(f"{prefix}:s", "x")  # an error mid-walk leaves it on too
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        catalog.advance(f"{prefix}:s", ZERO, ids[-1], None, Walk(5))
    assert gc.isenabled()


@pytest.mark.parametrize(
    ("round_entries", "min_page", "walk_page"),
    [(20_000, 16, 10_000), (10, 2, 5), (1, 1, 3)],
    ids=["one-round", "small-rounds", "tiny-pages"],
)
def test_advance_many_walks_every_stream_as_advance_does_alone(
    catalog: StreamCatalog,
    r: redis.Redis,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    round_entries: int,
    min_page: int,
    walk_page: int,
) -> None:
    monkeypatch.setattr(streams_module, "_ROUND_ENTRIES", round_entries)
    monkeypatch.setattr(streams_module, "_MIN_PAGE", min_page)
    monkeypatch.setattr(streams_module, "_WALK_PAGE", walk_page)
    lengths = {"a": 0, "b": 1, "c": 7, "d": 23, "e": 40}
    for name, length in lengths.items():
        add(r, f"{prefix}:{name}", *id_range(1000, length))
    r.xdel(f"{prefix}:d", "1003-0", "1004-0", "1022-0")  # 20 left
    requests = [  # (stream, after, upto, budget)
        ("a", ZERO, eid("9999-0"), None),
        ("b", ZERO, eid("9999-0"), 5),
        ("c", eid("1001-0"), eid("1005-0"), None),  # 1002..1005
        ("d", ZERO, eid("9999-0"), None),
        ("e", eid("1004-0"), eid("9999-0"), 17),  # 1005..1021
        ("e", ZERO, eid("1039-0"), 0),
    ]
    together = [Walk(4) for _ in requests]
    results = catalog.advance_many(
        [
            Advance(f"{prefix}:{name}", after, upto, budget, walk)
            for (name, after, upto, budget), walk in zip(requests, together, strict=True)
        ]
    )
    assert results == [
        (ZERO, 0),
        (eid("1000-0"), 1),
        (eid("1005-0"), 4),
        (eid("1021-0"), 20),
        (eid("1021-0"), 17),
        (ZERO, 0),
    ]
    for (name, after, upto, budget), walk, result in zip(requests, together, results, strict=True):
        alone = Walk(4)
        assert catalog.advance(f"{prefix}:{name}", after, upto, budget, alone) == result
        assert (walk.total, walk.cuts, walk.counts, walk.pending) == (
            alone.total,
            alone.cuts,
            alone.counts,
            alone.pending,
        )
    assert together[3].cuts == [eid(i) for i in ("1005-0", "1009-0", "1013-0", "1017-0", "1021-0")]


# --- consumer groups -----------------------------------------------------------------------------


def group_at(r: redis.Redis, stream: str, group: str) -> str | None:
    for info in r.xinfo_groups(stream):
        name = info["name"].decode() if isinstance(info["name"], bytes) else info["name"]
        if name == group:
            value = info["last-delivered-id"]
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def test_group_positions_where_the_group_exists(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    a, b, c, absent = (f"{prefix}:{name}" for name in ("a", "b", "c", "absent"))
    add(r, a, "1000-0", "2000-0")
    add(r, b, "1000-0")
    add(r, c, "1000-0")
    r.xgroup_create(a, "g", id="1500-0")
    r.xgroup_create(a, "gg", id="2000-0")  # a name that starts like it
    r.xgroup_create(b, "other", id="1000-0")
    r.xgroup_create(c, "g", id="$")
    assert catalog.group_positions([a, b, c, absent], "g") == {a: eid("1500-0"), c: eid("1000-0")}


def test_ensure_group_creates_it_once_and_never_moves_it(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    stream = f"{prefix}:t"
    assert catalog.ensure_group(stream, "g", eid("5-0")) is True  # creates the stream too
    assert (r.xlen(stream), group_at(r, stream, "g")) == (0, "5-0")
    assert catalog.ensure_group(stream, "g", eid("9-0")) is False
    assert group_at(r, stream, "g") == "5-0"


def test_ensure_groups_creates_the_missing_ones_in_one_call(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    a, b, c = (f"{prefix}:{name}" for name in "abc")
    add(r, a, "1000-0")
    r.xgroup_create(a, "g", id="1000-0")
    add(r, b, "1000-0")
    created = catalog.ensure_groups({a: eid("7-0"), b: eid("8-0"), c: eid("9-0")}, "g")
    assert created == {b, c}
    assert [group_at(r, s, "g") for s in (a, b, c)] == ["1000-0", "8-0", "9-0"]
    assert catalog.ensure_groups({}, "g") == set()


def test_ensure_group_on_a_key_that_is_not_a_stream_raises(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    r.set(f"{prefix}:s", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        catalog.ensure_group(f"{prefix}:s", "g", ZERO)


def test_move_group_moves_it_where_it_exists_and_creates_it_where_it_does_not(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    a, b = f"{prefix}:a", f"{prefix}:b"
    add(r, a, "1000-0", "2000-0")
    add(r, b, "1000-0")
    r.xgroup_create(a, "g", id="1000-0")
    catalog.move_group({a: eid("2000-0"), b: eid("1000-0")}, "g")
    assert (group_at(r, a, "g"), group_at(r, b, "g")) == ("2000-0", "1000-0")
    catalog.move_group({a: eid("1500-0")}, "g")  # back, too: the group mirrors the offsets
    assert group_at(r, a, "g") == "1500-0"


def test_move_group_leaves_the_streams_whose_position_did_not_change(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    a, b = f"{prefix}:a", f"{prefix}:b"
    add(r, a, "1000-0", "2000-0")
    add(r, b, "1000-0", "2000-0")
    catalog.move_group({a: eid("1000-0"), b: eid("1000-0")}, "g")
    r.xgroup_setid(b, "g", id="0")  # by hand: shows whether b is set again
    catalog.move_group(
        {a: eid("2000-0"), b: eid("1000-0")}, "g", previous={a: eid("1000-0"), b: eid("1000-0")}
    )
    assert (group_at(r, a, "g"), group_at(r, b, "g")) == ("2000-0", "0-0")


def test_move_group_over_a_stream_deleted_since_it_was_read(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    gone, kept = f"{prefix}:gone", f"{prefix}:kept"
    add(r, gone, "1000-0")
    add(r, kept, "1000-0", "2000-0")
    for stream in (gone, kept):
        r.xgroup_create(stream, "g", id="0")
    r.delete(gone)
    catalog.move_group({gone: eid("1000-0"), kept: eid("2000-0")}, "g")
    assert group_at(r, kept, "g") == "2000-0"
    assert not r.exists(gone)  # not brought back as an empty stream


def test_move_group_gives_redis_the_entries_read_where_it_can_take_them(
    catalog: StreamCatalog, r: redis.Redis, prefix: str
) -> None:
    """Redis 7 counts the group's lag from ENTRIESREAD; Redis 6.2 refuses the argument, and
    the group is moved without it (a checkpoint written against Redis 7, run on 6.2)."""
    a = f"{prefix}:a"
    add(r, a, "1000-0", "2000-0", "3000-0", "4000-0")
    r.xgroup_create(a, "g", id="0")
    catalog.move_group({a: eid("2000-0")}, "g", entries_read={a: 2})
    assert group_at(r, a, "g") == "2000-0"
    if redis_major(r) >= 7:
        info = next(g for g in r.xinfo_groups(a) if g["name"] == b"g")
        assert (info["entries-read"], info["lag"]) == (2, 2)

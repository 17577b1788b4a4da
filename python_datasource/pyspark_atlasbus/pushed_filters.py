"""Spark's pushed filters (``pyspark.sql.datasource.Filter``) as ``PushedBounds``; driver.

Runs in Spark's planning worker (``DataSourceReader.pushFilters``, pyspark 4.1+). Each
filter either narrows the read exactly (it is applied, and Spark does not evaluate it again)
or is handed back to Spark, having narrowed the read to a superset or not at all. The rules
are docs/options.md's "Filtering batch reads":

- ``timestamp`` (the ID's ms part): ``=``, ``<=>``, ``>``, ``>=``, ``<``, ``<=`` with a
  timestamp, ``IS NULL``, ``IS NOT NULL``: exact; ``IN``: narrows to its first and last
  value, and Spark checks;
- ``id``: ``=``, ``<=>`` (a canonical ``ms-seq``; any other text matches no entry) and
  ``IS NOT NULL``: exact; ``IN``: narrows to its least and greatest ID, and Spark checks.
  ``<``, ``<=``, ``>``, ``>=`` compare text, not IDs (``'10-0' < '9-0'``): they narrow a
  stream whose IDs read all have as many ms digits (``pushdown.text_bounds``), and Spark
  checks;
- ``topic``, ``stream``: ``=``, ``<=>``, ``IN`` with text, and ``IS NOT NULL``: exact;
- anything else (``NOT``, other columns, other operators, other value types): Spark's.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
)

from atlasbus.model.entry_id import MAX_SEQ, ZERO, EntryId
from atlasbus.planning.pushdown import (
    LAST_TIMESTAMP_MS,
    MAX_ID,
    PushedBounds,
    after_time,
    canonical_id,
    upto_time,
)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_MICROSECOND = datetime.timedelta(microseconds=1)
_NOTHING = PushedBounds(after=MAX_ID, upto=ZERO)
_NON_NULL_TIME = PushedBounds(upto=EntryId(LAST_TIMESTAMP_MS, MAX_SEQ))
"""The IDs whose ``timestamp`` is not null: what any comparison with it needs."""

_TEXT_OPS = {GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}

NEVER_NULL = ("topic", "stream", "id")
"""Columns no row leaves null: ``IS NOT NULL`` on them holds for every row."""


@dataclass
class Pushdown:
    """Filters split into the bounds they set and those Spark must still evaluate."""

    bounds: PushedBounds = field(default_factory=PushedBounds)
    applied: list[Filter] = field(default_factory=list)
    to_spark: list[Filter] = field(default_factory=list)


def push(filters: Sequence[Filter]) -> Pushdown:
    """Split ``filters`` (ANDed, as Spark passes them) into bounds and what Spark checks."""
    result = Pushdown()
    for one in filters:
        narrowed = _bounds_of(one)
        if narrowed is None:
            result.to_spark.append(one)
            continue
        bounds, exact = narrowed
        result.bounds = _intersect(result.bounds, bounds)
        (result.applied if exact else result.to_spark).append(one)
    return result


def _intersect(a: PushedBounds, b: PushedBounds) -> PushedBounds:
    both = a.with_ids(after=b.after, upto=b.upto)
    if b.topics is not None:
        both = both.with_topics(b.topics)
    if b.streams is not None:
        both = both.with_streams(b.streams)
    for op, text in b.id_text:
        both = both.with_id_text(op, text)
    return both


def _bounds_of(one: Filter) -> tuple[PushedBounds, bool] | None:
    """``(bounds, exact)`` of one filter; None when it narrows nothing."""
    attribute = getattr(one, "attribute", None)
    if attribute is None or len(attribute) != 1:
        return None  # Not(...), or a nested field
    column = attribute[0]
    if isinstance(one, IsNotNull) and column in NEVER_NULL:
        return PushedBounds(), True
    if column == "timestamp":
        return _time_bounds(one)
    if column == "id":
        return _id_bounds(one)
    if column in ("topic", "stream"):
        return _name_bounds(column, one)
    return None


def _micros(value: object) -> int | None:
    """Microseconds since the epoch of a timestamp literal; None for anything else.

    Spark passes a ``timestamp`` column's literals as aware datetimes; a naive one (a
    ``timestamp_ntz``) has no instant to compare, so it is not pushed.
    """
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // _ONE_MICROSECOND


def _time_bounds(one: Filter) -> tuple[PushedBounds, bool] | None:
    if isinstance(one, IsNull):
        return PushedBounds(after=_NON_NULL_TIME.upto), True
    if isinstance(one, IsNotNull):
        return _NON_NULL_TIME, True
    if isinstance(one, In):
        times = [_micros(v) for v in one.value]
        known = [t for t in times if t is not None]
        if len(known) != len(times) or not known:
            return None
        low, high = min(known), max(known)
        return _between(low, True, high, True), len(set(known)) == 1
    micros = _micros(getattr(one, "value", None))
    if micros is None:
        return None
    if isinstance(one, EqualTo | EqualNullSafe):
        return _between(micros, True, micros, True), True
    if isinstance(one, GreaterThan | GreaterThanOrEqual):
        after = after_time(micros, inclusive=isinstance(one, GreaterThanOrEqual))
        return _NON_NULL_TIME.with_ids(after=after), True
    if isinstance(one, LessThan | LessThanOrEqual):
        upto = upto_time(micros, inclusive=isinstance(one, LessThanOrEqual))
        return (_NOTHING if upto is None else PushedBounds(upto=upto)), True
    return None


def _between(low: int, low_inclusive: bool, high: int, high_inclusive: bool) -> PushedBounds:
    """Timestamps in ``[low, high]`` (each end open unless inclusive), as IDs."""
    upto = upto_time(high, inclusive=high_inclusive)
    if upto is None:
        return _NOTHING
    return _NON_NULL_TIME.with_ids(after=after_time(low, inclusive=low_inclusive), upto=upto)


def _id_bounds(one: Filter) -> tuple[PushedBounds, bool] | None:
    values: Iterable[object]
    if isinstance(one, EqualTo | EqualNullSafe):
        values = (one.value,)
    elif isinstance(one, In):
        values = one.value
    elif isinstance(one, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
        # text order, not ID order ('10-0' < '9-0'): a superset where the ms digits agree
        if not isinstance(one.value, str):
            return None
        return PushedBounds().with_id_text(_TEXT_OPS[type(one)], one.value), False
    else:
        return None
    texts = list(values)
    if not texts or not all(isinstance(t, str) for t in texts):
        return None
    ids = [i for t in texts if (i := canonical_id(str(t))) is not None]
    if not ids:
        return _NOTHING, True  # no entry's id reads like any of them
    low, high = min(ids), max(ids)
    return PushedBounds(after=low.predecessor(), upto=high), low == high and len(set(texts)) == 1


def _name_bounds(column: str, one: Filter) -> tuple[PushedBounds, bool] | None:
    if isinstance(one, EqualTo | EqualNullSafe):
        names = [one.value]
    elif isinstance(one, In):
        names = list(one.value)
    else:
        return None
    if not names or not all(isinstance(n, str) for n in names):
        return None
    if column == "topic":
        return PushedBounds().with_topics(names), True
    return PushedBounds().with_streams(names), True

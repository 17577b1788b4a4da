"""atlasbus's errors reach the user near the top of what Spark shows, not under a traceback."""

from __future__ import annotations

from typing import Any

import pytest


def _lines_before(message: str, needle: str) -> int:
    lines = message.splitlines()
    return next(i for i, line in enumerate(lines) if needle in line)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            lambda spark: (
                spark.read.format("atlasbus").option("topics", "a").option("pageSize", "abc").load()
            ),
            "atlasbus.errors.ConfigurationError: option 'pageSize' must be a positive integer, "
            "got 'abc'",
        ),
        (
            lambda spark: (
                spark.readStream.format("atlasbus")
                .option("topics", "a")
                .option("maxEntriesPerTrigger", "-1")
                .load()
            ),
            "atlasbus.errors.ConfigurationError: option 'maxEntriesPerTrigger' must be a "
            "positive integer, got '-1'",
        ),
        (
            lambda spark: (
                spark.range(1)
                .selectExpr("'{}' as payload", "1 as nope")
                .write.format("atlasbus")
                .option("topic", "t")
                .mode("append")
                .save()
            ),
            "atlasbus.errors.ConfigurationError: the atlasbus sink does not accept column(s) "
            "'nope'.",
        ),
    ],
    ids=["batch read option", "stream read option", "sink column"],
)
def test_the_useful_line_comes_right_after_sparks_own(spark: Any, make: Any, expected: str) -> None:
    with pytest.raises(Exception) as caught:
        make(spark)
    message = str(caught.value)
    # Spark's first line, "Traceback", one frame (two lines), then ours: 14 lines before
    assert _lines_before(message, expected) <= 3, message
    assert len(message.splitlines()) <= 6, message

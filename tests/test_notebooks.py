"""The notebooks run top to bottom (as CI runs them), quietly, and leave nothing behind.

Each test runs its notebook in a fresh kernel whose ``$TMPDIR`` is a folder of its own, which
must be empty afterwards. The dead-letter explorer runs several times in one kernel (as "Run
All" again does): on its own sample, then on a table made here, where it must change nothing
until ``REPLAY = True`` and then replay each dead letter once. test_demo.py also runs the
explorer on the tables `atlasbus demo` leaves behind.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import pyarrow as pa
import redis

from atlasbus.dead_letters import DeadLetter, DeadLetterTable
from notebook_runner import (
    NOTEBOOKS,
    assert_ran_quietly,
    execute_notebook,
    images,
    notebook_runs,
    printed_lines,
    text,
)


def private_tmp(tmp_path: Path) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


def test_quick_start_runs_quietly_and_leaves_no_temporary_folder(
    redis_url: str, tmp_path: Path
) -> None:
    tmp = private_tmp(tmp_path)
    notebook = execute_notebook(
        "quick_start.ipynb", {"REDIS_URL": redis_url, "TMPDIR": str(tmp)}, tmp_path
    )
    assert_ran_quietly(notebook)
    # No "Failed to cancel job group" when the running query stops.
    assert printed_lines(notebook, "live.stop()", ("stdout", "stderr")) == []
    assert list(tmp.iterdir()) == []


# --- the dead-letter explorer ------------------------------------------------------------------

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def demo_like_letters(stream: str) -> list[DeadLetter]:
    """13 dead letters over 30 s, as a short demo leaves: 3 replayable (a word for a priority),
    10 not (their payload is not JSON)."""
    letters = []
    for i in range(13):
        replayable = i % 4 == 1
        payload = f'{{"n": {i}}}' if replayable else f'{{"n": {i}'
        letters.append(
            DeadLetter.for_entry(
                "source-decode",
                "invalid-integer" if replayable else "invalid-json",
                "field 'priority' must be a decimal integer, got 'high'"
                if replayable
                else "field 'payload' is not valid JSON",
                stream=stream,
                # published 1.5 s before it was dead-lettered: the chart bins by this time
                entry_id=f"{int((T0 + timedelta(seconds=2.5 * i - 1.5)).timestamp() * 1000)}-0",
                topic="orders",
                payload=payload,
                fields={"payload": payload, "priority": "high" if replayable else "3"},
                at=T0 + timedelta(seconds=2.5 * i),
            )
        )
    return letters


def table_state(table: DeadLetterTable) -> tuple[int, pa.Table]:
    return table.version(), table.to_arrow(all_rows=True).sort_by("dead_letter_id")


def test_dead_letter_explorer_changes_nothing_until_asked_and_replays_once(
    redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:orders"
    path = tmp_path / "dead_letters"
    table = DeadLetterTable(path)
    table.append(demo_like_letters(stream))
    untouched = table_state(table)
    tmp = private_tmp(tmp_path)
    given = {"TABLE": str(path)}
    runs = [{}, given, given, {**given, "REPLAY": True}, {**given, "REPLAY": True}]
    env = {"REDIS_URL": redis_url, "TMPDIR": str(tmp)}
    executed = notebook_runs("dead_letter_explorer.ipynb", env, tmp_path, runs)

    # Its own sample, in a temporary folder on a private redis-server: a dry run only.
    sample = next(executed)
    assert_ran_quietly(sample)
    assert len(images(sample)) == 1
    shown = text(sample)
    assert "2 would be replayed; 0 already replayed; 0 not replayable" in shown
    assert "REPLAY = False: nothing published, the table is unchanged" in shown

    # Twice on the given table with REPLAY = False: both succeed, nothing changes.
    for _ in range(2):
        notebook = next(executed)
        assert_ran_quietly(notebook)
        assert len(images(notebook)) == 1
        shown = text(notebook)
        assert "13 dead letters" in shown
        if "reading with delta-spark" in shown:  # the jars loaded: Spark SQL's history too
            assert "dead letters at version 1: 13" in shown
        assert "16 windows of 2s" in shown  # 30 s of dead letters: not two bars
        assert "3 would be replayed; 0 already replayed; 0 not replayable" in shown
        assert table_state(table) == untouched
        assert r.exists(stream) == 0

    # REPLAY = True: each chosen dead letter published once, recorded once.
    notebook = next(executed)
    assert "3 replayed; 0 refused" in text(notebook)
    replayed = table.to_pandas("replay_count > 0")
    assert sorted(replayed["replay_count"]) == [1, 1, 1]
    assert set(replayed["reason"]) == {"invalid-integer"}
    assert sorted(replayed["last_replay_entry_id"]) == [e[0].decode() for e in r.xrange(stream)]
    after_replay = table_state(table)

    # And again: refused as already replayed, nothing published, the table unchanged.
    notebook = next(executed)
    shown = text(notebook)
    assert "0 would be replayed; 3 already replayed" in shown
    assert "0 replayed; 3 refused" in shown
    assert table_state(table) == after_replay
    assert r.xlen(stream) == 3

    assert next(executed, None) is None  # the kernel shuts down: its temporary files go
    assert list(tmp.iterdir()) == []


def test_dead_letter_explorer_runs_without_the_delta_jars(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """``ATLASBUS_DELTA_JARS=off``: no Delta Lake jars, the explorer reads through delta-rs."""
    path = tmp_path / "dead_letters"
    DeadLetterTable(path).append(demo_like_letters(f"{prefix}:orders"))
    env = {
        "REDIS_URL": redis_url,
        "TMPDIR": str(private_tmp(tmp_path)),
        "ATLASBUS_DELTA_JARS": "off",
    }
    notebook = execute_notebook(
        "dead_letter_explorer.ipynb", env, tmp_path, parameters={"TABLE": str(path)}
    )
    assert_ran_quietly(notebook)
    shown = text(notebook)
    assert "reading with delta-rs (no jars)" in shown
    assert "13 dead letters" in shown
    assert "history and time travel need delta-spark" in shown


def test_explorer_bins_fit_the_span() -> None:
    """The chart's window width, from the notebook's own cell: 10-30 bars from seconds to weeks."""
    notebook = nbformat.read(NOTEBOOKS / "dead_letter_explorer.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if "def bin_width" in c.source]
    names: dict[str, Any] = {}
    exec(cell.source, names)
    bin_width, windows = names["bin_width"], names["windows"]
    first = pd.Timestamp(T0)
    assert bin_width(first, first) == "1s"
    assert bin_width(first, first + pd.Timedelta("30s")) == "2s"
    for span in ["20s", "2min", "10min", "1h", "6h", "1D", "3D", "14D", "90D"]:
        width = bin_width(first, first + pd.Timedelta(span))
        assert 10 <= len(windows(first, first + pd.Timedelta(span), width)) <= 30, (span, width)

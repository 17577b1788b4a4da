"""The notebooks run top to bottom (as CI runs them), quietly, and leave nothing behind.

Each test runs its notebook in a fresh kernel whose ``$TMPDIR`` is a folder of its own, which
must be empty afterwards. The dead-letter explorer runs several times in one kernel (as "Run
All" again does): on its own sample, then on a table made here, where it must change nothing
until ``REPLAY = True`` and then replay each dead letter once. test_demo.py also runs the
explorer on the tables `atlasbus demo` leaves behind.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import pyarrow as pa
import redis
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

from atlasbus.dead_letters import DeadLetter, DeadLetterTable

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"

JVM_INCUBATOR_WARNING = "WARNING: Using incubator modules: jdk.incubator.vector"
"""Printed by the JVM itself for the --add-modules flag Spark's launcher always passes: the one
start-up line no log configuration can hide (pyspark_atlasbus.session)."""


def notebook_runs(
    name: str,
    env: Mapping[str, str],
    workdir: Path,
    runs: Sequence[Mapping[str, Any]] = ({},),
    timeout: int = 300,
) -> Iterator[nbformat.NotebookNode]:
    """Run ``notebooks/name`` once per item of ``runs``, all in one fresh kernel that sees
    ``env``, yielding each executed copy; a failing cell raises.

    An item's values replace the settings of the cell tagged ``parameters`` (papermill's
    convention): they are assigned in a cell inserted after it. The kernel stays up while the
    caller looks at what a run did, and is shut down when the iteration ends.
    """
    original = nbformat.read(NOTEBOOKS / name, as_version=4)
    with ExitStack() as stack:
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)  # the kernel is started with this process's environment
        try:
            client = NotebookClient(
                copy.deepcopy(original),
                timeout=timeout,
                kernel_name="python3",
                resources={"metadata": {"path": str(workdir)}},
            )
            client.reset_execution_trackers()
            stack.enter_context(client.setup_kernel())
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        for parameters in runs:
            notebook = with_parameters(original, parameters)
            client.nb = notebook
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
            yield notebook


def with_parameters(
    notebook: nbformat.NotebookNode, parameters: Mapping[str, Any]
) -> nbformat.NotebookNode:
    notebook = copy.deepcopy(notebook)
    if parameters:
        tagged = [
            i for i, c in enumerate(notebook.cells) if "parameters" in c.metadata.get("tags", [])
        ]
        assert tagged, "the notebook has no cell tagged 'parameters'"
        source = "\n".join(f"{key} = {value!r}" for key, value in parameters.items())
        notebook.cells.insert(tagged[0] + 1, new_code_cell(source))
    return notebook


def execute_notebook(
    name: str,
    env: Mapping[str, str],
    workdir: Path,
    timeout: int = 300,
    *,
    parameters: Mapping[str, Any] | None = None,
) -> nbformat.NotebookNode:
    """Run ``notebooks/name`` once in a fresh kernel that sees ``env``; a failing cell raises."""
    (notebook,) = notebook_runs(name, env, workdir, [parameters or {}], timeout)
    return notebook


def outputs(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    ]


def images(notebook: nbformat.NotebookNode) -> list[str]:
    return [o["data"]["image/png"] for o in outputs(notebook) if "image/png" in o.get("data", {})]


def text(notebook: nbformat.NotebookNode) -> str:
    parts = []
    for output in outputs(notebook):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def printed_lines(
    notebook: nbformat.NotebookNode, source_part: str, streams: tuple[str, ...] = ("stderr",)
) -> list[str]:
    """The lines the code cell whose source contains ``source_part`` wrote to ``streams``."""
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and source_part in c.source]
    return [
        line
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") in streams
        for line in output["text"].splitlines()
    ]


def assert_ran_quietly(notebook: nbformat.NotebookNode) -> None:
    """Every code cell ran, none failed, and starting Spark printed nothing but the JVM's line."""
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code_cells)
    assert not [o for o in outputs(notebook) if o.get("output_type") == "error"]
    start = printed_lines(notebook, "local_session(")
    assert [line for line in start if line != JVM_INCUBATOR_WARNING] == []
    assert not re.search(r"\bWARN\b|log4j|Setting default log level", text(notebook))


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
                entry_id=f"{1000 + i}-0",
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

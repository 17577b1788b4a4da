"""``atlasbus dlq compact`` without Spark: files a failed writer left, errors that name the flag."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from atlasbus.cli import dlq as dlq_cli
from atlasbus.dead_letters import DeadLetter, DeadLetterTable
from atlasbus.dead_letters.maintenance import compact, parquet_files_on_disk


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = dlq_cli.main(["dlq", "compact", *argv])
    except SystemExit as exc:  # argparse: a bad argument
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def table(tmp_path: Path) -> DeadLetterTable:
    dlq = DeadLetterTable(tmp_path / "dead_letters")
    for i in range(5):
        dlq.append([DeadLetter.for_row("too-big", f"row {i}", write_id="w", row=i)])
    return dlq


def test_full_also_deletes_a_file_no_version_references(
    table: DeadLetterTable, capsys: pytest.CaptureFixture[str]
) -> None:
    (live,) = [p for p in os.listdir(table.uri) if p.endswith(".parquet")][:1]
    orphan = Path(table.uri) / "part-00000-left-by-a-failed-task-c000.snappy.parquet"
    shutil.copy(Path(table.uri) / live, orphan)
    assert compact(table.uri, retention_hours=0).files_vacuumed == 5  # the orphan stays
    assert orphan.exists()

    code, out, _ = run(capsys, "--table", table.uri, "--retain-hours", "0", "--full")

    assert code == 0
    assert out.splitlines()[:2] == [
        f"compacted {table.uri}: 1 live file(s) -> 1 (0 rewritten), 5 row(s), version 10",
        "vacuumed 1 file(s) removed more than 0 h ago",
    ]
    assert out.splitlines()[-1] == "parquet files in the folder: 2 -> 1"
    assert not orphan.exists()
    assert table.to_arrow().num_rows == 5


HOURS = "argument --retain-hours: must be a number of hours from 0 to 8760000 (1,000 years)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--retain-hours", "-1"], f"{HOURS}, got '-1'"),
        (["--retain-hours", "a day"], f"{HOURS}, got 'a day'"),
        (["--retain-hours", "nan"], f"{HOURS}, got 'nan'"),
        # an OverflowError traceback after OPTIMIZE had committed, before
        (["--retain-hours", "inf"], f"{HOURS}, got 'inf'"),
        (["--retain-hours", "1e300"], f"{HOURS}, got '1e300'"),
    ],
)
def test_bad_retention_names_the_flag(
    table: DeadLetterTable, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, "--table", table.uri, *argv)
    assert code == 2
    assert err.splitlines()[-1] == f"atlasbus dlq compact: error: {message}"


def test_no_table_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--table", str(tmp_path / "nope"))
    assert (code, out) == (2, "")
    assert err == f"atlasbus dlq: error: no Delta table at '{tmp_path / 'nope'}': check the path\n"
    assert parquet_files_on_disk(tmp_path) == 0

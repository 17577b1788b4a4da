"""The ``atlasbus`` command starts without Spark: its entry point is in the core, and each
command loads what it needs only when it runs (``benchmarks/bench_cli_start.py`` times it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from atlasbus.cli import dlq as dlq_cli
from atlasbus.dead_letters.table import SUMMARY_BY

HEAVY = ("pyspark", "deltalake", "pyarrow", "numba", "pandas", "redis")


def imported_modules(*argv: str) -> set[str]:
    """The top-level packages ``python -X importtime -m atlasbus.cli *argv`` imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "atlasbus.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize(
    "argv",
    [
        ("--version",),
        ("--help",),
        ("status", "--help"),
        ("trim", "--help"),
        ("dlq", "show", "--help"),
        ("dlq", "compact", "--help"),
        ("demo", "--help"),
        ("spark-home", "--help"),
    ],
)
def test_the_command_line_starts_without_spark_delta_or_arrow(argv: tuple[str, ...]) -> None:
    imported = imported_modules(*argv)
    assert "atlasbus" in imported
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_the_adapter_entry_point_still_runs() -> None:
    """``python -m pyspark_atlasbus.cli`` (the entry point before it moved) still works."""
    done = subprocess.run(
        [sys.executable, "-m", "pyspark_atlasbus.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("atlasbus ")


def test_dlq_summary_groups_as_the_table_does_by_default() -> None:
    assert dlq_cli.SUMMARY_BY == SUMMARY_BY

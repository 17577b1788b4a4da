"""`atlasbus demo` end to end: its printed summary matches the tables it leaves behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable

from atlasbus.dead_letters import DeadLetterTable


def _number(label: str, text: str) -> int:
    match = re.search(rf"^{re.escape(label)}:\s+(\d+)", text, re.MULTILINE)
    assert match, f"no '{label}' line in:\n{text}"
    return int(match.group(1))


def test_demo_summary_matches_its_tables(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyspark_atlasbus.cli",
            "demo",
            "--url",
            redis_url,
            "--duration",
            "6",
            "--rate",
            "600",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = done.stdout
    published = _number("published entries", summary)
    malformed = _number("  of which malformed", summary)
    events = _number("events written", summary)
    dead = _number("dead letters", summary)

    assert published > 1000 and malformed > 0
    assert DeltaTable(str(out / "events")).count() == events
    table = DeadLetterTable(str(out / "dead_letters"))
    frame = table.to_pandas()
    assert len(frame) == dead == malformed
    assert set(frame["stage"]) == {"source-decode"}
    assert frame["dead_letter_id"].is_unique
    assert events + dead == published
    assert "every entry accounted for" in summary


def test_demo_help_reads_well() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pyspark_atlasbus.cli", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    for option in ("--url", "--duration", "--rate", "--output", "--keep"):
        assert option in done.stdout

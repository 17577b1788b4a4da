"""What every benchmark shares: its command line, and the JSON and chart it writes to
benchmarks/results/, with what it records of its run."""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_report(
    path: Path, report: dict[str, Any], load_before: Sequence[float], load_after: Sequence[float]
) -> None:
    """Write ``report`` to ``path`` with the run's load average, machine, date and command.

    The load averages are the caller's, read before its first and after its last measurement:
    the machines are shared, and a figure is read against how busy they were.
    """
    report = {
        **report,
        "load_average_before_after": [round(x, 2) for x in (*load_before, *load_after)],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": f"python benchmarks/{Path(sys.argv[0]).name} {' '.join(sys.argv[1:])}".strip(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


@functools.cache
def pyplot() -> Any:
    """matplotlib's pyplot drawing to files (no display), or None, said once, when
    matplotlib is not installed: a benchmark's figures matter more than its chart."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no chart drawn")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line, its module docstring (commands and all) as ``--help``."""
    return argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def save_chart(figure: Any, path: Path, dpi: int = 110) -> None:
    """Lay ``figure`` out, write it to ``path`` as a PNG and free it."""
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)


def chart_note(path: Path) -> str:
    """ ", chart in PATH" for a run's closing line, or nothing when no chart could be drawn."""
    return f", chart in {path}" if pyplot() is not None else ""


def results_for(base: Path, rows: int) -> Path:
    """``base`` (NAME.json) for 1M entries; NAME-5M.json and the like for other lengths."""
    if rows == 1_000_000:
        return base
    size = f"{rows // 1_000_000}M" if rows % 1_000_000 == 0 else str(rows)
    return base.with_name(f"{base.stem}-{size}{base.suffix}")

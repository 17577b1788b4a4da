"""The notebooks run top to bottom against a private redis-server, and the chart renders."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"


def _execute(name: str, redis_url: str, tmp_path: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    os.environ["REDIS_URL"] = redis_url
    try:
        NotebookClient(
            notebook,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": str(tmp_path)}},
        ).execute()
    finally:
        os.environ.pop("REDIS_URL", None)
    return notebook


def test_quick_start_runs(redis_url: str, tmp_path: Path) -> None:
    notebook = _execute("quick_start.ipynb", redis_url, tmp_path)
    assert all(
        cell.get("outputs") is not None for cell in notebook.cells if cell.cell_type == "code"
    )


@pytest.mark.parametrize("name", ["dead_letter_explorer.ipynb"])
def test_dead_letter_explorer_runs_and_draws_its_chart(
    name: str, redis_url: str, tmp_path: Path
) -> None:
    notebook = _execute(name, redis_url, tmp_path)
    images = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
    assert len(images) == 1
    text = "".join(
        output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", [])
    )
    assert "would be replayed" in text

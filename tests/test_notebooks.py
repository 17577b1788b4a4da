"""The notebooks run top to bottom (as CI runs them), and the chart cell draws its chart.

Here each notebook makes its own data on the session's private redis-server; test_demo.py also
runs the dead-letter explorer on the tables `atlasbus demo` leaves behind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"


def execute_notebook(
    name: str, env: Mapping[str, str], workdir: Path, timeout: int = 300
) -> nbformat.NotebookNode:
    """Run ``notebooks/name`` in a fresh kernel that sees ``env``; a failing cell raises."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel is started with this process's environment
    try:
        NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(workdir)}},
        ).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
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


def test_quick_start_runs(redis_url: str, tmp_path: Path) -> None:
    notebook = execute_notebook("quick_start.ipynb", {"REDIS_URL": redis_url}, tmp_path)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code_cells)
    assert not [o for o in outputs(notebook) if o.get("output_type") == "error"]


def test_dead_letter_explorer_on_its_own_table(redis_url: str, tmp_path: Path) -> None:
    notebook = execute_notebook("dead_letter_explorer.ipynb", {"REDIS_URL": redis_url}, tmp_path)
    assert len(images(notebook)) == 1
    shown = text(notebook)
    assert "2 would be replayed; 0 refused" in shown
    assert shown.count("replayed ") >= 2
    assert "0 replayed the second time; 2 refused as already replayed" in shown

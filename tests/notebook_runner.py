"""Running the notebooks in notebooks/ with nbclient, for the notebook and demo tests."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

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

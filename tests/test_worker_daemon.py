"""Python workers forked with atlasbus's executor code loaded (atlasbus.preload, worker_daemon).

The daemon is started here as Spark starts it (``python -m <module> pyspark.worker``, the
secret in its environment, its port read from its standard output) and asked for a worker
as Spark's JVM asks; the session's test checks that ``local_session`` makes Spark use it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

SECRET = "atlasbus-test-secret"

# What a fresh process loads for a read and a write after the preload (printed as JSON):
# modules of the heavy packages and compiled signatures that the preload had not loaded.
AFTER_PRELOAD = textwrap.dedent(
    """
    import json, sys
    from numba.core.registry import CPUDispatcher
    from atlasbus.preload import load_executor_code

    HEAVY = ("atlasbus", "numba", "llvmlite", "pandas", "pyarrow", "numpy", "redis", "hiredis")

    def loaded():
        modules = {m for m in sys.modules if m.split(".")[0] in HEAVY}
        signatures = {
            f"{name}.{attr}": len(value.signatures)
            for name, module in list(sys.modules.items()) if name.startswith("atlasbus")
            for attr, value in vars(module).items() if isinstance(value, CPUDispatcher)
        }
        return modules, signatures

    load_executor_code()
    modules, signatures = loaded()

    import pyarrow as pa
    from atlasbus.publishing.encoder import encode_batch
    from atlasbus.model.entry_id import EntryId
    from atlasbus.planning.batch_plan import ReadRange
    from atlasbus.reading.range_reader import read_range
    from atlasbus.options.sink import parse_sink_options
    from atlasbus.options.source import parse_source_options

    url, stream, topic = sys.argv[1:4]
    options = parse_source_options({"url": url, "streamPrefix": stream.split(":")[0], "topics": topic})
    whole = ReadRange(stream, topic, EntryId(0, 0), EntryId(2**63, 0))
    batches = list(read_range(options, whole))
    raw = parse_source_options({"url": url, "streams": stream, "format": "raw"})
    raw_batches = list(read_range(raw, whole))
    rows = pa.RecordBatch.from_pydict({"payload": ['{"a": 1}', '{"b": [2]}']})
    encode_batch(rows, parse_sink_options({"url": url, "topic": topic}), enqueued_time=1.0)
    modules_after, signatures_after = loaded()
    print(json.dumps({
        "rows": sum(b.num_rows for b in batches),
        "raw_rows": sum(b.num_rows for b in raw_batches),
        "errors": sum(b.num_rows - b.column("error").null_count for b in batches),
        "compiled": sorted(k for k, n in signatures.items() if n),
        "new_modules": sorted(modules_after - modules),
        "new_signatures": sorted(
            k for k, n in signatures_after.items() if n != signatures.get(k, 0)
        ),
    }))
    """
)


def test_after_the_preload_a_read_and_a_write_load_nothing_more(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    """What a forked worker inherits is all its first read and write need: no module of
    atlasbus, pandas, numba, pyarrow or redis-py, and no compiled loop's machine code, is
    loaded after ``load_executor_code`` (in a fresh interpreter, as the daemon runs it)."""
    stream = f"{prefix}:orders"
    good = {
        "topic": "orders",
        "priority": "3",
        "payload": json.dumps({"order": 1, "lines": [{"sku": "A", "qty": 1}]}),
        "correlation_id": "c-1",
        "tracing": json.dumps({"trace_id": "t1"}),
        "metadata": "{}",
        "delivery_attempts": "0",
        "enqueued_time": "1700000000.5",
    }
    for index in range(30):
        r.xadd(stream, {**good, "payload": json.dumps({"order": index})})
    r.xadd(stream, {**good, "payload": "not json", "priority": "urgent"})
    r.xadd(stream, {"something": "else entirely"})

    done = subprocess.run(
        [sys.executable, "-c", AFTER_PRELOAD, redis_url, stream, "orders"],
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rows"] == report["raw_rows"] == 32
    assert report["errors"] == 2
    # the ASCII check, the cutter's loops, the entry IDs' times, the maps' parser, the JSON objects' check,
    # the integers' and the seconds' readers, the raw fields' escape check and interleaving, the
    # walk into names and values, its gather and the fields picked from it by name. Compiled
    # from scratch (numba's cache cold) their helpers show as compiled too: a subset, then.
    assert set(report["compiled"]) >= {
        "atlasbus.decoding.kernels.ascii_text._all_ascii",
        "atlasbus.decoding.kernels.flat_json_maps._flat_maps",
        "atlasbus.decoding.kernels.id_times._id_micros",
        "atlasbus.decoding.kernels.json_objects._all_objects",
        "atlasbus.decoding.kernels.pick_fields._last_places",
        "atlasbus.decoding.kernels.plain_numbers._read_int32",
        "atlasbus.decoding.kernels.plain_numbers._read_micros",
        "atlasbus.decoding.kernels.raw_field_maps._has_escape_text",
        "atlasbus.decoding.kernels.raw_field_maps._interleave",
        "atlasbus.decoding.kernels.cut_any_layout._gather_spans",
        "atlasbus.decoding.kernels.cut_any_layout._walk_pairs",
        "atlasbus.decoding.kernels.cut_one_layout._gather",
        "atlasbus.decoding.kernels.cut_one_layout._number",
        "atlasbus.decoding.kernels.cut_one_layout._walk",
    }
    assert report["new_modules"] == []
    assert report["new_signatures"] == []


@contextmanager
def daemon(module: str, pythonpath: list[str] | None = None) -> Iterator[tuple[int, Any]]:
    """A worker daemon started as Spark's JVM starts it; yields its port and its process."""
    environment = {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": SECRET}
    if pythonpath is not None:
        environment["PYTHONPATH"] = os.pathsep.join([*pythonpath, *sys.path])
    process = subprocess.Popen(
        [sys.executable, "-m", module, "pyspark.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    )
    try:
        assert process.stdout is not None
        head = process.stdout.read(4)
        assert len(head) == 4, process.stderr.read().decode() if process.stderr else ""
        yield struct.unpack(">i", head)[0], process
    finally:
        if process.stdin is not None:
            process.stdin.close()  # Spark's way to stop the daemon
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(
                "the daemon did not end when its standard input was closed"
            ) from None


def forked_worker(port: int) -> tuple[int, socket.socket]:
    """Ask the daemon for a worker and pass its secret check; the worker's pid and socket."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=60)
    pid = struct.unpack(">i", _receive(connection, 4))[0]
    secret = SECRET.encode()
    connection.sendall(struct.pack(">i", len(secret)) + secret)
    length = struct.unpack(">i", _receive(connection, 4))[0]
    assert _receive(connection, length) == b"ok"
    return pid, connection


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        assert chunk, "the daemon closed the connection"
        data += chunk
    return data


def mapped_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_a_worker_forked_by_the_daemon_has_numba_and_pandas_before_its_first_task() -> None:
    """The daemon's port is the first thing on its standard output (the preload wrote nothing
    there), and a worker it forks, before it is given any task, already maps numba's LLVM
    and pandas' compiled libraries: they came from the daemon."""
    with daemon("pyspark_atlasbus.worker_daemon") as (port, _):
        pid, connection = forked_worker(port)
        with connection:
            maps = mapped_libraries(pid)
    assert "libllvmlite" in maps
    assert "/pandas/_libs/" in maps


def test_pysparks_own_daemon_forks_workers_without_them() -> None:
    """The comparison that makes the test above mean something: pyspark's daemon's workers
    load neither until a task imports them."""
    with daemon("pyspark.daemon") as (port, _):
        pid, connection = forked_worker(port)
        with connection:
            maps = mapped_libraries(pid)
    assert "libllvmlite" not in maps
    assert "/pandas/_libs/" not in maps


def test_a_daemon_whose_preload_fails_says_so_and_still_forks_workers(tmp_path: Path) -> None:
    """A preload that raises (here redis-py cannot be imported) must not cost the executor its
    Python workers: the daemon reports it on standard error and serves as pyspark's does."""
    broken = tmp_path / "redis"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('redis is broken on this executor')\n")
    with daemon("pyspark_atlasbus.worker_daemon", pythonpath=[str(tmp_path)]) as (port, process):
        pid, connection = forked_worker(port)
        with connection:
            maps = mapped_libraries(pid)
    assert "libllvmlite" not in maps
    assert process.stderr is not None
    stderr = process.stderr.read().decode()
    assert "atlasbus: the worker daemon could not preload atlasbus's executor code" in stderr
    assert "redis is broken on this executor" in stderr


@pytest.mark.spark
def test_the_local_session_forks_its_workers_from_atlasbus_daemon(spark: Any) -> None:
    """``local_session`` sets ``spark.python.daemon.module``: a task's worker is the child of
    atlasbus's daemon, which has numba's LLVM mapped."""

    def parent_of_this_worker(_: Any) -> tuple[str, bool]:
        import os

        parent = os.getppid()
        with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
            arguments = cmdline.read().split(b"\0")
        with open(f"/proc/{parent}/maps") as maps:
            return " ".join(a.decode() for a in arguments if a), "libllvmlite" in maps.read()

    context = spark.sparkContext  # type: ignore[attr-defined]
    [(command, llvm_mapped)] = context.parallelize([0], 1).map(parent_of_this_worker).collect()
    assert "-m pyspark_atlasbus.worker_daemon pyspark.worker" in command
    assert llvm_mapped


@pytest.mark.spark
def test_a_workers_collector_skips_what_the_daemon_loaded(spark: Any) -> None:
    """pyspark's worker collects garbage fully after each task: the modules and compiled code
    the daemon loaded are frozen out of that collection (otherwise 75-80 ms of CPU a task),
    and only the worker's own objects are left to examine."""

    def collector_view(_: Any) -> tuple[int, int]:
        import gc

        return gc.get_freeze_count(), len(gc.get_objects())

    context = spark.sparkContext  # type: ignore[attr-defined]
    [(frozen, examined)] = context.parallelize([0], 1).map(collector_view).collect()
    assert frozen > 100_000  # numba, pandas, pyarrow and atlasbus, loaded by the daemon
    assert examined < frozen / 2

"""The SPARK_HOME whose pyspark.zip is pyspark unzipped with its bytecode
(``pyspark_atlasbus.spark_home``): Python loads pyspark from its bytecode, everything else is the
original SPARK_HOME's, concurrent builders agree, and the suite's own session runs every Python
process from it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark

from pyspark_atlasbus.cache_dir import cache_dir
from pyspark_atlasbus.spark_home import (
    ZIP,
    has_bytecode,
    spark_home_with_bytecode,
    use_spark_home_with_bytecode,
)

INSTALLED = Path(pyspark.__file__).parent  # pip's SPARK_HOME: the package itself
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
COMMAND = [sys.executable, "-m", "atlasbus.cli", "spark-home"]


def run_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``atlasbus spark-home`` with ``args`` (and ``env`` added to the environment), as a user
    runs it: its exit status and output."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=environment)


def test_the_copy_s_pyspark_zip_is_imported_from_bytecode(tmp_path: Path) -> None:
    home = spark_home_with_bytecode(INSTALLED, tmp_path)
    assert spark_home_with_bytecode(INSTALLED, tmp_path) == home  # built once
    assert sorted(p.name for p in tmp_path.iterdir()) == [home.name]  # nothing half-built left
    assert (home / "jars").resolve() == (INSTALLED / "jars").resolve()
    assert (home / "bin").resolve() == (INSTALLED / "bin").resolve()
    py4j = next((INSTALLED / ZIP.parent).glob("py4j-*.zip"))
    assert (home / ZIP.parent / py4j.name).resolve() == py4j.resolve()
    assert has_bytecode(home) and not has_bytecode(INSTALLED)
    assert spark_home_with_bytecode(home, tmp_path / "elsewhere") == home  # no copy of a copy

    # as Spark starts a worker: its zips first on the path; in another time zone than the
    # build's, which must not make the bytecode stale; -v says where each module's code is from
    done = subprocess.run(
        [
            sys.executable,
            "-v",
            "-c",
            f"import pyspark, {RUNNER} as r; print(pyspark.__file__, r.main.__code__.co_filename)",
        ],
        env={
            **os.environ,
            "PYTHONPATH": f"{home / ZIP}{os.pathsep}{py4j}",
            "TZ": "Pacific/Kiritimati",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    shown = done.stdout.split()
    runner_source = home / ZIP / (RUNNER.replace(".", "/") + ".py")
    assert shown == [str(home / ZIP / "pyspark" / "__init__.py"), str(runner_source)]
    for source in (home / ZIP / "pyspark" / "__init__.py", runner_source):
        assert f"# code object from '{importlib.util.cache_from_source(str(source))}'" in (
            done.stderr
        )


def test_builders_at_the_same_time_agree_on_one_complete_copy(tmp_path: Path) -> None:
    command = list(COMMAND)
    # the installed one: once the suite's session has started, $SPARK_HOME is already a copy
    command += ["--spark-home", str(INSTALLED), "--cache", str(tmp_path)]
    builders = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [builder.communicate(timeout=300) for builder in builders]

    assert [builder.returncode for builder in builders] == [0, 0, 0], outputs
    printed = {out.strip() for out, _ in outputs}
    assert len(printed) == 1
    home = Path(printed.pop())
    assert home.parent == tmp_path.resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == [home.name]
    assert has_bytecode(home)


def test_the_command_says_what_is_wrong_with_its_spark_home(tmp_path: Path) -> None:
    done = run_command("--spark-home", str(tmp_path))

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"atlasbus spark-home: error: {tmp_path} (from --spark-home) has no "
        "python/lib/pyspark.zip: pass --spark-home a Spark installation (or pip's pyspark "
        "package directory)\n"
    )


def test_the_command_names_spark_home_from_the_environment(tmp_path: Path) -> None:
    done = run_command(env={"SPARK_HOME": str(tmp_path)})

    assert done.returncode == 2
    assert done.stderr == (
        f"atlasbus spark-home: error: {tmp_path} (from $SPARK_HOME) has no "
        "python/lib/pyspark.zip: pass --spark-home a Spark installation (or pip's pyspark "
        "package directory)\n"
    )


def test_without_a_writable_cache_spark_home_is_left_as_it_was(
    tmp_path: Path, monkeypatch: Any
) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    monkeypatch.setenv("ATLASBUS_CACHE_DIR", str(not_a_directory / "cache"))
    monkeypatch.setenv("SPARK_HOME", str(INSTALLED))

    why_not = use_spark_home_with_bytecode()

    assert os.environ["SPARK_HOME"] == str(INSTALLED)
    assert why_not is not None
    assert why_not.startswith(
        "atlasbus: Spark's Python processes compile pyspark at each start: no copy of "
        f"pyspark.zip with bytecode could be made under {not_a_directory / 'cache'} ("
    )
    assert why_not.endswith("set $ATLASBUS_CACHE_DIR to a writable directory to have one")


def test_the_cache_directory_is_atlasbus_s_own_or_the_one_set(monkeypatch: Any) -> None:
    monkeypatch.delenv("ATLASBUS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/someone")
    assert cache_dir() == Path("/var/cache/someone/atlasbus")
    monkeypatch.setenv("ATLASBUS_CACHE_DIR", "/srv/atlasbus-cache")
    assert cache_dir() == Path("/srv/atlasbus-cache")


def test_the_suite_s_session_starts_every_python_process_with_pyspark_s_bytecode(
    spark: Any,
) -> None:
    home = Path(os.environ["SPARK_HOME"])
    assert has_bytecode(home)
    # what Spark puts first on the path of every Python process it starts (runners too)
    path = spark._jvm.org.apache.spark.api.python.PythonUtils.sparkPythonPath()
    assert path.split(os.pathsep)[0] == str(home / ZIP)
    loaded = (
        spark.sparkContext.parallelize([0], 1)
        .map(lambda _: (__import__("pyspark").__file__, __import__("pyspark").__cached__))
        .collect()
    )
    source = home / ZIP / "pyspark" / "__init__.py"
    cached = Path(importlib.util.cache_from_source(str(source)))
    assert loaded == [(str(source), str(cached))]
    # PEP 552 flags: a hash-based .pyc whose source is never checked, so always used
    assert int.from_bytes(cached.read_bytes()[4:8], "little") == 0b01


def test_building_a_copy_removes_copies_of_spark_homes_that_are_gone(tmp_path: Path) -> None:
    gone = tmp_path / "gone-venv" / "pyspark"
    (gone / ZIP.parent).mkdir(parents=True)
    for name in ("jars", "bin"):
        (gone / name).mkdir()
    (gone / ZIP).write_bytes((INSTALLED / ZIP).read_bytes())
    cache = tmp_path / "cache"
    stale = spark_home_with_bytecode(gone, cache)
    for path in sorted(gone.parent.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()

    home = spark_home_with_bytecode(INSTALLED, cache)

    assert not stale.exists()
    assert sorted(p.name for p in cache.iterdir()) == [home.name]


def test_under_spark_submit_the_running_jvm_s_spark_home_is_left_alone(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import os\n"
        "from pyspark_atlasbus.session import local_session\n"
        "spark = local_session('under-spark-submit', delta=False)\n"
        "print('SPARK_HOME', os.environ['SPARK_HOME'])\n"
        "spark.stop()\n"
    )
    cache = tmp_path / "cache"
    environment = {**os.environ, "SPARK_HOME": str(INSTALLED), "ATLASBUS_CACHE_DIR": str(cache)}
    environment.pop("PYSPARK_GATEWAY_PORT", None)
    done = subprocess.run(
        [str(INSTALLED / "bin" / "spark-submit"), "--master", "local[1]", str(script)],
        env={**environment, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert f"SPARK_HOME {INSTALLED}\n" in done.stdout
    assert not cache.exists()  # nothing built for a JVM that was already running


def test_the_command_says_when_pyspark_zip_is_damaged(tmp_path: Path) -> None:
    damaged = tmp_path / "spark"
    (damaged / ZIP.parent).mkdir(parents=True)
    (damaged / ZIP).write_bytes(b"not a zip")
    cache = tmp_path / "cache"
    done = run_command("--spark-home", str(damaged), "--cache", str(cache))

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"atlasbus spark-home: error: cannot build under {cache}: File is not a zip file\n"
    )

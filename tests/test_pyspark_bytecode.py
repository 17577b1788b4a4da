"""The SPARK_HOME mirror of benchmarks/pyspark_bytecode.py: Python loads pyspark from its
zip's bytecode, and everything else is the installed SPARK_HOME's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from pyspark_bytecode import ZIP, installed_spark_home, spark_home_with_bytecode

INSTALLED = installed_spark_home()


def test_the_mirror_s_pyspark_zip_is_imported_from_bytecode(tmp_path: Path) -> None:
    home = spark_home_with_bytecode(INSTALLED, tmp_path)
    assert spark_home_with_bytecode(INSTALLED, tmp_path) == home  # built once
    assert not (tmp_path / f"{home.name}.partial").exists()
    assert (home / "jars").resolve() == (INSTALLED / "jars").resolve()
    assert (home / "bin").resolve() == (INSTALLED / "bin").resolve()
    py4j = next((INSTALLED / ZIP.parent).glob("py4j-*.zip"))
    assert (home / ZIP.parent / py4j.name).resolve() == py4j.resolve()

    # as Spark starts a worker: its zips first on the path; in another time zone than the
    # build's, which must not make the bytecode stale
    runner = "pyspark.sql.streaming.python_streaming_source_runner"
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import pyspark, {runner} as r; print(pyspark.__file__, r.main.__code__.co_filename)",
        ],
        env={
            **os.environ,
            "PYTHONPATH": f"{home / ZIP}{os.pathsep}{py4j}",
            "TZ": "Pacific/Kiritimati",
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert shown[0] == str(home / ZIP / "pyspark" / "__init__.pyc")
    # the code names its source as zipimport would: pyspark's worker recognises its own
    # frames in a traceback by these paths
    assert shown[1] == str(home / ZIP / runner.replace(".", "/")) + ".py"

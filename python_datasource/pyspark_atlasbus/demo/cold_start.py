"""What a first demo on a fresh install waits for, said as it happens (driver).

Two waits happen once per install: the Delta Lake jars' download from Maven Central (Ivy,
about 86 MB) and the compilation of atlasbus's column kernels (numba, then cached on disk).
The download is announced before Spark starts, with the megabytes fetched so far every few
seconds. The kernels are compiled by a child process started before Spark, so the
compilation runs beside the JVM's start instead of in each Python worker afterwards; the
demo waits for it before the workers' warm-up, saying so when it is not done yet.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

DELTA_DOWNLOAD_MB = 90  # 33 jars, 86 MB, and their Ivy metadata: what the cache gained, measured
PROGRESS_EVERY_S = 5.0
# The kernels' choice compiles and caches every kernel, or loads them (about 1 s when cached).
_COMPILE = (
    "from atlasbus.decoding.kernels.selection import compiled_kernels_usable; "
    "compiled_kernels_usable()"
)


def ivy_caches() -> list[Path]:
    """Where Spark 4's Ivy may download to: under Java's ``user.home`` (the account's home,
    whatever ``$HOME`` says, unless ``-Duser.home`` is passed in ``JAVA_TOOL_OPTIONS``), and
    under ``$HOME``."""
    homes = [Path.home(), Path(pwd.getpwuid(os.getuid()).pw_dir)]
    for option in os.environ.get("JAVA_TOOL_OPTIONS", "").split():
        if option.startswith("-Duser.home="):
            homes.append(Path(option.split("=", 1)[1]))
    return list(dict.fromkeys(home / ".ivy2.5.2" / "cache" for home in homes))


def ivy_cache() -> Path:
    """The first of ``ivy_caches``: the one named to the user."""
    return ivy_caches()[0]


def folder_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            continue  # a file Ivy is still renaming
    return total


def jars_to_download() -> bool:
    """Whether the session about to start will fetch the Delta Lake jars first."""
    from pyspark_atlasbus.delta_jars import delta_package, remembered_jars, turned_off

    if turned_off():
        return False
    coordinate = delta_package()
    return coordinate is not None and remembered_jars(coordinate) is None


class DownloadProgress:
    """Says, every ``PROGRESS_EVERY_S`` until stopped, how many MB Ivy has fetched."""

    def __init__(self, say: Callable[[str], None], folders: list[Path] | None = None) -> None:
        self.say = say
        self.folders = folders or ivy_caches()
        self.before = self._bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jar-download-progress", daemon=True)

    def __enter__(self) -> DownloadProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _bytes(self) -> int:
        return sum(folder_bytes(folder) for folder in self.folders if folder.exists())

    def fetched_mb(self) -> float:
        return max(0, self._bytes() - self.before) / 1e6

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_EVERY_S):
            self.say(f"  ... {self.fetched_mb():.0f} of about {DELTA_DOWNLOAD_MB} MB fetched")


class KernelCompilation:
    """atlasbus's column kernels compiled (or loaded) by a child process, beside Spark's start."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _COMPILE],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait(self, say: Callable[[str], None]) -> None:
        """Return once the kernels are on disk, saying so while it takes longer than a glance."""
        try:
            self.process.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            pass
        say(
            "compiling atlasbus's column kernels (numba, once per install: later runs load "
            "them from the disk) ..."
        )
        waited = 1.0
        while True:
            try:
                self.process.wait(timeout=PROGRESS_EVERY_S * 2)
                return
            except subprocess.TimeoutExpired:
                waited += PROGRESS_EVERY_S * 2
                say(f"  ... still compiling ({waited:.0f} s)")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

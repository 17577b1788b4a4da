"""What a first demo says while it waits (``pyspark_atlasbus.demo.cold_start``).

The waits themselves are measured by ``benchmarks/bench_demo_start.py`` on a fresh virtualenv
and home; these check what decides and says them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pyspark_atlasbus.delta_jars import delta_package, find_delta_jars
from pyspark_atlasbus.demo import cold_start
from pyspark_atlasbus.demo.cold_start import DownloadProgress, jars_to_download


def test_the_download_is_announced_only_where_the_jars_were_never_resolved(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if delta_package() is None:
        pytest.skip("delta-spark is not installed here: no jars to fetch")
    monkeypatch.setenv("ATLASBUS_CACHE_DIR", str(tmp_path / "fresh"))
    assert jars_to_download() is True  # a new user's cache: the session will fetch them
    monkeypatch.setenv("ATLASBUS_DELTA_JARS", "off")
    assert jars_to_download() is False  # turned off: nothing fetched


def test_resolved_jars_are_not_fetched_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if delta_package() is None:
        pytest.skip("delta-spark is not installed here: no jars to fetch")
    found = find_delta_jars()  # the test machine's own, resolved once (Ivy's cache)
    if found.jars is None:
        pytest.skip(f"the Delta Lake jars cannot be had here: {found.why}")
    assert jars_to_download() is False
    # a remembered list whose files were cleaned away means fetching again
    first = found.jars.split(",")[0].removeprefix("file://")
    monkeypatch.setenv("ATLASBUS_CACHE_DIR", str(tmp_path))
    listed = tmp_path / (str(found.coordinate).replace(":", "_") + ".jars")
    listed.write_text(f"file://{tmp_path / 'gone.jar'},file://{first}\n")
    assert jars_to_download() is True


def test_progress_says_the_megabytes_fetched_so_far(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cold_start, "PROGRESS_EVERY_S", 0.2)
    (tmp_path / "old.jar").write_bytes(b"x" * 3_000_000)  # there before: not counted
    said: list[str] = []
    with DownloadProgress(said.append, [tmp_path]):
        (tmp_path / "org.example").mkdir()
        (tmp_path / "org.example" / "new.jar").write_bytes(b"x" * 12_000_000)
        deadline = time.monotonic() + 10
        while not any("12 of about" in line for line in said) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "  ... 12 of about 90 MB fetched" in said
    count = len(said)
    time.sleep(0.5)
    assert len(said) == count  # stopped with the session's start

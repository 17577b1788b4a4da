"""Shared fixtures: one private redis-server and one local SparkSession per test session.

Markers, set here (see ``pytest_collection_modifyitems``) rather than by hand:

- ``spark``: the test needs Spark, so ``-m "not spark"`` never starts a JVM;
- ``slow``: the slow tier (``SLOW_FILES`` and the Spark tests of ``CHILD_SPARK_FILES``): crash
  loops, Redis restarts, deployments, and runs of the demo, the notebooks and the README, each
  starting processes of its own. ``python -m pytest`` (the everyday tier) leaves them out
  (pyproject's ``addopts``); ``python -m pytest -m slow`` runs them, and ``.ci/run`` runs both.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus.bus.connection import forget_clients
from atlasbus.sandbox.redis_server import RedisServer

# Spark starts Python workers with $PYSPARK_PYTHON; it must be this interpreter (and set before
# the JVM starts) or the workers cannot import atlasbus.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.pop("REDIS_URL", None)

# Tests that start Spark in a child process (no `spark` fixture to see): in these files every
# test is a Spark test except the ones named here, so a renamed or new test errs on the side of
# the `spark` tier.
CHILD_SPARK_FILES: dict[str, frozenset[str]] = {
    "test_crash_recovery.py": frozenset(),
    "test_demo.py": frozenset(
        {
            "test_demo_unreachable_url_is_one_line_that_says_what_to_do",  # fails before Spark
            "test_demo_bad_arguments",
            "test_help_reads_well",
            "test_traffic_malformed_entries_get_the_reason_they_were_made_for",
        }
    ),
    "test_notebooks.py": frozenset({"test_explorer_bins_fit_the_span"}),
    "test_sink_exactly_once.py": frozenset(),
    "test_readme.py": frozenset(),
}
# Single tests elsewhere that start Spark in a child process.
CHILD_SPARK_TESTS: frozenset[tuple[str, str]] = frozenset(
    {
        ("test_source_batch.py", "test_format_resolves_in_a_fresh_session_without_registering"),
        (
            "test_dead_letter_view.py",
            "test_without_the_jars_the_view_reads_through_delta_rs_and_says_what_to_do",
        ),
    }
)


# The slow tier besides the Spark tests of CHILD_SPARK_FILES: each starts, kills and restarts
# processes of its own (drivers, redis-servers, a Spark Connect server, other pyspark lines).
SLOW_FILES: frozenset[str] = frozenset(
    {
        "test_cluster_faults.py",  # clusters of their own, migrated and failed over
        "test_cluster_tools.py",  # the bus tools on a cluster of their own, a slot moved
        "test_acl.py",  # every feature under the documented least ACL, on db 0 and db 1
        "test_compiled_cache.py",  # numba compiles from scratch in child processes, per case
        "test_decode_fuzz.py",  # property-based: hundreds of generated pages per test
        "test_spark_home.py",  # builds copies of SPARK_HOME in child processes
        "test_delta_sink_crash.py",
        "test_delta_spark.py",  # the dead-letter table through delta-spark's jars, both engines
        "test_deployments.py",
        "test_docs_code_runs.py",  # runs the docs' Python blocks on Spark
        "test_no_credentials_leak.py",  # runs the demo, the CLI and queries with one password
        "test_operations_under_crash.py",
        "test_redis_restart.py",
        "test_redis_topologies.py",  # a 6-node cluster and a Sentinel set-up, twice each
        "test_sentinel_failover.py",  # a Sentinel set-up failed over under a running query
        "test_sink_dead_letters_under_crash.py",
        "test_spark_lines.py",
    }
)


# Single tests of the slow tier: soak and concurrency runs (hundreds of batches or commits).
SLOW_TESTS: frozenset[tuple[str, str]] = frozenset(
    {
        ("test_cluster.py", "test_a_streaming_pipeline_on_the_cluster_publishes_each_entry_once"),
        ("test_compiled_kernels.py", "test_a_reply_ending_at_a_guard_page_walks_within_its_bytes"),
        # 26 s in CI: a header claiming two billion fields, also handed to hiredis
        (
            "test_compiled_kernels.py",
            "test_an_entry_claiming_two_billion_fields_waits_for_their_bytes",
        ),
        # two sink writers and a replay at once, on Spark: a concurrency run
        (
            "test_dead_letter_replay.py",
            "test_two_writers_and_a_replay_at_once_lose_and_duplicate_nothing",
        ),
        (
            "test_compiled_kernels.py",
            "test_a_header_claiming_a_trillion_entries_allocates_for_a_few",
        ),
        ("test_source_batch.py", "test_format_resolves_in_a_fresh_session_without_registering"),
        (
            "test_dead_letter_view.py",
            "test_without_the_jars_the_view_reads_through_delta_rs_and_says_what_to_do",
        ),
        ("test_cluster.py", "test_the_documented_acl_with_its_cluster_line_reads_and_publishes"),
        (
            "test_dead_letter_routing.py",
            "test_two_hundred_batches_with_a_bad_entry_each_cost_one_commit_each_and_nothing_on_rerun",
        ),
    }
)


def is_slow(item: pytest.Item) -> bool:
    file = Path(str(item.path)).name
    name = getattr(item, "originalname", item.name)
    if file in SLOW_FILES or (file, name) in SLOW_TESTS:
        return True
    return file in CHILD_SPARK_FILES and name not in CHILD_SPARK_FILES[file]


def starts_spark(item: pytest.Item) -> bool:
    """Whether a test starts a JVM: it uses the session's ``spark``, or a child process does."""
    if "spark" in getattr(item, "fixturenames", ()):
        return True
    file = Path(str(item.path)).name
    name = getattr(item, "originalname", item.name)
    if file in CHILD_SPARK_FILES:
        return name not in CHILD_SPARK_FILES[file]
    return (file, name) in CHILD_SPARK_TESTS


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if starts_spark(item) and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        if is_slow(item) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a run of no ``spark`` test in which this process started a JVM anyway."""
    if any(item.get_closest_marker("spark") for item in session.items):
        return
    context = sys.modules.get("pyspark") and getattr(sys.modules["pyspark"], "SparkContext", None)
    if context is not None and getattr(context, "_gateway", None) is not None:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(
            "\nconftest: a JVM was started by a test without the 'spark' marker: give it the "
            "marker (use the `spark` fixture, or list it in CHILD_SPARK_FILES)",
            file=sys.stderr,
        )


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        if in_ci():  # the Redis 6.2 skips are for the wheel's server only, never CI's
            version = str(redis.Redis.from_url(server.url).info("server")["redis_version"])
            if int(version.split(".")[0]) < 7:
                pytest.fail(
                    f"CI needs Redis 7 or later ({server.url} is {version}): .ci/run installs "
                    "Debian's redis-server when it is missing"
                )
        yield server
    forget_clients()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A stream prefix no other test uses, so tests never see each other's streams."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one SparkSession of the run, with the Delta Lake jars when they can be had.

    ``local_session`` fetches them from Maven Central on first use (cached in Ivy's cache
    after that; about 2 s more per start when cached); without them it starts anyway and the
    ``delta_spark`` fixture fails or skips the tests that need them.
    """
    from pyspark_atlasbus.session import local_session

    session = local_session(
        "atlasbus-tests",
        config={
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stopTimeout": "30s",
        },
    )
    yield session
    session.stop()


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``, as GitHub Actions and most CI services set)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture
def delta_spark(spark: Any) -> Any:
    """The session, when it has the Delta Lake jars; else the test fails in CI, skips elsewhere.

    CI must prove the delta-spark path, so a CI machine that cannot fetch the jars fails these
    tests with the reason; a developer's machine without Maven Central skips them, saying why.
    """
    from pyspark_atlasbus.dead_letters import delta_jars_available
    from pyspark_atlasbus.delta_jars import delta_package
    from pyspark_atlasbus.session import delta_lake_note

    if not delta_jars_available(spark):
        why = delta_lake_note() or (
            f"the Delta Lake jars ({delta_package()}) are not on the test session's classpath"
        )
        if in_ci():
            pytest.fail(f"CI needs the Delta Lake jars (Maven Central must be reachable): {why}")
        pytest.skip(f"no Delta Lake jars: {why}")
    return spark

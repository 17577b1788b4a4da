"""Where the cores' time goes: CPU seconds of Spark's processes and redis-server, from /proc.

Linux only; elsewhere the figures are zero or None. Standard library only, so the peer's own
virtualenv (bench_peer's spark-redis side) can use it too.

Spark's processes are read one by one, and a measurement is the difference of two readings
process by process, because a process's CPU can leave the tree between them:

* pyspark's worker daemon ignores SIGCHLD, so a worker that ends (an idle one that Spark
  stops after a minute, say) is reaped by the kernel and its time is counted nowhere. Summing
  the tree before and after counted such a worker's whole life as minus its time (one round
  of the 2026-11-25 peer run showed -15.31 CPU-s of readers).
* The JVM waits for the streaming source's runner (one per query), so an ended runner's time
  joins the JVM's reaped children's time, all of it, including what it spent before the
  first reading: that part is taken off. A runner reaped while a reading lists the JVM's
  children (they end as their query does) was in neither sum: such a reading is taken again
  (rounds showed 0.12-0.13 CPU-s for runners that took about 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat from ``state`` on: ppid [1], utime [11], stime [12],
    cutime [13], cstime [14] (the last two: children it has waited for); None once it ended."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def own_cpu(fields: list[str]) -> float:
    """A process's own CPU seconds, user and system."""
    return (int(fields[11]) + int(fields[12])) / _TICKS


def reaped_cpu(fields: list[str]) -> float:
    """CPU seconds of the children a process has waited for."""
    return (int(fields[13]) + int(fields[14])) / _TICKS


def process_cpu(pid: int) -> float:
    """A live process's own CPU seconds."""
    fields = proc_stat(pid)
    if fields is None:
        raise ProcessLookupError(f"no process {pid}")
    return own_cpu(fields)


@dataclass(frozen=True)
class CpuSeconds:
    readers: float  # Python processes reading Redis (for a query: pyspark's workers)
    runner: float  # the streaming source's driver-side Python runner (queries only)
    jvm: float
    redis: float | None  # None when redis-server is not a process on this machine

    @property
    def total(self) -> float:
        return self.readers + self.runner + self.jvm + (self.redis or 0.0)

    def as_dict(self) -> dict[str, float | None]:
        fields = {"readers": self.readers, "runner": self.runner, "jvm": self.jvm}
        rounded: dict[str, float | None] = {k: round(v, 2) for k, v in fields.items()}
        rounded["redis"] = None if self.redis is None else round(self.redis, 2)
        return rounded


class RedisCpu:
    """redis-server's CPU time, when the server runs on this machine."""

    def __init__(self, url: str) -> None:
        import redis

        pid = int(redis.Redis.from_url(url).info("server")["process_id"])
        try:
            local = b"redis" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            local = False
        self.pid = pid if local else None

    def read(self) -> float | None:
        fields = None if self.pid is None else proc_stat(self.pid)
        return None if fields is None else own_cpu(fields)

    def since(self, before: float | None) -> float | None:
        return _spent(self.read(), before)


def _spent(now: float | None, before: float | None) -> float | None:
    """redis-server's CPU seconds between two readings; None unless both were taken."""
    return None if now is None or before is None else now - before


@dataclass(frozen=True)
class SparkReading:
    """One reading of a Spark session's processes: each one's own CPU seconds by role."""

    readers: dict[int, float]  # the worker daemon and its workers
    runners: dict[int, float]  # the JVM's other Python children: streaming source runners
    jvm: float
    jvm_reaped: float  # ended children the JVM waited for: runners
    redis: float | None


class SparkCpu:
    """CPU time of Spark's JVM and of the Python processes it starts: the daemon and its
    workers (the readers), and the streaming source's driver-side runner, one per query."""

    def __init__(self, jvm_pid: int, redis_cpu: RedisCpu) -> None:
        self.jvm_pid = jvm_pid
        self.redis_cpu = redis_cpu

    @classmethod
    def of(cls, spark: Any, redis_cpu: RedisCpu) -> SparkCpu:
        """The meter of ``spark``'s JVM (a local session: driver and executor in one)."""
        return cls(int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()), redis_cpu)

    def read(self) -> SparkReading:
        """Every process of the session, read again if the JVM reaped a child meanwhile (a
        runner ending as its query does would otherwise be counted twice or not at all)."""
        redis = self.redis_cpu.read()
        while True:
            jvm = proc_stat(self.jvm_pid) if Path("/proc").is_dir() else None
            if jvm is None:  # not Linux: no figures for Spark's processes
                return SparkReading({}, {}, 0.0, 0.0, redis)
            readers, runners = self._children()
            again = proc_stat(self.jvm_pid)
            if again is not None and reaped_cpu(again) == reaped_cpu(jvm):
                return SparkReading(readers, runners, own_cpu(jvm), reaped_cpu(jvm), redis)

    def _children(self) -> tuple[dict[int, float], dict[int, float]]:
        """The own CPU seconds of the JVM's Python descendants: readers, runners."""
        stats = {int(p): proc_stat(int(p)) for p in os.listdir("/proc") if p.isdigit()}
        children: dict[int, list[int]] = {}
        for pid, fields in stats.items():
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(pid)
        readers: dict[int, float] = {}
        runners: dict[int, float] = {}
        for child in children.get(self.jvm_pid, []):
            role = readers if is_daemon(child) else runners
            pending = [child]
            while pending:
                pid = pending.pop()
                fields = stats[pid]
                if fields is not None:
                    role[pid] = own_cpu(fields)
                pending.extend(children.get(pid, []))
        return readers, runners

    def since(self, before: SparkReading) -> CpuSeconds:
        """CPU seconds spent since ``before``, process by process.

        A reader that ended in between is left out (its time since ``before`` is lost; Spark
        ends only idle workers while a query runs). A runner that ended in between counts with
        what the JVM collected of it, less what ``before`` had already counted.
        """
        now = self.read()
        readers = sum(cpu - before.readers.get(pid, 0.0) for pid, cpu in now.readers.items())
        live_runners = sum(cpu - before.runners.get(pid, 0.0) for pid, cpu in now.runners.items())
        counted_of_ended = sum(cpu for pid, cpu in before.runners.items() if pid not in now.runners)
        runner = live_runners + (now.jvm_reaped - before.jvm_reaped) - counted_of_ended
        return CpuSeconds(readers, runner, now.jvm - before.jvm, _spent(now.redis, before.redis))


# pyspark's own, and atlasbus's (``spark.python.daemon.module``, which local_session sets)
DAEMON_MODULES = (b"pyspark.daemon", b"pyspark_atlasbus.worker_daemon")


def is_daemon(pid: int) -> bool:
    """Whether ``pid`` runs a worker daemon's command line: a daemon, or a worker it forked
    (a fork keeps the command line); callers ask it of the JVM's children, the daemons."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(module in arguments for module in DAEMON_MODULES)

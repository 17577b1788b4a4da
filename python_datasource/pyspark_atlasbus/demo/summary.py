"""The summary at the end: what the tables hold next to what was published, and next steps.

The next steps are commands that run as printed: the ``atlasbus`` script by its path when the
shell would not find it (a virtualenv not activated), and never a password (shown as ``***``).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlasbus.bus.redis_url import shown_url
from atlasbus.model.offsets import StreamOffsets
from pyspark_atlasbus.demo.common import EVENTS_APP_ID, STREAM_PREFIX, STREAMS
from pyspark_atlasbus.demo.writer import table_rows

REPLAY_REASON = "invalid-integer"
"""A reason whose dead letters the demo's traffic makes replayable (a priority written as a
word: the payload is fine). ``invalid-json`` ones are not: their payload is cut short."""


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def dead_letters(self) -> Path:
        return self.root / "dead_letters"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"


def committed_offsets(query: Any, paths: Paths) -> dict[str, str]:
    """The end offsets ({stream: last entry ID read}) of the last micro-batch in the events table.

    The table says which batch it holds last (its app transaction: the query's ID for Spark's
    Delta sink, ``EVENTS_APP_ID`` for the delta-rs writer), and the checkpoint's offset log
    says where that batch ended. After Ctrl-C this is exact where the query's progress is not:
    a batch can be in the table before Spark reports it. Falls back to the progress.
    """
    batch = _last_batch_in_table(paths.events, (str(query.id), EVENTS_APP_ID))
    if batch is not None:
        logged = _logged_end_offset(paths.checkpoint / "offsets" / str(batch))
        if logged is not None:
            return logged
    progress = query.lastProgress
    sources = progress["sources"] if progress else None
    if not sources:
        return {}
    return _positions(sources[0]["endOffset"])


def _last_batch_in_table(table: Path, app_ids: tuple[str, ...]) -> int | None:
    from deltalake import DeltaTable

    try:
        events = DeltaTable(str(table))
    except Exception:  # no table yet
        return None
    versions = [v for v in (events.transaction_version(a) for a in app_ids) if v is not None]
    return max(versions) if versions else None


def _logged_end_offset(offsets_file: Path) -> dict[str, str] | None:
    """The source's end offset in one of Spark's offset log files ("v1", metadata, offsets)."""
    try:
        lines = offsets_file.read_text().splitlines()
    except OSError:
        return None
    return _positions(lines[2]) if len(lines) > 2 else None


def _positions(end: Any) -> dict[str, str]:
    if isinstance(end, str):
        end = json.loads(end)
    # a stream's value may be the plan object the source records ({"id": ..., "cuts": ...})
    positions = StreamOffsets.from_dict(end or {}, what="the query's end offset")
    return {stream: str(position) for stream, position in positions.items()}


def stream_positions(
    client: Any, committed: dict[str, str], lettered: frozenset[tuple[str, str]] = frozenset()
) -> tuple[int, int]:
    """(entries in the demo's streams, how many of them are after ``committed`` and not yet
    dead-lettered).

    ``lettered`` holds the (stream, entry ID) pairs in the dead-letter table. A batch that Ctrl-C
    cut off after its reads appended their dead letters, but before the events were committed,
    leaves those entries both lettered and after ``committed``: they count once, as lettered
    (its replay would not append them again). Counts the unread entries one by one (XRANGE):
    done once, for the summary, never per tick.
    """
    total = unread = 0
    for stream in STREAMS:
        length = int(client.xlen(stream))
        total += length
        if not length:
            continue
        after = f"({committed[stream]}" if stream in committed else "-"
        entries = client.xrange(stream, min=after, max="+", count=10_000_000)
        unread += sum(1 for entry_id, _ in entries if (stream, _text(entry_id)) not in lettered)
    return total, unread


def _text(entry_id: bytes | str) -> str:
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id


@dataclass
class Summary:
    """What the tables hold, next to what was published; ``accounted`` when every entry is in
    exactly one table or (after Ctrl-C) still unread in Redis."""

    published: int
    malformed: Counter[str]
    events: int
    dead_letters: int
    by_reason: list[tuple[str, int]]
    unread: int | None
    paths: Paths
    interrupted: bool

    @classmethod
    def collect(
        cls,
        paths: Paths,
        client: Any,
        published_by_thread: int,
        malformed: Counter[str],
        committed: dict[str, str],
        *,
        interrupted: bool,
    ) -> Summary:
        from atlasbus.dead_letters import DeadLetterTable

        letters = DeadLetterTable(str(paths.dead_letters))
        by_reason: list[tuple[str, int]] = []
        lettered: frozenset[tuple[str, str]] = frozenset()
        if letters.exists():
            frame = letters.summary(by=("reason",))
            by_reason = [
                (str(r), int(c)) for r, c in zip(frame["reason"], frame["count"], strict=True)
            ]
            entries = letters.to_arrow().select(["stream", "entry_id"]).to_pydict()
            lettered = frozenset(zip(entries["stream"], entries["entry_id"], strict=True))
        try:
            total, unread = stream_positions(client, committed, lettered)
            published: int = total
            still_unread: int | None = unread
        except Exception:  # Redis is gone (it was stopped too): count what the publisher sent
            published, still_unread = published_by_thread, None
        return cls(
            published=published,
            malformed=malformed,
            events=table_rows(paths.events),
            dead_letters=sum(count for _, count in by_reason),
            by_reason=by_reason,
            unread=still_unread,
            paths=paths,
            interrupted=interrupted,
        )

    @property
    def accounted(self) -> bool:
        return self.events + self.dead_letters + (self.unread or 0) == self.published

    def print(self, url: str, *, keep: bool, embedded: bool) -> None:
        width = 28
        lines = [
            "",
            "=== atlasbus demo summary ===",
            f"{'published entries:':<{width}}{self.published}",
            f"{'  of which malformed:':<{width}}{sum(self.malformed.values())}",
            f"{'events written:':<{width}}{self.events}",
            f"{'dead letters:':<{width}}{self.dead_letters}",
        ]
        lines += [f"  {reason:<{width - 2}}{count}" for reason, count in self.by_reason]
        if self.unread:
            lines.append(f"{'not read (stopped early):':<{width}}{self.unread}")
        if self.accounted:
            verdict = "every entry accounted for"
        elif self.unread is None:
            verdict = "cannot check: Redis stopped before the entries could be counted"
        else:
            verdict = "NOT every entry accounted for"
        total = self.events + self.dead_letters + (self.unread or 0)
        lines.append(f"{'accounted:':<{width}}{total}  ({verdict})")
        lines += [
            "",
            f"{'events table:':<{width}}{self.paths.events}",
            f"{'dead-letter table:':<{width}}{self.paths.dead_letters}",
            "",
        ]
        lines += next_steps(self.paths, url, redis_alive=keep or not embedded)
        print("\n".join(lines), flush=True)


def next_steps(paths: Paths, url: str, *, redis_alive: bool) -> list[str]:
    """Commands to run next, each runnable as printed (passwords excepted: shown as ***)."""
    atlasbus = atlasbus_command()
    table = shlex.quote(str(paths.dead_letters))
    shown = shown_url(url)
    lines = [
        "next steps (copy and paste):",
        f"  {atlasbus} dlq summary --table {table}",
        f"  {atlasbus} dlq show --table {table} --where \"reason = 'invalid-json'\"",
    ]
    if redis_alive:  # a dry run first, as the README says: it lists what would be published
        lines.append(
            f"  {atlasbus} dlq replay --table {table} --url {shlex.quote(shown)} "
            f"--stream-prefix {STREAM_PREFIX} --where \"reason = '{REPLAY_REASON}'\" --dry-run"
            "  # then without --dry-run to publish them"
        )
    env = f"ATLASBUS_DEAD_LETTERS={table}"
    if redis_alive:
        env += f" REDIS_URL={shlex.quote(shown)}"
    notebook = notebook_path()
    lines.append("  the dead-letter explorer notebook (needs the notebooks extra):")
    if notebook is None:
        lines.append(
            "    notebooks/dead_letter_explorer.ipynb in the atlasbus repository; install "
            "with: pip install 'atlasbus[notebooks]'"
        )
    else:
        root = notebook.parent.parent
        if (root / "pyproject.toml").exists():  # the checkout: its notebooks extra
            install = f"{shlex.quote(str(root))}'[notebooks]'"
        else:  # what the extra holds
            install = "jupyterlab ipykernel matplotlib"
        lines += [
            f"    {_bin('pip')} install {install}",
            f"    {env} {_bin('jupyter')} lab {shlex.quote(str(notebook))}",
        ]
    if shown != url and redis_alive:
        lines.append("  (*** stands for the Redis password: put the real one in its place)")
    return lines


def atlasbus_command() -> str:
    """How to run ``atlasbus`` from the user's shell, as this one was started.

    ``atlasbus`` when the shell finds this very script on PATH, else the script's absolute
    path (``.venv/bin/atlasbus`` when the virtualenv is not activated), else
    ``python -m atlasbus.cli`` with this interpreter's absolute path.
    """
    candidates = [Path(sys.argv[0]), Path(sys.executable).parent / "atlasbus"]
    for script in candidates:
        if script.name == "atlasbus" and script.is_file():
            script = script.absolute()
            on_path = shutil.which("atlasbus")
            if on_path and Path(on_path).resolve() == script.resolve():
                return "atlasbus"
            return shlex.quote(str(script))
    return f"{shlex.quote(str(Path(sys.executable).absolute()))} -m atlasbus.cli"


def _bin(name: str) -> str:
    """A command of this interpreter's environment (pip, jupyter) by its absolute path."""
    return shlex.quote(str(Path(sys.executable).absolute().parent / name))


def notebook_path() -> Path | None:
    """The explorer in this checkout (the current folder or the installed source's)."""
    name = Path("notebooks") / "dead_letter_explorer.ipynb"
    for root in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (root / name).exists():
            return (root / name).absolute()
    return None

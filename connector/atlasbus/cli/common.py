"""What every ``atlasbus`` command line shares: flag types, the URL flag, tables, wording.

The core's errors name Spark options and Python arguments; the command line runs each command
inside ``named_as(CLI_NAMES)``, so they name its flags. Runs in the command line's process only.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.subscription import Subscription
from atlasbus.errors import AtlasbusError, ConfigurationError
from atlasbus.option_names import named_as
from atlasbus.options.keys import DEFAULT_STREAM_PREFIX
from atlasbus.options.reader import OptionReader

CLI_NAMES: Final = {
    "url": "--url",
    "url or env": "--url (or $REDIS_URL)",
    "url from env": "$REDIS_URL",
    "credentials": "the user name and password in --url (or $REDIS_URL)",
    "dead letter table": "--table",
    "where to point the dead letter table": "point --table at an atlasbus dead-letter table",
    "sweep group": "--group",
    "swept streams": (
        "--topics and --stream-prefix (a topic names the stream '{stream-prefix}:{topic}')"
    ),
    "streams": "--topics / --stream-prefix",
    "again": "--again",
    "stream selection": "--stream-prefix and --topics",
}
"""What the command line calls what the core's errors name (``atlasbus.option_names``)."""


def guarded(
    prog: str,
    action: Callable[[], int],
    *,
    store_errors: tuple[type[BaseException], ...] = (),
    store_advice: str = "",
) -> int:
    """Run a command's ``action``; the errors a user can act on as one line, exit status 2.

    Errors name the command line's flags (``CLI_NAMES``); a reply of Redis's that
    ``translate_errors`` leaves as it is (OOM, say) is quoted. ``store_errors`` are what a
    command's dead-letter table raises (delta-rs, an object store), prefixed by
    ``store_advice``. A reader of the output that went away (``| head``) ends the command
    quietly.
    """
    import redis  # loaded by the command's work already

    try:
        with named_as(CLI_NAMES):
            return int(action())
    except (AtlasbusError, ValueError) as exc:
        message = str(exc)
    except redis.RedisError as exc:
        message = f"Redis replied: {first_line(exc)}"
    except BrokenPipeError:
        return output_gone()
    except store_errors as exc:
        message = f"{store_advice}: {first_line(exc)}"
    sys.stderr.write(f"{prog}: error: {message}\n")
    return 2


def output_gone() -> int:
    """Exit status 1, quietly, when the reader of standard output went away (``| head``).

    Standard output then points at /dev/null, so Python's flush at exit does not fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's buffer): nothing to redirect
        pass
    return 1


def first_line(exc: BaseException) -> str:
    """An error's first line (a library's message may run to a backtrace), else its type."""
    text = str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, but it wraps only at spaces: a column name, a flag or a
    ``{stream-prefix}:{topic}`` is never cut across lines."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrap(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in _wrap(text, width - len(indent)))


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(
        " ".join(text.split()), max(width, 20), break_long_words=False, break_on_hyphens=False
    )


def non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def topics(text: str) -> tuple[str, ...]:
    """``--topics a,b``: names without blanks between the commas."""
    names = tuple(name.strip() for name in text.split(","))
    if not names or any(not name for name in names):
        raise argparse.ArgumentTypeError(f"must be comma-separated topic names, got {text!r}")
    return names


def duration(text: str) -> int:
    """A duration as the source's options take one (``OptionReader.duration_ms``), in ms."""
    try:
        return OptionReader({"value": text}).duration_ms("value", 0)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("option 'value' ")) from None


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def add_bus_flags(
    parser: argparse.ArgumentParser,
    *,
    topics_help: str | None = None,
    url_help: str = "Redis URL (default $REDIS_URL, else redis://localhost:6379/0)",
    prefix_help: str = f"streams are {{prefix}}:{{topic}} (default {DEFAULT_STREAM_PREFIX})",
) -> None:
    """``--url``, ``--stream-prefix`` (or ``--prefix``) and, given its help, ``--topics``:
    one name, type and default for each in every command. Read them back with
    ``endpoint_from_flag(args.url)`` and ``subscription_from_flags(args)``."""
    parser.add_argument("--url", type=non_empty, help=url_help)
    parser.add_argument(
        "--stream-prefix",
        "--prefix",
        dest="stream_prefix",
        type=non_empty,
        default=DEFAULT_STREAM_PREFIX,
        help=prefix_help,
    )
    if topics_help is not None:
        parser.add_argument("--topics", type=topics, help=topics_help)


def subscription_from_flags(args: argparse.Namespace) -> Subscription:
    """The streams ``--topics`` names under ``--stream-prefix``; without it, all under it."""
    if args.topics is not None:
        return Subscription("topics", tuple(dict.fromkeys(args.topics)), args.stream_prefix)
    return Subscription("pattern", ("*",), args.stream_prefix)


def endpoint_from_flag(url: str | None) -> RedisEndpoint:
    """The server from ``--url``, else ``$REDIS_URL``, else localhost; errors name which."""
    named_by = {**CLI_NAMES, "url": "--url" if url is not None else "$REDIS_URL"}
    with named_as(named_by):
        return RedisEndpoint.from_options(url, None, None)


def cell(value: Any, *, width: int | None) -> str:
    if _missing(value):
        text = "-"
    elif isinstance(value, datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
    elif isinstance(value, list):  # a map, as Arrow gives it
        text = "{" + ", ".join(f"{k}: {v}" for k, v in value) + "}"
    elif hasattr(value, "isoformat") and hasattr(value, "strftime"):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
    else:
        text = str(value)
    text = " ".join(text.split())  # one line per row
    if width is not None and len(text) > width:
        text = cut_in_the_middle(text, width)
    return text


def cut_in_the_middle(text: str, width: int) -> str:
    """``text`` in ``width`` characters: how it begins and how it ends, "..." between.

    An error's telling part is at both ends: what was wrong first, the value it quotes last.
    """
    width = max(width, 0)
    if len(text) <= width:
        return text
    if width <= 3:
        return text[:width]
    tail = (width - 3) // 3
    return text[: width - 3 - tail] + "..." + (text[-tail:] if tail else "")


def _missing(value: Any) -> bool:
    """None, or a missing value as pandas gives it (NaN, NaT): the only values unequal to
    themselves. A list column's array compares element-wise: never missing."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):
        return False


def format_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    below: Sequence[Sequence[str]] = (),
) -> str:
    """Aligned columns under a header and a rule; numbers right-aligned. ``below[i]`` are
    lines printed under row ``i`` as they are."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [bool(rows) and all(_is_number(row[i]) for row in rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if right else c.ljust(w)
            for c, w, right in zip(cells, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip() + "\n"

    text = line(headers) + line(["-" * w for w in widths])
    for index, row in enumerate(rows):
        text += line(row)
        if index < len(below):
            text += "".join(extra + "\n" for extra in below[index])
    return text


def _is_number(text: str) -> bool:
    return text.lstrip("-").replace(".", "", 1).isdigit() or text == "-"

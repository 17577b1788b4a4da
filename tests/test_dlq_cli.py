"""``atlasbus dlq``: what it prints names its flags, its help keeps words whole; no Spark (Redis only
for a dry run, which connects as the real run would).

(Runs against Redis and the full show/summary/replay round trip: test_dead_letter_replay.py.)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from atlasbus.bus.connection import RedisEndpoint, translate_errors
from atlasbus.cli import common as cli_common
from atlasbus.cli import dlq as dlq_cli
from atlasbus.dead_letters import COLUMNS, DeadLetter, DeadLetterTable
from atlasbus.dead_letters.table import SUMMARY_BY
from atlasbus.errors import RedisUnavailableError
from atlasbus.option_names import named_as

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

# What the Python API and Spark call things; the command line must never say them.
API_WORDS = ("option '", "again=True", "deadLetterTable", "stream_prefix", "'username'")


def run(
    capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str]:  # (exit status, stdout, stderr)
    try:
        code = dlq_cli.main(["dlq", *argv])
    except SystemExit as exc:  # argparse: --help, or a bad argument
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def letters(count: int) -> list[DeadLetter]:
    return [
        DeadLetter.for_row(
            "too-big",
            f"row {i} too big",
            write_id="w/-/0",
            row=i,
            topic="orders",
            payload=f'{{"n": {i}}}',
            at=T0.replace(minute=i),
        )
        for i in range(count)
    ]


@pytest.fixture
def table(tmp_path: Path) -> str:
    dlq = DeadLetterTable(tmp_path / "dlq")
    dlq.append(letters(3))
    return dlq.uri


# --- errors: one line, exit status 2, the command line's words -----------------------------------

URL_RULE = (
    "must be a Redis URL starting with redis://, rediss://, unix://, redis+sentinel:// or "
    "rediss+sentinel://, got http://...; accepted: redis://[user:password@]host[:port][/db], "
    "rediss://... (TLS), unix:///path/to.sock or redis+sentinel://[user:password@]sentinel[:port][,sentinel[:port]...]/master-name[/db]"
)
VALID = ", ".join(COLUMNS)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["show"], "atlasbus dlq show: error: the following arguments are required: --table"),
        (["show", "--table", " "], "atlasbus dlq show: error: argument --table: must not be empty"),
        (
            ["show", "--table", "{table}", "--limit", "0"],
            "atlasbus dlq show: error: argument --limit: must be a positive integer, got '0'",
        ),
        (
            ["show", "--table", "{table}", "--where", ""],
            "atlasbus dlq show: error: argument --where: must not be empty",
        ),
        (
            ["show", "--table", "{table}", "--columns", "colour"],
            f"atlasbus dlq: error: --columns: unknown column(s) ['colour']; valid: {VALID}",
        ),
        (
            ["show", "--table", "{table}", "--columns", ","],
            f"atlasbus dlq: error: --columns: names no column; valid: {VALID}",
        ),
        (
            ["show", "--table", "{table}", "--where", "stag = 1"],
            "atlasbus dlq: error: cannot use the table (check --table, and --where if given): "
            "Schema error: No field named "
            "stag. Did you mean 'dead_letters.stage'?",
        ),
        (
            ["show", "--table", "{missing}"],
            "atlasbus dlq: error: no dead-letter table at '{missing}': it is created by the first "
            "dead letter written there; check --table for a typo",
        ),
        (
            ["summary", "--table", "{other}"],
            "atlasbus dlq: error: the Delta table at '{other}' is not a dead-letter table: it "
            f"lacks columns {list(COLUMNS)}; point --table at an atlasbus dead-letter table",
        ),
        (
            ["summary", "--table", "{table}", "--by", "colour"],
            f"atlasbus dlq: error: --by: unknown column(s) ['colour']; valid: {VALID}",
        ),
        (  # a TypeError traceback (unhashable list) before
            ["summary", "--table", "{table}", "--by", "fields"],
            "atlasbus dlq: error: cannot summarise by ['fields']: they hold maps or lists; group "
            f"by columns of single values: {[c for c in COLUMNS if c != 'fields']}",
        ),
        (  # pandas' "cannot insert topic, already exists" before
            ["summary", "--table", "{table}", "--by", "topic,topic"],
            "atlasbus dlq: error: cannot summarise by ['topic'] twice: name each column once",
        ),
        (
            ["summary", "--table", "{table}", "--freq", "1x"],
            "atlasbus dlq summary: error: argument --freq: must be a fixed time span such as 1h, "
            "15min or 1D, got '1x'",
        ),
        (
            ["summary", "--table", "{table}", "--freq", "1M"],  # months have no fixed length
            "atlasbus dlq summary: error: argument --freq: must be a fixed time span such as 1h, "
            "15min or 1D, got '1M'",
        ),
        (
            ["summary", "--table", "{table}", "--freq", "0h"],
            "atlasbus dlq summary: error: argument --freq: must be a fixed time span such as 1h, "
            "15min or 1D, got '0h'",
        ),
        (
            ["replay", "--table", "{table}", "--limit", "-3"],
            "atlasbus dlq replay: error: argument --limit: must be a positive integer, got '-3'",
        ),
        (
            ["replay", "--table", "{table}", "--stream-prefix", " "],
            "atlasbus dlq replay: error: argument --stream-prefix/--prefix: must not be empty",
        ),
        (
            ["replay", "--table", "{table}", "--url", ""],
            "atlasbus dlq replay: error: argument --url: must not be empty",
        ),
        (
            ["replay", "--table", "{table}", "--url", "http://x"],
            f"atlasbus dlq: error: --url {URL_RULE}",
        ),
        (
            ["replay", "--table", "{table}", "--url", "redis://h:99999"],
            "atlasbus dlq: error: --url has an invalid port (host 'h'), got "
            "'redis://h:99999': a port is an integer from 1 to 65535 (or leave it out for 6379)",
        ),
    ],
)
def test_errors_name_the_flags(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    table: str,
    argv: list[str],
    error: str,
) -> None:
    other = str(tmp_path / "other")
    write_deltalake(other, pa.table({"a": [1]}))
    names = {"table": table, "missing": str(tmp_path / "missing"), "other": other}
    code, out, err = run(capsys, *(a.format(**names) for a in argv))
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == error.format(**names)
    assert not any(word in err for word in API_WORDS), err


def test_a_bad_redis_url_from_the_environment_is_named_as_such(
    capsys: pytest.CaptureFixture[str], table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", "http://y")
    code, _, err = run(capsys, "replay", "--table", table)
    assert (code, err) == (2, f"atlasbus dlq: error: $REDIS_URL {URL_RULE}\n")


def test_unreachable_redis_is_named_by_the_flag_and_nothing_is_claimed(
    capsys: pytest.CaptureFixture[str], table: str
) -> None:
    version = DeadLetterTable(table).version()
    code, _, err = run(capsys, "replay", "--table", table, "--url", "redis://127.0.0.1:1/0")
    assert code == 2
    assert err.startswith("atlasbus dlq: error: cannot reach Redis at 127.0.0.1:1: ")
    assert err.endswith(
        "Check that the server is running and that --url (or $REDIS_URL) points to it.\n"
    )
    assert not any(word in err for word in API_WORDS), err
    assert DeadLetterTable(table).version() == version  # no claim left behind


def test_refused_credentials_are_worded_for_the_command_line() -> None:
    """The core's own message (as ``translate_errors`` raises it) in the command line's words."""
    import redis

    endpoint = RedisEndpoint.from_options("redis://u:secret@h:6379/0", None, None)
    with (
        pytest.raises(RedisUnavailableError) as raised,
        named_as(cli_common.CLI_NAMES),
        translate_errors(endpoint),
    ):
        raise redis.AuthenticationError("WRONGPASS invalid username-password pair.")
    assert str(raised.value) == (
        "Redis at h:6379 refused user 'u': WRONGPASS invalid username-password pair. "
        "Check the user name and password in --url (or $REDIS_URL)."
    )


# --- replay's words: --again, and --limit counting what would be published -----------------------


def test_replay_refusals_say_use_again_and_limit_skips_what_was_replayed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, redis_url: str
) -> None:
    """A dry run publishes nothing, but reaches --url as the real run would."""
    dlq = DeadLetterTable(tmp_path / "dlq")
    made = letters(6)
    dlq.append(made)
    ids = [x.dead_letter_id for x in made]  # oldest first
    dlq.mark_replayed(ids[:3], ["1-1", "1-2", "1-3"], T0)

    replay = ("replay", "--url", redis_url, "--table", dlq.uri)
    code, out, _ = run(capsys, *replay, "--limit", "2", "--dry-run")
    lines = out.splitlines()
    assert code == 1  # the older, replayed ones are reported as not replayed
    assert [line.split()[0] for line in lines[2:4]] == [i[:12] for i in ids[3:5]]
    assert lines[-1] == (
        "would replay 2 dead letter(s); refused 3 already replayed (use --again), 0 not replayable"
    )
    assert f"{ids[0][:12]}  already replayed 1 time(s), last as entry 1-1; use --again to " in out
    assert not any(word in out for word in API_WORDS), out

    code, out, _ = run(
        capsys,
        *replay,
        "--where",
        "replay_count = 0",
        "--limit",
        "2",
        "--dry-run",
    )
    assert code == 0
    assert out.splitlines()[-1] == (
        "would replay 2 dead letter(s); refused 0 already replayed (use --again), 0 not replayable"
    )


# --- help: wrapped at spaces only --------------------------------------------------------------


def help_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int, *argv: str
) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, _ = run(capsys, *argv, "--help")
    assert code == 0
    return out


@pytest.mark.parametrize("command", [[], ["show"], ["summary"], ["replay"]])
@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_help_never_breaks_a_word_across_lines(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    width: int,
) -> None:
    wide = help_text(capsys, monkeypatch, 1000, *command)
    narrow = help_text(capsys, monkeypatch, width, *command)
    # wrapping may only move line breaks between words: the words are the same
    assert narrow.split() == wide.split()


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_show_and_summary_help_name_every_default_column_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    show = " ".join(help_text(capsys, monkeypatch, width, "show").split())
    assert f"(default {', '.join(dlq_cli.SHOW_COLUMNS)})" in show
    words = set(re.findall(r"[\w-]+", show))
    assert set(dlq_cli.SHOW_COLUMNS) <= words
    summary = " ".join(help_text(capsys, monkeypatch, width, "summary").split())
    assert f"(default {', '.join(SUMMARY_BY)};" in summary


def test_summary_by_a_column_with_no_value_shows_a_dash(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Never replayed: last_replayed_at is null (pandas' NaT: 'NaTType does not support
    strftime' before) and batch_id too (NaN: shown as 'nan' before)."""
    code, out, err = run(capsys, "summary", "--table", table, "--by", "last_replayed_at,batch_id")
    assert (code, err) == (0, "")
    rows = out.splitlines()
    assert rows[0].split() == [
        "last_replayed_at",
        "batch_id",
        "count",
        "first_dead_lettered_at",
        "last_dead_lettered_at",
    ]
    assert rows[2].split()[:3] == ["-", "-", "3"]
    assert rows[-1] == "3 dead letter(s)"

"""The Redis the demo uses: a private redis-server or ``--url``; its streams' counts from XINFO.

Every figure here costs one command per stream whatever the streams hold (``XINFO STREAM``,
``XINFO GROUPS``), so the progress display can ask at every tick.
"""

from __future__ import annotations

from typing import Any

from atlasbus.model.conversions import reply_text
from atlasbus.sandbox.redis_server import RedisServer
from pyspark_atlasbus.demo.common import GROUP, STREAMS, WARM_UP_STREAM, DemoError


def start_embedded_redis(timeout: float = 10.0) -> RedisServer:
    """A private redis-server for the demo, in a process session of its own.

    Ctrl-C in the terminal then stops the query first and the demo stops Redis after it (or
    leaves it running with ``--keep``).
    """
    try:
        return RedisServer(own_session=True).start(timeout)
    except FileNotFoundError as exc:
        raise DemoError(f"{exc}. Or give a running server with --url") from None
    except RuntimeError as exc:
        raise DemoError(str(exc)) from None


def connect(url: str, embedded: bool) -> Any:
    """A client for ``url``, checked: reachable, credentials accepted, Redis 6.2 or newer."""
    import redis

    from atlasbus.bus.connection import RedisEndpoint, translate_errors
    from atlasbus.cli.common import CLI_NAMES, first_line
    from atlasbus.errors import AtlasbusError
    from atlasbus.option_names import named_as

    try:
        with named_as(CLI_NAMES):
            endpoint = RedisEndpoint.from_options(url, None, None)
            with translate_errors(endpoint):
                client = endpoint.client()
                version = str(client.info("server").get("redis_version", "0"))
    except (AtlasbusError, redis.RedisError) as exc:
        message = str(exc) if isinstance(exc, AtlasbusError) else first_line(exc)
        if not embedded:
            message = message.rstrip(".") + (
                ". Or leave out --url (and unset $REDIS_URL) to use an embedded one."
            )
        raise DemoError(message) from None
    if tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) < (6, 2):
        raise DemoError(
            f"Redis {version} at {endpoint.description} is too old: atlasbus needs 6.2+"
        )
    return client


def reset_streams(client: Any) -> None:
    """Start from empty demo streams (only the demo's own keys), so the counts add up."""
    client.delete(*STREAMS, WARM_UP_STREAM)


def published_entries(client: Any) -> int:
    """Entries ever added to the demo's streams: ``entries-added`` of ``XINFO STREAM`` (Redis
    7), else the length (the same here: the demo starts from empty streams and never trims)."""
    total = 0
    for stream in STREAMS:
        info = _stream_info(client, stream)
        if info is not None:
            added = info.get("entries-added")
            total += int(info["length"] if added is None else added)
    return total


def group_caught_up(client: Any) -> bool:
    """Whether the demo's consumer group stands at the end of every stream (``XINFO``).

    The source moves the group to a batch's end offsets when Spark plans the next trigger, so
    it trails the query by up to one trigger.
    """
    for stream in STREAMS:
        info = _stream_info(client, stream)
        if info is None:
            continue
        group = next(
            (g for g in client.xinfo_groups(stream) if reply_text(g["name"]) == GROUP), None
        )
        if group is None or reply_text(group["last-delivered-id"]) != reply_text(
            info["last-generated-id"]
        ):
            return False
    return True


def _stream_info(client: Any, stream: str) -> dict[str, Any] | None:
    import redis

    try:
        return dict(client.xinfo_stream(stream))
    except redis.ResponseError:  # no such key: nothing published to it yet
        return None

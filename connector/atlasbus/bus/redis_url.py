"""Redis URLs as atlasbus takes them: checked once, as redis-py would read them, and shown
with every secret hidden (driver, command line; no I/O but the TLS files' existence)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote_plus, urlsplit, urlunsplit

from atlasbus.errors import ConfigurationError

DEFAULT_URL = "redis://localhost:6379/0"
SUPPORTED_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_SENTINEL_PORT = 26379

# Bounded waits. atlasbus makes no blocking call (no XREAD BLOCK): its longest command is one
# XRANGE page or one MULTI/EXEC batch, milliseconds on a healthy server, so a read that takes
# 30 s means a stalled or wrong server, and the query should fail rather than hang.
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_READ_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_PARAM = "socket_connect_timeout"
READ_TIMEOUT_PARAM = "socket_timeout"

_URL_FORM = (
    "redis://[user:password@]host[:port][/db], rediss://... (TLS), unix:///path/to.sock or "
    "redis+sentinel://[user:password@]sentinel[:port][,sentinel[:port]...]/master-name[/db]"
)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_BOOLEANS = ("true", "false", "yes", "no", "1", "0", "y", "n", "t", "f")
_CERT_REQS = ("none", "optional", "required")
_FILE_PARAMS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
# The URL query parameters atlasbus takes, each with how its value is checked. ``username`` and
# ``password`` are redis-py's too, but atlasbus reads them itself (see ``RedisEndpoint``).
URL_PARAMETERS: dict[str, str] = {
    "username": "a user name",
    "password": "a password",
    "db": "a non-negative integer",
    CONNECT_TIMEOUT_PARAM: "a positive number of seconds",
    READ_TIMEOUT_PARAM: "a positive number of seconds",
    "health_check_interval": "a non-negative integer (seconds)",
    "max_connections": "a positive integer",
    "socket_keepalive": "a boolean (true or false)",
    "client_name": "printable ASCII without spaces (what CLIENT SETNAME takes)",
    "protocol": "2 or 3",
    "ssl_cert_reqs": "none, optional or required",
    "ssl_check_hostname": "a boolean (true or false)",
    "ssl_ca_certs": "the path of an existing file",
    "ssl_ca_path": "the path of an existing directory",
    "ssl_certfile": "the path of an existing file",
    "ssl_keyfile": "the path of an existing file",
    "ssl_password": "the key file's password",
    "ssl_min_version": "an integer (ssl.TLSVersion)",
    "sentinel_username": "the user name to log in to the Sentinels with",
    "sentinel_password": "the password to log in to the Sentinels with",
}
# Parameters whose value is never shown; neither is the value of a parameter not listed above.
_SECRET_PARAMS = ("password", "ssl_password", "sentinel_password")
CREDENTIAL_PARAMS = ("username", "password")
# Parameters redis-py's connection for the scheme takes; any other fails at connect with a
# TypeError, so it is refused with the URL instead.
_TLS_ONLY_PARAMS = tuple(name for name in URL_PARAMETERS if name.startswith("ssl_"))
_TCP_ONLY_PARAMS = ("socket_keepalive",)
_SENTINEL_ONLY_PARAMS = ("sentinel_username", "sentinel_password")


def query_credential(url: str, name: str) -> str | None:
    """The URL's query parameter ``name`` as redis-py reads it: its first non-empty value."""
    for key, value in parse_qsl(urlsplit(url).query):  # blank values left out, as redis-py does
        if key == name:
            return value
    return None


def shown_url(url: str) -> str:
    """The URL with its password and the value of every query parameter that may be a secret
    replaced by ``***``: safe to print.

    Shown are only the values of the parameters atlasbus takes that are not secrets: the value
    of ``password``, ``ssl_password`` and of any parameter atlasbus does not know (``passwd``,
    ``token``, ``PASSWORD``) is hidden, its name percent-decoded as redis-py decodes it. Works
    on the text, not on ``urlsplit``'s reading of it, and hides too much rather than too little:
    a parameter wherever one could start; a password holding an unencoded ``#``, ``/`` or ``?``
    cuts the URL before its ``@`` for ``urlsplit``, so when the place has no ``@`` the last
    ``@`` after it ends the user part. Where the two readings differ, both are hidden.
    """
    spans = list(hidden_value_spans(url))
    user_part = _hidden_user_part(url)
    if user_part is not None:
        spans.append(user_part)
    shown, position = [], 0
    for start, end in _merged(spans):
        shown += [url[position:start], "***"]
        position = end
    return "".join(shown) + url[position:]


def _hidden_user_part(url: str) -> tuple[int, int] | None:
    """Where in ``url`` its password is (or the whole user part, when its user looks broken)."""
    scheme, separator, rest = url.partition("://")
    if not separator:  # not a URL at all ("user:password@host:6379"): shown in its refusal
        scheme, rest = "", url
    offset = len(url) - len(rest)
    if "@" not in rest:
        return None
    place = rest[: _place_end(rest)]
    if "@" in place:
        at = place.rfind("@")
    elif place or scheme.lower() != "unix":  # unix:///path: an @ there is the socket's path
        at = rest.rfind("@")
    else:
        return None
    user, colon, _ = rest[:at].partition(":")
    if any(character in user for character in "/?#"):
        return offset, offset + at
    if colon:
        return offset + len(user) + 1, offset + at
    return None


def hidden_value_spans(url: str) -> Iterator[tuple[int, int]]:
    """Where the values not to show are: those of parameters that are secrets or unknown.

    A parameter starts after any ``?`` or ``&`` and ends at the next; its name is read as
    ``parse_qsl`` reads it (``pass%77ord`` is ``password``) and matched exactly, as redis-py
    and ``_check_query`` match it.
    """
    for piece in re.finditer(r"(?<=[?&])[^?&]*", url):
        name, equals, _ = piece.group().partition("=")
        if equals and not _shown_parameter(unquote_plus(name)):
            yield piece.start() + len(name) + 1, piece.end()


def _shown_parameter(name: str) -> bool:
    return name in URL_PARAMETERS and name not in _SECRET_PARAMS


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, those that overlap or touch made one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _place_end(rest: str) -> int:
    """Where the host part of a URL's text after ``://`` ends: its first ``/``, ``?`` or ``#``."""
    ends = [index for index in (rest.find(c) for c in "/?#") if index >= 0]
    return min(ends, default=len(rest))


def joined_url(scheme: str, netloc: str, path: str, query: str, fragment: str) -> str:
    """``urlunsplit``, but a ``unix://`` URL without user keeps its ``//``: the standard
    library writes ``unix:/path``, which redis-py does not take for a Redis URL."""
    url = urlunsplit((scheme, netloc, path, query, fragment))
    if scheme.lower() == "unix" and not netloc:
        url = f"{scheme}://{url[len(scheme) + 1 :]}"
    return url


def checked_url(url: str, origin: str) -> str:
    """``url`` with its scheme in lower case, or a ``ConfigurationError`` naming the fault."""
    if not url.strip():
        raise ConfigurationError(
            f"{origin} must not be empty: give a Redis URL ({_URL_FORM}), or leave the option "
            "out to use $REDIS_URL, else redis://localhost:6379/0"
        )
    stripped = url.strip()
    shown = (
        url[: url.index(stripped)]
        + shown_url(stripped)
        + url[url.index(stripped) + len(stripped) :]
    )
    if url != stripped:
        raise ConfigurationError(
            f"{origin} must not start or end with whitespace, got {shown!r}; accepted: {_URL_FORM}"
        )
    scheme = _SCHEME.match(url)
    if scheme is None or scheme.group(1).lower() not in SUPPORTED_SCHEMES:
        got = f"{scheme.group(1)}://..." if scheme else repr(shown)
        raise ConfigurationError(
            f"{origin} must be a Redis URL starting with redis://, rediss://, unix://, "
            f"redis+sentinel:// or rediss+sentinel://, got {got}; accepted: {_URL_FORM}"
        )
    kind = scheme.group(1).lower()
    url = kind + url[len(scheme.group(1)) :]
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed IPv6 bracket
        raise ConfigurationError(f"{origin} is not a valid URL ({exc}), got {shown!r}") from None
    rest = url.partition("://")[2]
    after_place = rest[_place_end(rest) :].partition("?")[0]  # an @ in the query is a value's
    in_socket_path = kind == "unix" and after_place.startswith("/")
    if "@" in after_place and not in_socket_path:
        raise ConfigurationError(
            f"{origin} holds a user or password with a character that must be percent-encoded, "
            f"got {shown!r}: write # as %23, / as %2F, ? as %3F, @ as %40 (or pass the password "
            "in option 'password')"
        )
    place = parts.netloc.rpartition("@")[2]
    if kind in SENTINEL_SCHEMES:
        pass  # read whole below, once its query is known to be sound
    elif kind == "unix":
        if not parts.path:
            raise ConfigurationError(
                f"{origin} names no socket path, got {shown!r}: write unix:///path/to/redis.sock"
            )
        if place not in ("", "localhost"):  # redis-py ignores the host of a socket URL
            raise ConfigurationError(
                f"{origin} names a host ({place!r}) before the socket path, got {shown!r}: a "
                "socket URL has three slashes, unix:///path/to/redis.sock"
            )
    else:
        try:
            port = parts.port
        except ValueError:
            port = -1
        if port in (-1, 0) or (port is None and place.endswith(":")):
            raise ConfigurationError(
                f"{origin} has an invalid port (host {parts.hostname!r}), got {shown!r}: a port "
                "is an integer from 1 to 65535 (or leave it out for 6379)"
            )
        path = parts.path
        if path not in ("", "/") and not re.fullmatch(r"/[0-9]+", path):
            raise ConfigurationError(
                f"{origin} has database path {path!r}, got {shown!r}: the path selects a "
                "database and must be a non-negative integer such as /0"
            )
    _check_query(parts.query, kind, origin, shown)
    if kind in SENTINEL_SCHEMES:
        sentinel_parts(url, origin, shown)
    return url


def _check_query(query: str, kind: str, origin: str, shown: str) -> None:
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in URL_PARAMETERS:  # its value may be a secret: shown as ***
            raise ConfigurationError(
                f"{origin} has unknown query parameter {name!r}, got {shown!r}; accepted "
                f"parameters: {', '.join(sorted(URL_PARAMETERS))}"
            )
        if name in _SENTINEL_ONLY_PARAMS and kind not in SENTINEL_SCHEMES:
            raise ConfigurationError(
                f"{origin} has query parameter {name}, which only a Sentinel URL takes, got "
                f"{shown!r}: use redis+sentinel:// (or rediss+sentinel://) naming the "
                f"Sentinels, or leave {name} out"
            )
        if name in _TLS_ONLY_PARAMS and kind not in ("rediss", "rediss+sentinel"):
            raise ConfigurationError(
                f"{origin} has query parameter {name}, which only a TLS URL takes, got "
                f"{shown!r}: use rediss:// for TLS, or leave {name} out"
            )
        if name in _TCP_ONLY_PARAMS and kind == "unix":
            raise ConfigurationError(
                f"{origin} has query parameter {name}, which a socket URL does not take (it "
                f"is for TCP), got {shown!r}: leave it out"
            )
        problem = _parameter_problem(name, value)
        if problem is not None:
            got = "***" if name in _SECRET_PARAMS else repr(value)
            raise ConfigurationError(
                f"{origin} has query parameter {name}={got}, {problem}: it must be "
                f"{URL_PARAMETERS[name]}"
            )


def _parameter_problem(name: str, value: str) -> str | None:
    """Why redis-py would fail on, or silently misread, ``name=value``; ``None`` if fine."""
    if name in (CONNECT_TIMEOUT_PARAM, READ_TIMEOUT_PARAM):
        return None if parse_seconds(value) is not None else "which is not a positive number"
    if name in ("db", "health_check_interval", "max_connections", "ssl_min_version"):
        if not re.fullmatch(r"[0-9]+", value.strip()):
            return "which is not a non-negative integer"
        if name == "max_connections" and int(value) == 0:
            return "which is zero"
        return None
    if name == "protocol":
        return None if value.strip() in ("2", "3") else "which is not a RESP version"
    if name in ("socket_keepalive", "ssl_check_hostname"):
        # no stripping: redis-py reads anything but a false word, " false" too, as true
        return None if value.lower() in _BOOLEANS else "which is not a boolean"
    if name == "client_name":  # empty: redis-py names no client
        printable = all(33 <= ord(character) <= 126 for character in value)
        return None if printable else "which holds a space or a character Redis refuses"
    if name == "ssl_cert_reqs":
        return None if value in _CERT_REQS else "which is not a certificate requirement"
    if name in _FILE_PARAMS:
        return None if os.path.isfile(value) else "but there is no such file"
    if name == "ssl_ca_path":
        return None if os.path.isdir(value) else "but there is no such directory"
    return None


def parse_seconds(text: str) -> float | None:
    """A positive, finite number of seconds, or ``None``."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


@dataclass(frozen=True)
class SentinelParts:
    """What a ``redis+sentinel://`` URL names: the Sentinels, the master's name, the database."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    database: int


def sentinel_parts(
    url: str, origin: str = "option 'url'", shown: str | None = None
) -> SentinelParts:
    """Read ``redis+sentinel://[user:password@]host[:port][,host[:port]...]/master-name[/db]``.

    The form is redis-py's ``Sentinel`` arguments written as one URL, as other clients write it
    (Lettuce's ``redis-sentinel://``, go-redis's failover options): every Sentinel (port 26379
    when left out), then the name they monitor the master under. Raises a
    ``ConfigurationError`` naming what is wrong.
    """
    shown = shown if shown is not None else shown_url(url)
    rest = url.partition("://")[2]
    end = _place_end(rest)
    place, path = rest[:end].rpartition("@")[2], urlsplit(url).path
    sentinels = []
    for piece in place.split(","):
        host, port = _host_and_port(piece)
        if not host or port is None:
            raise ConfigurationError(
                f"{origin} names a Sentinel {piece!r} that is not host[:port] (port 1-65535, "
                f"26379 when left out), got {shown!r}; accepted: {_URL_FORM}"
            )
        sentinels.append((host, port))
    names = [unquote_plus(part) for part in path.split("/")[1:]]
    if names[1:] == [""]:  # a trailing slash: /mymaster/
        names = names[:1]
    if not names or not names[0] or len(names) > 2:
        raise ConfigurationError(
            f"{origin} names no master, got {shown!r}: a Sentinel URL ends with the name the "
            "Sentinels monitor the master under (their 'sentinel monitor <name> ...'), then "
            "optionally the database: redis+sentinel://sentinel1:26379,sentinel2:26379/mymaster/0"
        )
    if len(names) == 2 and not re.fullmatch(r"[0-9]+", names[1]):
        raise ConfigurationError(
            f"{origin} has database {names[1]!r} after the master name, got {shown!r}: the "
            "database must be a non-negative integer such as /0"
        )
    query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    database = int(query["db"]) if "db" in query else int(names[1]) if len(names) == 2 else 0
    return SentinelParts(tuple(sentinels), names[0], database)


def _host_and_port(piece: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; the port ``None`` when invalid."""
    if piece.startswith("["):
        host, bracket, after = piece[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            return "", None
        port_text = after[1:] if after else ""
    else:
        host, colon, port_text = piece.partition(":")
        if colon and not port_text:
            return host, None
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not re.fullmatch(r"[0-9]{1,5}", port_text) or not 0 < int(port_text) < 65536:
        return host, None
    return host, int(port_text)

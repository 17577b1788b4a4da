"""Every command a Redis server runs while a ``CommandMonitor`` is open (MONITOR, on a thread of
its own): how tests and benchmarks see what a read asked Redis for."""

from __future__ import annotations

import threading
import uuid
from typing import Any


class CommandMonitor:
    """``commands``: each command's text as MONITOR shows it (``XRANGE key - + COUNT 10``).

    Leaving the block ECHOes a token of its own and waits until MONITOR has shown it, so every
    command run before is in ``commands``.
    """

    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=None)
        self.commands: list[str] = []
        self.token = f"monitor-end-{uuid.uuid4().hex}"
        self._monitor: Any = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CommandMonitor:
        self._monitor = self.client.monitor()  # type: ignore[no-untyped-call]
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()
        return self

    def _listen(self) -> None:
        for command in self._monitor.listen():
            if self.token in command["command"]:
                return
            self.commands.append(command["command"])

    def __exit__(self, *exc: object) -> None:
        import redis

        with redis.Redis.from_url(self.url) as other:
            other.echo(self.token)
        assert self._thread is not None
        self._thread.join(60)
        if self._thread.is_alive():
            raise RuntimeError("MONITOR did not show the end of its block within 60 s")
        self._monitor.__exit__()
        self.client.close()

    def split(self, *names: str) -> list[list[str]]:
        """The commands named (``XRANGE``, ...), each as its words."""
        wanted = {name.upper() for name in names}
        words = (command.split(" ") for command in self.commands)
        return [parts for parts in words if parts[0].upper() in wanted]

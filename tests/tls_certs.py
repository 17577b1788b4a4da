"""Throwaway TLS certificates for the tests, made with the ``openssl`` binary.

``make_certificates(folder)`` writes a CA, a server certificate for ``localhost``/``127.0.0.1``,
a client certificate, a server certificate for another name only (``other.example``) and a
second CA that signed none of them, all signed for a day with 2048-bit RSA keys.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA that signed server, client and other_name
    server: Pair  # CN localhost, SAN DNS:localhost, IP:127.0.0.1 (server and client auth)
    client: Pair  # CN atlasbus-client (client auth)
    other_name: Pair  # CN other.example, SAN DNS:other.example only
    wrong_ca: Path  # a CA that signed nothing here


def openssl_missing_reason() -> str | None:
    return None if shutil.which("openssl") else "the openssl binary is not on PATH"


def _openssl(*args: str | Path) -> None:
    result = subprocess.run(
        ["openssl", *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _ca(folder: Path, name: str) -> Pair:
    pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
    # fmt: off
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-sha256",
        "-subj", f"/CN={name}", "-keyout", pair.key, "-out", pair.cert,
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )
    # fmt: on
    return pair


def _signed(folder: Path, name: str, ca: Pair, common_name: str, extensions: str) -> Pair:
    pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
    request = folder / f"{name}.csr"
    extfile = folder / f"{name}.ext"
    extfile.write_text(extensions)
    # fmt: off
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={common_name}",
        "-keyout", pair.key, "-out", request,
    )
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
        "-days", "1", "-sha256", "-extfile", extfile, "-out", pair.cert,
    )
    # fmt: on
    return pair


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "ca")
    both = "extendedKeyUsage=serverAuth,clientAuth\n"
    server = _signed(
        folder, "server", ca, "localhost", both + "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
    )
    client = _signed(folder, "client", ca, "atlasbus-client", "extendedKeyUsage=clientAuth\n")
    other = _signed(
        folder, "other", ca, "other.example", both + "subjectAltName=DNS:other.example\n"
    )
    wrong_ca = _ca(folder, "wrong-ca")
    return Certificates(ca.cert, server, client, other, wrong_ca.cert)

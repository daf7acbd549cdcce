"""Certificates for the TLS tests, made with ``openssl`` in a folder of the test's own.

A CA that signs a server certificate for ``localhost`` (with subject alternative names
for the name and 127.0.0.1), a client certificate, and an expired server certificate;
and a second CA that signed none of them (a client that trusts only it cannot verify
the broker). Elliptic-curve keys: they take milliseconds to make.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

_SERVER_EXT = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

_CLIENT_EXT = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

# `openssl ca` is the one command of OpenSSL 3.0 that takes a start and an end date,
# which an expired certificate needs.
_CA_CONFIG = """\
[ca]
default_ca = test_ca

[test_ca]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any_name
unique_subject = no

[any_name]
commonName = supplied
"""


@dataclass(frozen=True)
class Certs:
    """Where each file is; every key is unencrypted PEM."""

    folder: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    expired_cert: Path
    expired_key: Path
    other_ca: Path


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(
        ["openssl", *args], cwd=folder, check=True, capture_output=True, text=True, timeout=30
    )


def _ca(folder: Path, name: str) -> None:
    _openssl(
        folder,
        "req", "-x509", *_KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "30",
        "-subj", f"/CN=queuey test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip


def _request(folder: Path, name: str, subject: str) -> None:
    _openssl(
        folder, "req", "-new", *_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
        "-subj", subject,
    )  # fmt: skip


def _sign(folder: Path, name: str, ext: str) -> None:
    (folder / f"{name}.ext").write_text(ext)
    _openssl(
        folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "30", "-sha256", "-extfile", f"{name}.ext",
        "-out", f"{name}.pem",
    )  # fmt: skip


def make_certs(folder: Path) -> Certs:
    """Make every certificate in ``folder`` (created if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "ca")
    _ca(folder, "other-ca")
    _request(folder, "server", "/CN=localhost")
    _sign(folder, "server", _SERVER_EXT)
    _request(folder, "client", "/CN=queuey-client")
    _sign(folder, "client", _CLIENT_EXT)

    _request(folder, "expired", "/CN=localhost")
    (folder / "expired.ext").write_text(_SERVER_EXT)
    (folder / "ca.cnf").write_text(_CA_CONFIG)
    (folder / "index.txt").write_text("")
    (folder / "serial").write_text("1000\n")
    _openssl(
        folder, "ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
        "-in", "expired.csr", "-out", "expired.pem", "-notext", "-extfile", "expired.ext",
        "-startdate", "20200101000000Z", "-enddate", "20200201000000Z",
    )  # fmt: skip
    return Certs(
        folder=folder,
        ca=folder / "ca.pem",
        server_cert=folder / "server.pem",
        server_key=folder / "server.key",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
        expired_cert=folder / "expired.pem",
        expired_key=folder / "expired.key",
        other_ca=folder / "other-ca.pem",
    )

"""Serving certificates for Lahar's servers: the embedded API server and the scheduler's report endpoint.

client-go (kubectl) sends a bearer token only to a TLS server, so a token-protected server speaks
HTTPS. Without certificates of its own it makes a small CA and a server certificate signed by it
under `<data-dir>/tls/`, once, and reuses them; `lahar up` and `lahar kubeconfig` put the CA in the
kubeconfig they write."""

from __future__ import annotations

import datetime
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cryptography is imported where a certificate is made: most starts only read files
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path | None  # the CA that signed cert, when we made it


def _name(common_name: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "lahar"), x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    from cryptography.hazmat.primitives import serialization

    path.touch(mode=0o600)
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _subject_names(hosts: list[str]) -> list[x509.GeneralName]:
    from cryptography import x509

    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", "::1", socket.gethostname(), *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def ensure_self_signed(directory: Path, hosts: list[str]) -> TlsFiles:
    """A CA and a server certificate for `hosts` (plus localhost), made once and kept."""
    files = TlsFiles(directory / "server.crt", directory / "server.key", directory / "ca.crt")
    if files.cert.exists() and files.key.exists() and files.ca is not None and files.ca.exists():
        return files
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("lahar-ca"))
        .issuer_name(_name("lahar-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("lahar-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(_subject_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(files.key, server_key)
    files.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    assert files.ca is not None
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return files

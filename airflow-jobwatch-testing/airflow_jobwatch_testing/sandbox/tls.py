"""A throw-away self-signed certificate for serving the sandbox over HTTPS.

Needed for kubectl (client-go's kubeconfig loader only sends user credentials, the bearer token,
when the transport is TLS, so against ``http://`` kubectl gets 401 however it is configured) and for
the in-cluster mode (the in-cluster loaders always speak ``https://`` and verify against ``ca.crt``).

The certificate is made in memory with ``cryptography``: an EC P-256 key, valid for one day, for the
host's IP address (or DNS name) and ``localhost``, marked as a CA so the certificate itself is the
client's trust anchor. The private key never touches the disk: :mod:`ssl` can only load a key from a
file, so it goes through a private temporary directory that is removed as soon as it is loaded.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# One day: the sandbox lives for one test run; a short life keeps a leaked certificate harmless.
CERT_VALIDITY = datetime.timedelta(days=1)
# Clock skew allowed between making the certificate and a client checking it.
CERT_BACKDATE = datetime.timedelta(minutes=5)


def _subject_alt_names(host: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        names.append(x509.DNSName(host))
    if host != "localhost":
        names.append(x509.DNSName("localhost"))
    return names


def self_signed_cert(host: str = "127.0.0.1") -> tuple[bytes, bytes]:
    """A fresh self-signed certificate for ``host``: ``(certificate PEM, private key PEM)``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k8s-sandbox")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CERT_BACKDATE)
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.SubjectAlternativeName(_subject_alt_names(host)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert_pem, key_pem


def self_signed_context(host: str = "127.0.0.1") -> tuple[ssl.SSLContext, bytes]:
    """Return a server SSL context with a fresh self-signed certificate, and the certificate PEM
    (the client's certificate authority)."""
    cert_pem, key_pem = self_signed_cert(host)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="k8s-sandbox-tls-") as tmp:
        cert = Path(tmp) / "cert.pem"
        key = Path(tmp) / "key.pem"
        cert.write_bytes(cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        context.load_cert_chain(str(cert), str(key))
    return context, cert_pem


def client_context(ca_pem: bytes | None) -> ssl.SSLContext | None:
    """An SSL context for a client that trusts ``ca_pem`` (None: no TLS, nothing to trust)."""
    if ca_pem is None:
        return None
    return ssl.create_default_context(cadata=ca_pem.decode())

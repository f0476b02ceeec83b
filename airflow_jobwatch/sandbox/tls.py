"""A throw-away self-signed certificate for serving the sandbox over HTTPS.

Needed for kubectl: client-go's kubeconfig loader only sends user credentials (the bearer token)
when the transport is TLS, so against ``http://`` kubectl gets 401 however it is configured. The
certificate is made by the ``openssl`` command line tool (the sandbox depends on aiohttp and the
standard library only), valid for 127.0.0.1 for one day, and the private key never leaves a
private temporary directory that is removed once the key is loaded.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

# Seconds to wait for openssl to make a key and certificate (milliseconds in practice).
OPENSSL_TIMEOUT_SECONDS = 30


def self_signed_context(host: str = "127.0.0.1") -> tuple[ssl.SSLContext, bytes]:
    """Return a server SSL context with a fresh self-signed certificate, and the certificate PEM
    (the client's certificate authority)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError(
            "Sandbox(tls=True) needs the `openssl` command to make a self-signed certificate; "
            "install openssl or use tls=False (kubectl then cannot authenticate)"
        )
    with tempfile.TemporaryDirectory(prefix="k8s-sandbox-tls-") as tmp:
        key = Path(tmp) / "key.pem"
        cert = Path(tmp) / "cert.pem"
        san = f"IP:{host}" if host.replace(".", "").isdigit() else f"DNS:{host}"
        result = subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-days",
                "1",
                "-subj",
                "/CN=k8s-sandbox",
                "-addext",
                f"subjectAltName={san}",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
            ],
            capture_output=True,
            timeout=OPENSSL_TIMEOUT_SECONDS,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"openssl could not make the sandbox certificate (exit {result.returncode}): "
                f"{result.stderr.decode(errors='replace').strip()}"
            )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert), str(key))
        return context, cert.read_bytes()

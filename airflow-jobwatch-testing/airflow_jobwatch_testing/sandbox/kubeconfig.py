"""Writing a kubeconfig that points at the sandbox: with a bearer token, or with an exec plugin."""

from __future__ import annotations

import base64
import json
import os
import sys
from typing import Any

# The exec credential API version the sandbox's credential command speaks (client-go's current one).
EXEC_API_VERSION = "client.authentication.k8s.io/v1"


def _config(url: str, user: dict[str, Any], *, name: str, ca_pem: bytes | None, namespace: str) -> str:
    cluster: dict[str, Any] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }
    return json.dumps(config, indent=2) + "\n"


def kubeconfig_text(
    url: str, token: str, *, name: str = "sandbox", ca_pem: bytes | None = None, namespace: str = "default"
) -> str:
    """A kubeconfig for the sandbox (YAML is a superset of JSON, so JSON keeps this stdlib-only)."""
    return _config(url, {"token": token}, name=name, ca_pem=ca_pem, namespace=namespace)


def exec_kubeconfig_text(
    url: str,
    *,
    key_file: str,
    user: str,
    token_ttl: float,
    name: str = "sandbox-exec",
    ca_pem: bytes | None = None,
    namespace: str = "default",
) -> str:
    """A kubeconfig whose user runs ``python -m airflow_jobwatch_testing.sandbox.credential`` (an exec plugin,
    like ``aws eks get-token`` or ``gke-gcloud-auth-plugin``) for a token valid ``token_ttl`` seconds."""
    exec_config = {
        "apiVersion": EXEC_API_VERSION,
        "command": sys.executable,
        "args": [
            "-m",
            "airflow_jobwatch_testing.sandbox.credential",
            "--key-file",
            key_file,
            "--user",
            user,
            "--ttl",
            repr(float(token_ttl)),
        ],
        "interactiveMode": "Never",
        "provideClusterInfo": False,
    }
    return _config(url, {"exec": exec_config}, name=name, ca_pem=ca_pem, namespace=namespace)


def write_private_file(path: str | os.PathLike[str], text: str | bytes) -> str:
    """Write ``text`` to ``path`` with mode 0600 from the start (it holds a credential)."""
    path_str = os.fspath(path)
    fd = os.open(path_str, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(text.encode() if isinstance(text, str) else text)
    os.chmod(path_str, 0o600)
    return path_str


def write_kubeconfig_file(
    path: str | os.PathLike[str], url: str, token: str, *, ca_pem: bytes | None = None
) -> str:
    """Write the kubeconfig with mode 0600 from the start (it holds a bearer token)."""
    return write_private_file(path, kubeconfig_text(url, token, ca_pem=ca_pem))


__all__ = [
    "EXEC_API_VERSION",
    "exec_kubeconfig_text",
    "kubeconfig_text",
    "write_kubeconfig_file",
    "write_private_file",
]

"""Writing a kubeconfig that points at the sandbox."""

from __future__ import annotations

import base64
import json
import os
from typing import Any


def kubeconfig_text(url: str, token: str, *, name: str = "sandbox", ca_pem: bytes | None = None) -> str:
    """A kubeconfig for the sandbox (YAML is a superset of JSON, so JSON keeps this stdlib-only)."""
    cluster: dict[str, Any] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }
    return json.dumps(config, indent=2) + "\n"


def write_kubeconfig_file(
    path: str | os.PathLike[str], url: str, token: str, *, ca_pem: bytes | None = None
) -> str:
    """Write the kubeconfig with mode 0600 from the start (it holds a bearer token)."""
    path_str = os.fspath(path)
    fd = os.open(path_str, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(kubeconfig_text(url, token, ca_pem=ca_pem))
    os.chmod(path_str, 0o600)
    return path_str


__all__ = ["kubeconfig_text", "write_kubeconfig_file"]

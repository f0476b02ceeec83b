"""Pointing the in-cluster loaders at a sandbox: what a pod sees, written to a temporary directory.

A pod gets ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` in its environment and its service
account's ``token`` and ``ca.crt`` mounted at /var/run/secrets/kubernetes.io/serviceaccount. The
sandbox (``tls=True``) plays the API server; ``$JOBWATCH_SERVICE_ACCOUNT_DIR`` points our loaders at
the directory (the libraries' own ``InClusterConfigLoader`` reads the files). No ~/.kube/config and
no ``$KUBECONFIG`` exist, as in a Helm-chart pod.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow_jobwatch.kube.cluster.client import SERVICE_ACCOUNT_DIR_ENV

#: The service account a test pod runs as.
POD_USER = "system:serviceaccount:default:default"


def cluster_token(sandbox: Any, user: str = POD_USER) -> str:
    """A token the sandbox accepts for ``user`` (a signed one where the sandbox issues them)."""
    issue = getattr(sandbox, "issue_token", None)
    return str(issue(user)) if issue is not None else str(sandbox.token)


def rotate_cluster_token(sandbox: Any, old: str, user: str = POD_USER) -> str:
    """The cluster refuses ``old`` from now on (401) and accepts the returned new token."""
    if getattr(sandbox, "expire_token", None) is not None:
        new = str(sandbox.issue_token(user))
        sandbox.expire_token(old)
        return new
    import secrets

    new = secrets.token_urlsafe(24)
    sandbox.sandbox.token = new  # a sandbox with one accepted token
    return new


def enter_pod(sandbox: Any, directory: Path, monkeypatch: Any, *, token: str | None = None) -> Path:
    """Make this process (and the processes it spawns) look like a pod of the sandbox's cluster.

    Returns the token file (rewrite it to rotate the token, as the kubelet does).
    """
    assert sandbox.url.startswith("https://"), (
        "in-cluster clients speak https: start the sandbox with tls=True"
    )
    directory.mkdir(parents=True, exist_ok=True)
    token_file = directory / "token"
    token_file.write_text(token if token is not None else cluster_token(sandbox))
    (directory / "ca.crt").write_bytes(sandbox.sandbox.ca_pem)
    host, port = sandbox.url.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setenv(SERVICE_ACCOUNT_DIR_ENV, str(directory))
    # No kubeconfig anywhere: a client that reads one fails loudly.
    home = directory.parent / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert not os.path.exists(os.path.expanduser("~/.kube/config"))
    return token_file


def rotate_token(token_file: Path, token: str) -> None:
    """Replace the token the way the kubelet does: a new file swapped in (new inode), never a partial write."""
    tmp = token_file.with_name(".token.tmp")
    tmp.write_text(token)
    os.replace(tmp, token_file)

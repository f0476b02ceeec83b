"""In-cluster mode: a service-account directory like ``/var/run/secrets/kubernetes.io/serviceaccount``.

A pod's service-account volume holds three files, ``token``, ``ca.crt`` and ``namespace``. The
kubelet writes them with its *atomic writer* (``pkg/volume/util/atomic_writer.go``): the files live in
a timestamped directory ``..<timestamp>``, a symlink ``..data`` points at it, and each visible name
(``token``) is a symlink to ``..data/token``. A rotation writes a new timestamped directory and swaps
``..data`` with one ``rename()``, so a reader that re-opens ``token`` sees either the old or the new
token, never a half-written one. The projected token is rotated when it is older than 80% of its
lifetime (``pkg/kubelet/token/token_manager.go``, ``requiresRefresh``); the old token keeps working
until its own expiry.

The matching environment is ``KUBERNETES_SERVICE_HOST`` / ``KUBERNETES_SERVICE_PORT``, which
``load_incluster_config()`` turns into ``https://host:port``: in-cluster mode needs ``tls=True``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Any

TOKEN = "token"
CA_CRT = "ca.crt"
NAMESPACE = "namespace"
DATA_LINK = "..data"
# The kubelet renews a projected token once 80% of its lifetime has passed.
ROTATE_AT_SHARE_OF_TTL = 0.8


def parse_service_account(text: str) -> tuple[str, str]:
    """``"ns:name"`` -> ``("ns", "name")``, with a clear error for anything else."""
    ns, sep, name = text.partition(":")
    if not sep or not ns or not name or ":" in name:
        raise ValueError(
            f"service account {text!r} is not of the form 'namespace:name' (e.g. 'airflow:airflow-worker')"
        )
    return ns, name


class ServiceAccountVolume:
    """Writes and rotates the three files of a service-account volume in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)

    @property
    def token_path(self) -> Path:
        return self.dir / TOKEN

    @property
    def ca_path(self) -> Path:
        return self.dir / CA_CRT

    @property
    def namespace_path(self) -> Path:
        return self.dir / NAMESPACE

    def write(self, *, token: str, ca_pem: bytes, namespace: str) -> None:
        """Publish a new set of files atomically (what the kubelet does on mount and on every rotation)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime()) + f".{time.time_ns() % 10**9:09d}"
        target = self.dir / f"..{stamp}"
        target.mkdir(mode=0o700)
        for name, data in ((TOKEN, token.encode()), (CA_CRT, ca_pem), (NAMESPACE, namespace.encode())):
            fd = os.open(target / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        data_link = self.dir / DATA_LINK
        old_target = os.readlink(data_link) if data_link.is_symlink() else None
        tmp_link = self.dir / f"..data_tmp.{os.getpid()}"
        if tmp_link.is_symlink():
            tmp_link.unlink()
        os.symlink(target.name, tmp_link)
        os.replace(tmp_link, data_link)  # the one atomic step
        for name in (TOKEN, CA_CRT, NAMESPACE):
            visible = self.dir / name
            if not visible.is_symlink():
                if visible.exists():
                    visible.unlink()
                os.symlink(f"{DATA_LINK}/{name}", visible)
        if old_target is not None and old_target != target.name:
            shutil.rmtree(self.dir / old_target, ignore_errors=True)

    def read_token(self) -> str:
        return self.token_path.read_text()


@dataclasses.dataclass
class InCluster(ServiceAccountVolume):
    """A pod's view of a sandbox in in-cluster mode (what the ``in_cluster`` test fixture returns): its
    service-account volume (the file paths of :class:`ServiceAccountVolume`) plus who and where it is.

    :param sandbox: the :class:`~.thread.SandboxThread` (or anything with its
        ``rotate_service_account_token``).
    :param dir: the service-account volume.
    :param user: ``system:serviceaccount:<namespace>:<name>``.
    :param env: ``KUBERNETES_SERVICE_HOST`` / ``KUBERNETES_SERVICE_PORT``.
    """

    sandbox: Any
    dir: Path
    user: str
    env: dict[str, str]

    @property
    def token(self) -> str:
        """The token in the file now."""
        return self.read_token()

    def rotate(self, *, expire_old: bool = False) -> str:
        """Write a new token to the token file, like the kubelet; returns it."""
        return str(self.sandbox.rotate_service_account_token(expire_old=expire_old))


__all__ = ["ROTATE_AT_SHARE_OF_TTL", "InCluster", "ServiceAccountVolume", "parse_service_account"]

"""Public helpers for testing your own DAGs against the embedded Kubernetes sandbox.

This module is a supported API (see docs/testing.md): it runs the sandbox in a background thread of the
test process, with its fault injection, and points Airflow's Kubernetes connection at it, so that a test
can run a ``KubernetesJobOperator`` (or any code that uses a Kubernetes connection or a kubeconfig)
without a cluster::

    from airflow_jobwatch.testing import kubernetes_sandbox

    def test_my_job(tmp_path, monkeypatch):
        with kubernetes_sandbox(tmp_path / "kubeconfig") as sb:
            monkeypatch.setenv(*sb.connection_env("kubernetes_default"))
            ...  # run your task; sb.thread.drop_watches(), sb.thread.evict_pod(ns, name), ...
            assert sb.thread.objects("jobs", "default")

The repository's own end-to-end harness (``airflow_jobwatch.devtools``: whole Airflow installations
started from the source tree) is not part of the wheel.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_jobwatch.sandbox import AdminClient, Sandbox, SandboxProcess, SandboxStartError, SandboxThread


@dataclass(frozen=True)
class RunningSandbox:
    """A started sandbox and the kubeconfig that reaches it.

    :ivar thread: the :class:`~airflow_jobwatch.sandbox.SandboxThread` (faults, server-side objects).
    :ivar kubeconfig: path of the kubeconfig written for it (a random bearer token; keep it private).
    """

    thread: SandboxThread
    kubeconfig: Path

    @property
    def url(self) -> str:
        """The sandbox's API server URL (``http://127.0.0.1:PORT``)."""
        return self.thread.url

    def connection_extra(self, *, namespace: str = "default") -> dict[str, Any]:
        """The ``extra`` of an Airflow ``kubernetes`` connection that reaches this sandbox."""
        return {"kube_config_path": str(self.kubeconfig), "namespace": namespace, "in_cluster": False}

    def connection_env(self, conn_id: str, *, namespace: str = "default") -> tuple[str, str]:
        """``(name, value)`` of an ``AIRFLOW_CONN_<CONN_ID>`` variable defining a ``kubernetes``
        connection to this sandbox (for ``monkeypatch.setenv(*...)`` or ``os.environ``)."""
        value = json.dumps({"conn_type": "kubernetes", "extra": self.connection_extra(namespace=namespace)})
        return f"AIRFLOW_CONN_{conn_id.upper()}", value


@contextmanager
def kubernetes_sandbox(kubeconfig: str | os.PathLike[str], **options: Any) -> Iterator[RunningSandbox]:
    """Run the sandbox in a background thread for the duration of the ``with`` block.

    :param kubeconfig: where to write a kubeconfig for it (its directory must exist).
    :param options: passed to :class:`~airflow_jobwatch.sandbox.Sandbox` (for example
        ``history_window=1`` to make every resumed watch meet ``410 Gone``).
    """
    thread = SandboxThread(**options).start()
    try:
        path = Path(kubeconfig)
        thread.write_kubeconfig(path)
        yield RunningSandbox(thread=thread, kubeconfig=path)
    finally:
        thread.stop()


__all__ = [
    "AdminClient",
    "RunningSandbox",
    "Sandbox",
    "SandboxProcess",
    "SandboxStartError",
    "SandboxThread",
    "kubernetes_sandbox",
]

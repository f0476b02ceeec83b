"""Test your own DAGs against the embedded Kubernetes sandbox: the testing distribution of airflow-jobwatch
(``pip install "airflow-jobwatch[testing]"``), a supported API (see docs/testing.md).

* :func:`run_dag`: runs one DAG with ``dag.test()`` in a fresh Airflow (its own ``AIRFLOW_HOME``, a
  migrated SQLite database, a ``dags_folder`` holding the DAG file) and returns each task's state,
  XComs and log text::

      from airflow_jobwatch_testing import run_dag

      def test_hello(jobwatch_sandbox):
          run = run_dag("dags/hello_job.py")
          assert run.state == "success", run.log

* the ``jobwatch_sandbox`` fixture of its pytest plugin (:mod:`airflow_jobwatch_testing.plugin`, which
  pytest loads through the ``pytest11`` entry point): a running sandbox (a real HTTP Kubernetes API with
  a Job controller and a kubelet that runs containers' commands as local processes), its kubeconfig,
  and the Airflow connection ``kubernetes_default`` pointing at it (``AIRFLOW_CONN_KUBERNETES_DEFAULT``,
  for the test's duration); its fault helpers (:meth:`RunningSandbox.drop_watches`,
  :meth:`RunningSandbox.answer_410`, :meth:`RunningSandbox.evict_pod`, ...);
* :func:`kubernetes_sandbox`: the same sandbox as a context manager, without pytest;
* :mod:`airflow_jobwatch_testing.sandbox`: the sandbox itself (``python -m airflow_jobwatch_testing.sandbox``).

This module imports neither pytest nor Airflow nor the sandbox when it is loaded: the sandbox's small
entry points (``python -m airflow_jobwatch_testing.sandbox.credential``, an exec plugin a client may run
before every request) import it as their parent package.

May import the provider (``airflow_jobwatch``); the sandbox imports nothing of either.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_jobwatch_testing.dagrun import DagRunError, DagRunResult, TaskResult, run_dag
    from airflow_jobwatch_testing.sandbox import (
        AdminClient,
        Sandbox,
        SandboxProcess,
        SandboxStartError,
        SandboxThread,
    )

# Loaded when first used: the sandbox (aiohttp) and run_dag (subprocess, tempfile, shutil) are not
# imported when pytest loads the plugin, nor when the sandbox's small entry points load this package as
# their parent.
_LAZY = {
    **dict.fromkeys(("DagRunError", "DagRunResult", "TaskResult", "run_dag"), ".dagrun"),
    **dict.fromkeys(
        ("AdminClient", "Sandbox", "SandboxProcess", "SandboxStartError", "SandboxThread"), ".sandbox"
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


#: The connection id the ``jobwatch_sandbox`` fixture defines (the provider's default ``kubernetes_conn_id``).
DEFAULT_CONN_ID = "kubernetes_default"


@dataclass(frozen=True)
class RunningSandbox:
    """A started sandbox and the kubeconfig that reaches it.

    :ivar thread: the :class:`~airflow_jobwatch_testing.sandbox.SandboxThread` (every fault, server-side objects).
    :ivar kubeconfig: path of the kubeconfig written for it (a random bearer token; keep it private).
    """

    thread: SandboxThread
    kubeconfig: Path
    #: The Airflow connection id that reaches the sandbox (the ``jobwatch_sandbox`` fixture defines it).
    conn_id: str = "kubernetes_default"
    #: The namespace the connection names; it exists in the sandbox.
    namespace: str = "default"

    @property
    def url(self) -> str:
        """The sandbox's API server URL (``http://127.0.0.1:PORT``)."""
        return self.thread.url

    @property
    def env(self) -> dict[str, str]:
        """The environment that points Airflow and the Kubernetes clients at this sandbox: the
        connection ``conn_id`` (``AIRFLOW_CONN_<CONN_ID>``), ``[kubernetes_executor] config_file``,
        ``in_cluster`` and ``namespace``, and ``KUBECONFIG`` (what a client built with no connection and
        no ``config_file`` reads). The ``jobwatch_sandbox`` fixture sets all of it for the test."""
        name, value = self.connection_env(self.conn_id, namespace=self.namespace)
        return {
            name: value,
            "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": str(self.kubeconfig),
            "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
            "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": self.namespace,
            "KUBECONFIG": str(self.kubeconfig),
        }

    def connection_extra(self, *, namespace: str = "default") -> dict[str, Any]:
        """The ``extra`` of an Airflow ``kubernetes`` connection that reaches this sandbox."""
        return {"kube_config_path": str(self.kubeconfig), "namespace": namespace, "in_cluster": False}

    def connection_env(self, conn_id: str, *, namespace: str = "default") -> tuple[str, str]:
        """``(name, value)`` of an ``AIRFLOW_CONN_<CONN_ID>`` variable defining a ``kubernetes``
        connection to this sandbox (for ``monkeypatch.setenv(*...)`` or ``os.environ``)."""
        value = json.dumps({"conn_type": "kubernetes", "extra": self.connection_extra(namespace=namespace)})
        return f"AIRFLOW_CONN_{conn_id.upper()}", value

    # -- faults ---------------------------------------------------------------------------------------
    def drop_watches(self) -> int:
        """Cut every open watch connection now, as a load balancer or an API server restart does.
        Returns how many were cut."""
        return self.thread.drop_watches()

    def answer_410(self, on: bool = True) -> None:
        """While on, every watch resumed from a ``resourceVersion`` gets ``410 Gone`` at once (the
        server's history no longer holds it), so clients must list again. Combine with
        :meth:`drop_watches` to make every open watch meet it now."""
        self.thread.set_watch_expired(on)

    def evict_pod(self, namespace: str, name: str) -> None:
        """Kill the pod's processes and mark it ``Failed``/``Evicted``, as a kubelet under memory
        pressure does."""
        self.thread.evict_pod(namespace, name)

    # -- what the server holds -------------------------------------------------------------------------
    def pods(self, namespace: str = "default") -> list[dict[str, Any]]:
        """The pods the server holds in ``namespace`` (as ``GET`` returns them)."""
        return self.thread.objects("pods", namespace)

    def jobs(self, namespace: str = "default") -> list[dict[str, Any]]:
        """The Jobs the server holds in ``namespace``."""
        return self.thread.objects("jobs", namespace)

    def wait_for_pod(
        self,
        namespace: str = "default",
        *,
        phase: str | None = "Running",
        where: Callable[[dict[str, Any]], bool] | None = None,
        timeout: float = 120.0,
    ) -> dict[str, Any]:
        """The first pod of ``namespace`` in ``phase`` (any phase with ``None``) for which ``where``
        holds; waits for one up to ``timeout`` seconds, then raises ``TimeoutError``."""
        deadline = time.monotonic() + timeout
        while True:
            for pod in self.pods(namespace):
                if (phase is None or (pod.get("status") or {}).get("phase") == phase) and (
                    where is None or where(pod)
                ):
                    return pod
            if time.monotonic() > deadline:
                seen = {
                    p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in self.pods(namespace)
                }
                raise TimeoutError(
                    f"no pod in namespace {namespace!r} with phase {phase!r} matching the condition "
                    f"after {timeout:.0f} s; pods: {seen}"
                )
            time.sleep(0.1)


@contextmanager
def kubernetes_sandbox(kubeconfig: str | os.PathLike[str], **options: Any) -> Iterator[RunningSandbox]:
    """Run the sandbox in a background thread for the duration of the ``with`` block.

    :param kubeconfig: where to write a kubeconfig for it (its directory must exist).
    :param options: passed to :class:`~airflow_jobwatch_testing.sandbox.Sandbox` (for example
        ``history_window=1`` to make every resumed watch meet ``410 Gone``).
    """
    from airflow_jobwatch_testing.sandbox import SandboxThread

    thread = SandboxThread(**options).start()
    try:
        path = Path(kubeconfig)
        thread.write_kubeconfig(path)
        yield RunningSandbox(thread=thread, kubeconfig=path)
    finally:
        thread.stop()


__all__ = [
    "DEFAULT_CONN_ID",
    "AdminClient",
    "DagRunError",
    "DagRunResult",
    "RunningSandbox",
    "Sandbox",
    "SandboxProcess",
    "SandboxStartError",
    "SandboxThread",
    "TaskResult",
    "kubernetes_sandbox",
    "run_dag",
]

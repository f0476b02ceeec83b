"""Shared fixtures: a Kubernetes API sandbox per test, its kubeconfig, and an async client for it.

Options of the sandbox can be set per test with the ``sandbox`` marker::

    @pytest.mark.sandbox(history_window=1, bookmark_interval=None)
    def test_something(sandbox): ...

Real-deployment modes (docs/sandbox.md has the full list):

* ``in_cluster``: a service-account volume and ``KUBERNETES_SERVICE_HOST/PORT``, with both Python
  clients' in-cluster loaders pointed at it (options: ``@pytest.mark.in_cluster(...)``);
* ``exec_kubeconfig``: a kubeconfig whose user is an exec plugin handing out short-lived tokens
  (options: ``@pytest.mark.exec_credential(user=..., token_ttl=...)``);
* ``rbac``: RBAC switched on, and kubeconfigs for users with their own tokens.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from airflow_jobwatch_testing.sandbox import SandboxThread
from airflow_jobwatch_testing.sandbox.incluster import InCluster
from airflow_jobwatch_testing.sandbox.rbac import RbacUsers

# The testing distribution's pytest plugin (its `jobwatch_sandbox` fixture), also where its package is on the
# path but not installed; where it is installed, its pytest11 entry point has the same name and this is a
# no-op.
pytest_plugins = ["airflow_jobwatch_testing.plugin"]

# Property tests explore new examples on every run where they are developed; CI (`.ci/run` sets
# HYPOTHESIS_PROFILE=ci) runs the same examples every time, so that a merge is never refused for an
# example no one has seen before. A failure found locally is added as an explicit @example.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Bookmarks every 0.5 s so tests that rely on them don't wait for the 5 s production-like default.
TEST_BOOKMARK_INTERVAL = 0.5


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM (CI stopping the jobs beside a failed `make test`, a developer's `kill`) ends the run as
    # Ctrl-C does: pytest then tears its fixtures down, so an end-to-end stack's Airflow processes and
    # its PostgreSQL server (each in a session of its own) are stopped instead of left running.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    ):
        signal.signal(signal.SIGTERM, _interrupt)
    config.addinivalue_line(
        "markers",
        "sandbox(**options): keyword options for the `sandbox` fixture's SandboxThread "
        "(history_window, bookmark_interval, kubelet, job_controller, pod_start_delay, ...)",
    )
    config.addinivalue_line(
        "markers",
        "in_cluster(**options): options of the `in_cluster` fixture "
        "(service_account='ns:name', token_ttl=seconds, rotate=bool)",
    )
    config.addinivalue_line(
        "markers",
        "exec_credential(**options): options of the `exec_kubeconfig` fixture (user=..., token_ttl=seconds)",
    )


def sandbox_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    options: dict[str, Any] = {"bookmark_interval": TEST_BOOKMARK_INTERVAL}
    marker = request.node.get_closest_marker("sandbox")
    if marker is not None:
        if marker.args:
            raise pytest.UsageError("@pytest.mark.sandbox takes keyword options only, e.g. history_window=1")
        options.update(marker.kwargs)
    if "in_cluster" in request.fixturenames:
        # load_incluster_config() always speaks https:// and verifies against ca.crt.
        options["tls"] = True
    return options


def _marker_options(request: pytest.FixtureRequest, name: str) -> dict[str, Any]:
    marker = request.node.get_closest_marker(name)
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(f"@pytest.mark.{name} takes keyword options only")
    return dict(marker.kwargs)


#: Every Airflow deployment has a ``[core] fernet_key`` (Airflow writes one into a new ``airflow.cfg``).
#: The tests get a fixed one, whatever ``airflow.cfg`` the machine has (it signs the Job results the
#: triggerer stores); a test of a deployment without one sets it empty.
TEST_FERNET_KEY = "x0I2sOMGJ6b4CsFHbHHmTWi54YfAJVuZuHYjWnZ8pN0="


@pytest.fixture(autouse=True)
def _fernet_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", TEST_FERNET_KEY)


@pytest.fixture
def sandbox(request: pytest.FixtureRequest) -> Iterator[SandboxThread]:
    """A fresh sandbox API server (own event loop in a daemon thread) for one test."""
    with SandboxThread(**sandbox_options(request)) as sb:
        yield sb


@pytest.fixture
def kubeconfig(sandbox: SandboxThread, tmp_path: Path) -> Path:
    """A kubeconfig (mode 0600) pointing at the test's sandbox, current-context set."""
    path = tmp_path / "kubeconfig"
    sandbox.write_kubeconfig(path)
    return path


@pytest.fixture
async def k8s_async_client(kubeconfig: Path) -> AsyncIterator[Any]:
    """A ``kubernetes_asyncio.client.ApiClient`` configured from the sandbox kubeconfig."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    api_client = client.ApiClient(configuration)
    try:
        yield api_client
    finally:
        await api_client.close()


@pytest.fixture
def in_cluster(
    sandbox: SandboxThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> InCluster:
    """The sandbox seen from inside a pod: a service-account volume (token, ca.crt, namespace) in a
    temporary directory, ``KUBERNETES_SERVICE_HOST``/``PORT`` in the environment, and the token/CA
    paths of ``kubernetes.config.incluster_config`` and ``kubernetes_asyncio.config.incluster_config``
    pointed at it, so ``load_incluster_config()`` (and cncf.kubernetes' ``in_cluster=True``) connect
    to the sandbox. Options: ``@pytest.mark.in_cluster(service_account="ns:name", token_ttl=S, rotate=True)``.
    The sandbox runs with TLS for this fixture.
    """
    import kubernetes.config.incluster_config as sync_incluster
    import kubernetes_asyncio.config.incluster_config as async_incluster

    directory = tmp_path / "serviceaccount"
    info = sandbox.enable_in_cluster(directory, **_marker_options(request, "in_cluster"))
    env = sandbox.in_cluster_env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for module in (sync_incluster, async_incluster):
        monkeypatch.setattr(module, "SERVICE_TOKEN_FILENAME", info["token"])
        monkeypatch.setattr(module, "SERVICE_CERT_FILENAME", info["ca.crt"])
    return InCluster(sandbox=sandbox, dir=directory, user=info["user"], env=env)


@pytest.fixture
def exec_kubeconfig(sandbox: SandboxThread, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A kubeconfig whose user is the exec plugin ``python -m airflow_jobwatch_testing.sandbox.credential``
    (tokens for ``sandbox-exec-user`` valid 60 s by default; the server answers 401 after that).
    Options: ``@pytest.mark.exec_credential(user="...", token_ttl=S)``."""
    path = tmp_path / "exec-kubeconfig"
    sandbox.write_exec_kubeconfig(path, **_marker_options(request, "exec_credential"))
    return path


@pytest.fixture
def tls_sandbox(request: pytest.FixtureRequest) -> Iterator[SandboxThread]:
    """A sandbox serving HTTPS with a throw-away self-signed certificate (``sandbox.sandbox.ca_pem``)."""
    with SandboxThread(**{**sandbox_options(request), "tls": True}) as sb:
        yield sb


@pytest.fixture
def rbac(sandbox: SandboxThread, tmp_path: Path) -> RbacUsers:
    """RBAC on for the test's sandbox (every user but the admin token needs a rule; 403 otherwise).
    ``rbac.kubeconfig(user, ttl=None)`` -> kubeconfig Path for a new token of ``user``;
    ``rbac.grant(user, verbs=[...], resources=[...], namespace=None)``; ``rbac.load(yaml_text)``.
    With ``in_cluster``, grant to ``in_cluster.user``."""
    sandbox.set_rbac(True)
    directory = tmp_path / "rbac"
    directory.mkdir()
    return RbacUsers(sandbox, directory)

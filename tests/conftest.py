"""Shared fixtures: a Kubernetes API sandbox per test, its kubeconfig, and an async client for it.

Options of the sandbox can be set per test with the ``sandbox`` marker::

    @pytest.mark.sandbox(history_window=1, bookmark_interval=None)
    def test_something(sandbox): ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.sandbox import SandboxThread

# Bookmarks every 0.5 s so tests that rely on them don't wait for the 5 s production-like default.
TEST_BOOKMARK_INTERVAL = 0.5


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sandbox(**options): keyword options for the `sandbox` fixture's SandboxThread "
        "(history_window, bookmark_interval, kubelet, job_controller, pod_start_delay, ...)",
    )


def sandbox_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    options: dict[str, Any] = {"bookmark_interval": TEST_BOOKMARK_INTERVAL}
    marker = request.node.get_closest_marker("sandbox")
    if marker is not None:
        if marker.args:
            raise pytest.UsageError("@pytest.mark.sandbox takes keyword options only, e.g. history_window=1")
        options.update(marker.kwargs)
    return options


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
def tls_sandbox(request: pytest.FixtureRequest) -> Iterator[SandboxThread]:
    """A sandbox serving HTTPS with a throw-away self-signed certificate (``sandbox.sandbox.ca_pem``)."""
    with SandboxThread(**{**sandbox_options(request), "tls": True}) as sb:
        yield sb

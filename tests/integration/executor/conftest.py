"""Fixtures for the KubernetesJobWatcher tests: a sandbox, a sync client, and a supervisor factory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.kube.client import ClusterConfig, sync_api_client
from airflow_jobwatch.sandbox import SandboxThread


@pytest.fixture
def kube_sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SandboxThread, str]]:
    marker = request.node.get_closest_marker("sandbox_opts")
    opts: dict[str, Any] = {"bookmark_interval": 1.0}
    if marker is not None:
        opts.update(marker.kwargs)
    with SandboxThread(**opts) as sb:
        kubeconfig = sb.write_kubeconfig(str(tmp_path / "kubeconfig"))
        yield sb, str(kubeconfig)


@pytest.fixture
def core_v1(kube_sandbox: tuple[SandboxThread, str]) -> Iterator[Any]:
    from kubernetes.client import CoreV1Api

    api = sync_api_client(ClusterConfig(config_file=kube_sandbox[1]))
    try:
        yield CoreV1Api(api)
    finally:
        api.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sandbox_opts(**kwargs): options of the kube_sandbox fixture")

"""Fixtures for the executor tests: a sandbox, a sync client, and a JobWatchExecutor factory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.kube.cluster.client import ClusterConfig, sync_api_client
from airflow_jobwatch_testing.pod_template import pod_template_yaml
from airflow_jobwatch_testing.sandbox import SandboxThread


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


@pytest.fixture(autouse=True)
def launches_held_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """These harnesses have no task instance rows: every launch is answered as this scheduler's, as the
    database would for a scheduler never taken for dead (a test of that check answers otherwise). The
    patch raises if the function is renamed, rather than leave the executor asking the real database."""
    from airflow_jobwatch.executors import results

    monkeypatch.setattr(results, "launches_held", lambda launches, job_id: dict.fromkeys(launches, True))


@pytest.fixture
def executor_factory(kube_sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``make(job_id="42", kubeconfig=None, **env)`` -> a started JobWatchExecutor (ended at teardown).

    ``kubeconfig`` replaces the sandbox's (e.g. one pointing at a fault proxy); ``env`` are extra
    ``AIRFLOW__...`` settings.
    """
    _, kubeconfig = kube_sandbox
    template = tmp_path / "pod_template.yaml"
    template.write_text(pod_template_yaml())
    env = {
        "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": kubeconfig,
        "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
        "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": "default",
        "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
        "AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS": "True",
        "AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS_ON_FAILURE": "False",
        "AIRFLOW__KUBERNETES_EXECUTOR__WORKER_PODS_CREATION_BATCH_SIZE": "8",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path / "logs"),
        "AIRFLOW__JOBWATCH__BACKOFF_INITIAL_SECONDS": "0.1",
        "AIRFLOW__JOBWATCH__BACKOFF_MAX_SECONDS": "1",
        "AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS": "5",
        "AIRFLOW__JOBWATCH__WATCH_STALL_TIMEOUT_SECONDS": "3",
        "AIRFLOW__JOBWATCH__WATCHER_UNRESPONSIVE_AFTER_SECONDS": "5",
        # A gone scheduler's finished pods are cleaned up once their adoption window has passed
        # (threshold + interval + COMPLETED_POD_GRACE_MARGIN_SECONDS): about 3 s here, not 6 minutes.
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "1",
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "2",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from airflow_jobwatch.executors import completed_pods, launching
    from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

    # Pod creation retries start at 1 s in production; 0.1 s keeps this test short.
    monkeypatch.setattr(launching, "CREATE_BACKOFF_INITIAL_SECONDS", 0.1)
    monkeypatch.setattr(launching, "CREATE_BACKOFF_MAX_SECONDS", 0.5)
    monkeypatch.setattr(completed_pods, "COMPLETED_POD_GRACE_MARGIN_SECONDS", 0.0)
    created: list[JobWatchExecutor] = []

    def make(job_id: str = "42", kubeconfig: str | None = None, **extra_env: str) -> JobWatchExecutor:
        if kubeconfig is not None:
            monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE", kubeconfig)
        for k, v in extra_env.items():
            monkeypatch.setenv(k, v)
        ex = JobWatchExecutor(parallelism=16)
        ex.job_id = job_id
        ex.start()
        created.append(ex)
        return ex

    yield make
    for ex in created:
        ex.end()

"""JobTrigger with Kubernetes connections as deployments have them: in-cluster (Helm chart), inline
kubeconfig, kubeconfig path. The triggerer process has no ~/.kube/config and no $KUBECONFIG.

A trigger whose connection said ``in_cluster`` once read ~/.kube/config to name its
shared watch and ended at once with ``error``/``ConfigError``; ``on_kill`` failed the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import BatchV1Api
from support.incluster import enter_pod

from airflow_jobwatch.kube.cluster.client import ClusterConfig, async_api_client
from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.registry import get_registry

from .conftest import NS, collect, create_job, job_manifest, wait_until


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, Any]) -> str:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )
    return conn_id


@pytest.fixture
async def pod(tls_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """This process is a pod of the sandbox's cluster; yields an admin client (built from a kubeconfig
    written before HOME was emptied) for setting up Jobs."""
    kubeconfig = tmp_path / "admin-kubeconfig"
    tls_sandbox.write_kubeconfig(kubeconfig)
    admin = await async_api_client(ClusterConfig(config_file=str(kubeconfig)))
    enter_pod(tls_sandbox, tmp_path / "sa", monkeypatch)
    try:
        yield admin
    finally:
        await admin.close()


async def _run_to_success(admin: Any, name: str, **trigger_kw: Any) -> dict[str, Any]:
    job = await create_job(admin, job_manifest(name, ["sh", "-c", "exit 0"]))
    events = await collect(
        JobTrigger(name, NS, job_uid=job["metadata"]["uid"], poll_interval=5.0, **trigger_kw)
    )
    assert len(events) == 1
    return events[0]


async def test_in_cluster_connection_without_any_kubeconfig(
    pod: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn_id = _connection(monkeypatch, "k8s_in_cluster", {"in_cluster": True})
    event = await _run_to_success(pod, "incluster", kubernetes_conn_id=conn_id)
    assert event["status"] == "success", event
    assert get_registry().active() == {}


async def test_in_cluster_connection_with_old_prefixed_extras(
    pod: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn_id = _connection(monkeypatch, "k8s_prefixed", {"extra__kubernetes__in_cluster": "True"})
    event = await _run_to_success(pod, "prefixed", kubernetes_conn_id=conn_id)
    assert event["status"] == "success", event


async def test_connection_with_no_extras_in_a_pod_uses_the_service_account(
    pod: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As upstream's hook: nothing configured -> the pod's service account first."""
    conn_id = _connection(monkeypatch, "kubernetes_default", {})
    event = await _run_to_success(pod, "defaultconn", kubernetes_conn_id=conn_id)
    assert event["status"] == "success", event


async def test_inline_kube_config_connection(
    pod: Any, tls_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "inline-source"
    tls_sandbox.write_kubeconfig(path)
    for i, inline in enumerate((path.read_text(), json.dumps(yaml.safe_load(path.read_text())))):
        conn_id = _connection(monkeypatch, f"k8s_inline{i}", {"kube_config": inline})
        event = await _run_to_success(pod, f"inline{i}", kubernetes_conn_id=conn_id)
        assert event["status"] == "success", event


async def test_kube_config_path_connection(
    pod: Any, tls_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "by-path"
    tls_sandbox.write_kubeconfig(path)
    conn_id = _connection(monkeypatch, "k8s_path", {"kube_config_path": str(path)})
    event = await _run_to_success(pod, "bypath", kubernetes_conn_id=conn_id)
    assert event["status"] == "success", event


async def test_contradicting_extras_end_with_an_error_naming_the_connection(
    pod: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn_id = _connection(monkeypatch, "k8s_both", {"in_cluster": True, "kube_config_path": "/nowhere"})
    events = await collect(JobTrigger("any", NS, kubernetes_conn_id=conn_id))
    assert [e["status"] for e in events] == ["error"]
    assert "connection 'k8s_both'" in events[0]["message"]
    assert "mutually exclusive" in events[0]["message"]


async def test_on_kill_deletes_the_job_in_cluster(pod: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = _connection(monkeypatch, "k8s_kill", {"in_cluster": True})
    job = await create_job(pod, job_manifest("killme", ["sh", "-c", "sleep 600"]))
    trigger = JobTrigger(
        "killme", NS, kubernetes_conn_id=conn_id, job_uid=job["metadata"]["uid"], delete_on_kill=True
    )
    await trigger.on_kill()

    async def gone() -> bool:
        jobs = await BatchV1Api(pod).list_namespaced_job(NS)
        return all(j.metadata.name != "killme" or j.metadata.deletion_timestamp for j in jobs.items)

    await wait_until(gone, what="the Job to be deleted")

"""airflow_jobwatch_testing, the public API for users' DAG tests: a sandbox, and an Airflow Kubernetes
connection that upstream's KubernetesHook (what DAG code uses) can reach it with."""

from __future__ import annotations

import pytest

from airflow_jobwatch_testing import kubernetes_sandbox

pytestmark = pytest.mark.timeout(120)


def test_sandbox_is_reachable_through_an_airflow_kubernetes_connection(tmp_path, monkeypatch):
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    with kubernetes_sandbox(tmp_path / "kubeconfig") as sb:
        monkeypatch.setenv(*sb.connection_env("my_k8s", namespace="default"))
        hook = KubernetesHook(conn_id="my_k8s")
        assert hook.get_namespace() == "default"
        core = hook.core_v1_client
        created = core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "probe"},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x", "command": ["true"]}],
                },
            },
        )
        assert created.metadata.name == "probe"
        # The server's own view, through the sandbox handle the test holds.
        assert [p["metadata"]["name"] for p in sb.thread.objects("pods", "default")] == ["probe"]
    with pytest.raises(Exception):  # noqa: B017 - after the block the server is gone
        core.list_namespaced_pod("default", _request_timeout=2)

"""Credentials that change under a running watch: rotated service-account tokens and exec-plugin tokens.

The sandbox accepts one bearer token at a time (``Sandbox.token``); changing it is what a cluster does
when a projected service-account token is rotated or an EKS/GKE token expires: from then on the old
token gets 401 on every new request, while a watch already open keeps streaming (a real apiserver
authenticates a request once, when it starts). ``drop_watches()`` then forces the reconnect that, in
production, comes at the next watch timeout.

What must hold: the informer (and the trigger and the executor built on it) keeps delivering events
across the change without counting a failure: a 401 reloads the credentials once and retries.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import kubernetes_asyncio.client
import pytest
import yaml
from support.incluster import cluster_token, enter_pod, rotate_cluster_token, rotate_token

from airflow_jobwatch.kube.cluster.client import ClusterConfig, async_api_client
from airflow_jobwatch.kube.engine.informer import EventType, Informer, InformerConfig

FAST = InformerConfig(
    watch_timeout_seconds=30,
    stall_timeout_seconds=5,
    connect_timeout_seconds=2,
    backoff_initial_seconds=0.1,
    backoff_max_seconds=0.5,
    unhealthy_after_seconds=30,
)


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "60"]}],
        },
    }


async def _wait(predicate: Any, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def exec_kubeconfig(sandbox: Any, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A kubeconfig whose user runs an exec plugin that hands out whatever token is in ``source``,
    valid "for an hour" (so it is not refetched before requests). Returns (kubeconfig, source, calls)."""
    source = tmp_path / "current-token"
    source.write_text(cluster_token(sandbox, "exec-user"))
    calls = tmp_path / "plugin-calls"
    plugin = tmp_path / "plugin.py"
    expiry = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    plugin.write_text(
        textwrap.dedent(
            f"""
            import json, pathlib
            calls = pathlib.Path({str(calls)!r})
            calls.write_text(str(int(calls.read_text()) + 1 if calls.exists() else 1))
            token = pathlib.Path({str(source)!r}).read_text()
            print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                               "status": {{"token": token, "expirationTimestamp": {expiry!r}}}}}))
            """
        )
    )
    kubeconfig = tmp_path / "exec-kubeconfig"
    sandbox.write_kubeconfig(kubeconfig)
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    kubeconfig.write_text(yaml.safe_dump(config))
    return kubeconfig, source, calls


async def _watch_across_rotation(sandbox: Any, client: Any, rotate: Any) -> Informer:
    informer = Informer(client, kind="pods", namespace="default", config=FAST)
    seen: list[str] = []
    informer.subscribe(lambda e: seen.append(e.name) if e.type is EventType.ADDED else None)
    await informer.start()
    try:
        core = kubernetes_asyncio.client.CoreV1Api(client)
        assert await informer.wait_synced(30)
        await core.create_namespaced_pod("default", _pod("before"))
        await _wait(lambda: "before" in seen, "the pod created before the rotation")
        rotate()
        assert sandbox.drop_watches() >= 1  # production: the next watch timeout
        await core.create_namespaced_pod("default", _pod("after"))  # this request, too, meets the 401
        await _wait(lambda: "after" in seen, "the pod created after the rotation")
        health = informer.health
        assert health.access_denied is None and health.healthy
        return informer
    finally:
        await informer.stop()


async def test_exec_plugin_token_replaced_under_a_watch(sandbox: Any, tmp_path: Path) -> None:
    kubeconfig, source, calls = exec_kubeconfig(sandbox, tmp_path)
    client = await async_api_client(ClusterConfig(config_file=str(kubeconfig)))
    try:

        def rotate() -> None:
            source.write_text(rotate_cluster_token(sandbox, source.read_text(), "exec-user"))

        await _watch_across_rotation(sandbox, client, rotate)
        assert client.credentials.reloads >= 1  # the 401 re-ran the plugin, once per burst of 401s
        assert int(calls.read_text()) <= 3
    finally:
        await client.close()


async def test_in_cluster_token_rotated_under_a_watch(
    tls_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = enter_pod(tls_sandbox, tmp_path / "sa", monkeypatch)
    client = await async_api_client(ClusterConfig(in_cluster=True))
    try:

        def rotate() -> None:
            rotate_token(token_file, rotate_cluster_token(tls_sandbox, token_file.read_text()))

        informer = await _watch_across_rotation(tls_sandbox, client, rotate)
        # The token file was re-read when it changed: not even one failure was counted.
        assert informer.health.consecutive_failures == 0
    finally:
        await client.close()


async def test_in_cluster_token_rotated_late_is_one_401_then_recovers(
    tls_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster refuses the old token before the kubelet has written the new one: the watch reports
    the 401 (explained, unhealthy) and recovers by itself once the file holds the new token."""
    token_file = enter_pod(tls_sandbox, tmp_path / "sa", monkeypatch)
    client = await async_api_client(ClusterConfig(in_cluster=True))
    informer = Informer(client, kind="pods", namespace="default", config=FAST)
    try:
        await informer.start()
        assert await informer.wait_synced(30)
        old = token_file.read_text()
        new = rotate_cluster_token(tls_sandbox, old)
        tls_sandbox.drop_watches()
        await _wait(lambda: informer.health.access_denied is not None, "the 401 to be reported")
        health = informer.health
        assert not health.healthy
        assert "401 Unauthorized" in (health.access_denied or "")
        for secret in (old, new):
            assert secret not in (health.access_denied or "") and secret not in (health.last_error or "")
        rotate_token(token_file, new)
        await _wait(lambda: informer.health.access_denied is None and informer.health.connected, "recovery")
        assert informer.health.healthy
    finally:
        await informer.stop()
        await client.close()


async def test_trigger_outlives_a_token_rotation(
    sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JobTrigger on an exec-plugin connection (EKS/GKE) ends with the Job's real result, not ApiUnreachable."""
    import json

    from airflow_jobwatch.triggers.job import JobTrigger
    from airflow_jobwatch.triggers.registry import get_registry

    kubeconfig, source, _ = exec_kubeconfig(sandbox, tmp_path)
    monkeypatch.setenv(
        "AIRFLOW_CONN_K8S_EXEC",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
    )
    admin_path = tmp_path / "admin"
    sandbox.write_kubeconfig(admin_path)
    admin = await async_api_client(ClusterConfig(config_file=str(admin_path)))
    try:
        batch = kubernetes_asyncio.client.BatchV1Api(admin)
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "rotating"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 2; exit 0"]}
                        ],
                    }
                },
            },
        }
        created = await batch.create_namespaced_job("default", job)
        trigger = JobTrigger(
            "rotating",
            "default",
            kubernetes_conn_id="k8s_exec",
            job_uid=created.metadata.uid,
            poll_interval=1.0,
            api_failure_tolerance=60,
        )
        run = asyncio.ensure_future(trigger.wait())
        await _wait(lambda: bool(get_registry().active()), "the trigger's shared watch")
        source.write_text(rotate_cluster_token(sandbox, source.read_text(), "exec-user"))
        sandbox.drop_watches()
        payload = await asyncio.wait_for(run, 60)
        assert payload["status"] == "success", payload
    finally:
        await admin.close()


@pytest.mark.exec_credential(user="eks-user", token_ttl=2.0)
async def test_watch_delivers_events_across_exec_token_expiry(sandbox: Any, exec_kubeconfig: Path) -> None:
    """The sandbox's own exec credential plugin hands out tokens valid 2 s (EKS: 15 min); the server
    answers 401 after that. A watch reconnecting across several expiries keeps delivering events and
    never reports a failure: the plugin is re-run before the token's expiry (or once after a 401)."""
    client = await async_api_client(ClusterConfig(config_file=str(exec_kubeconfig)))
    informer = Informer(client, kind="pods", namespace="default", config=FAST)
    seen: list[str] = []
    informer.subscribe(lambda e: seen.append(e.name) if e.type is EventType.ADDED else None)
    admin_path = exec_kubeconfig.with_name("admin-kubeconfig")
    sandbox.write_kubeconfig(admin_path)
    admin = await async_api_client(ClusterConfig(config_file=str(admin_path)))
    try:
        await informer.start()
        assert await informer.wait_synced(30)
        core = kubernetes_asyncio.client.CoreV1Api(admin)
        deadline = time.monotonic() + 60
        for i in range(3):
            # Not a synchronisation wait: the scenario is "after the token's TTL (2 s) has passed".
            await asyncio.sleep(2.5)
            sandbox.drop_watches()  # the watch reconnects, as at its timeout in production
            await core.create_namespaced_pod("default", _pod(f"after-expiry-{i}"))
            await _wait(lambda i=i: f"after-expiry-{i}" in seen, f"the pod created after expiry {i}")
            assert time.monotonic() < deadline
        assert informer.health.access_denied is None
        assert sandbox.tokens_seen("eks-user") >= 2  # the plugin really handed out new tokens
    finally:
        await informer.stop()
        await client.close()
        await admin.close()

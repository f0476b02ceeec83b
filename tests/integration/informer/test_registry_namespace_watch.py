"""The trigger registry's shared namespace watch against the sandbox: idle linger and the Job label selector."""

from __future__ import annotations

from pathlib import Path

import kubernetes_asyncio.config as k8s_config
from informer_helpers import FAST, NS, eventually
from kubernetes_asyncio.client import BatchV1Api

from airflow_jobwatch.sandbox import SandboxThread
from airflow_jobwatch.triggers.registry import InformerRegistry, WatchKey


def job(name: str, **labels: str) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                }
            }
        },
    }


def factory(path: str):
    async def make():
        return await k8s_config.new_client_from_config(config_file=path)

    return make


async def test_idle_watch_lingers_then_closes(sb: SandboxThread, tmp_path: Path):
    """The last trigger leaving starts the linger timer: a trigger arriving within it reuses the warm cache
    (no new LIST), and once the timer runs out both watches close and the client is released."""
    path = sb.write_kubeconfig(str(tmp_path / "kc"))
    registry = InformerRegistry(linger_seconds=1.0)
    key = WatchKey("sandbox", NS)
    sub = await registry.subscribe(key, factory(path), job_name="a", on_change=lambda: None, config=FAST)
    assert await sub.watch.wait_synced(10)
    lists = sb.counters().get("list jobs", 0)
    await sub.close()
    assert registry.active() == {key: 0}, "the watch closed at once instead of lingering"
    again = await registry.subscribe(key, factory(path), job_name="b", on_change=lambda: None, config=FAST)
    assert again.watch is sub.watch and registry.linger_reuses == 1
    assert sb.counters().get("list jobs", 0) == lists, "the reused watch listed again"
    await again.close()
    watch = again.watch
    await eventually(lambda: registry.active() == {}, within=15, what="the idle watch closed")
    assert registry.linger_closes == 1
    assert watch.api_client is None
    assert not watch.jobs.health.connected and not watch.pods.health.connected


async def test_job_label_selector_restricts_the_job_watch(sb: SandboxThread, tmp_path: Path, api):
    batch = BatchV1Api(api)
    await batch.create_namespaced_job(NS, job("ours", kubernetes_pod_operator="True"))
    await batch.create_namespaced_job(NS, job("foreign", app="spark"))
    path = sb.write_kubeconfig(str(tmp_path / "kc"))
    registry = InformerRegistry(linger_seconds=0, job_label_selector="kubernetes_pod_operator=True")
    sub = await registry.subscribe(
        WatchKey("sandbox", NS), factory(path), job_name="ours", on_change=lambda: None, config=FAST
    )
    try:
        assert await sub.watch.wait_synced(10)
        assert sub.watch.job("ours") is not None
        assert sub.watch.job("foreign") is None
        await batch.create_namespaced_job(NS, job("later", kubernetes_pod_operator="True"))
        await eventually(lambda: sub.watch.job("later") is not None, what="a matching Job seen live")
        assert [o["metadata"]["name"] for o in sub.watch.jobs.items()] == ["ours", "later"]
    finally:
        await sub.close()
    assert registry.active() == {}

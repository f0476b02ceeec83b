"""The trigger registry's shared namespace watch against the sandbox: idle linger and the Job label selector."""

from __future__ import annotations

from pathlib import Path

import kubernetes_asyncio.config as k8s_config
from informer_helpers import FAST, NS, eventually
from kubernetes_asyncio.client import BatchV1Api

from airflow_jobwatch.triggers.registry import InformerRegistry, WatchKey
from airflow_jobwatch_testing.sandbox import SandboxThread


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


async def test_the_shared_watch_keeps_its_objects_packed_and_a_waited_for_job_whole(
    make_sandbox, tmp_path: Path
):
    """Every Job and pod the shared watch caches is packed (decoded afresh on each read) and its pod index
    holds uids, so the cache costs bytes per object, not a tree of dicts; a Job no trigger waits for keeps
    only what a decision reads (no pod template), the Job a trigger waits for is whole; each still reads
    back with what a decision needs (conditions, its pod's exit code)."""

    # The Job controller and kubelet run (pods simulated: no host process), so the Jobs end on their own.
    sb = make_sandbox(kubelet=True, job_controller=True, simulate_pods=True)
    path = sb.write_kubeconfig(str(tmp_path / "kc"))
    api = await k8s_config.new_client_from_config(config_file=path)
    batch = BatchV1Api(api)
    await batch.create_namespaced_job(NS, job("ended"))
    registry = InformerRegistry(linger_seconds=0)
    sub = await registry.subscribe(
        WatchKey("sandbox", NS), factory(path), job_name="ours", on_change=lambda: None, config=FAST
    )
    watch = sub.watch

    def complete(name: str) -> bool:
        cached = watch.job(name)
        conditions = ((cached or {}).get("status") or {}).get("conditions") or []
        ended_pods = [
            p
            for p in watch.pods_of((cached or {}).get("metadata", {}).get("uid"))
            if (p.get("status") or {}).get("phase") == "Succeeded"
        ]
        return any(c.get("type") == "Complete" for c in conditions) and bool(ended_pods)

    try:
        assert await watch.wait_synced(10)
        await batch.create_namespaced_job(NS, job("ours"))
        await eventually(lambda: complete("ended") and complete("ours"), within=30, what="both Jobs complete")
        assert watch.jobs is not None and watch.pods is not None
        assert watch.jobs.cache.compact and watch.pods.cache.compact
        assert watch.job("ours") == watch.job("ours") and watch.job("ours") is not watch.job("ours")
        assert watch._pods_by_job and all(
            isinstance(uids, tuple) and all(isinstance(uid, str) for uid in uids)
            for uids in watch._pods_by_job.values()
        )
        ended, ours = watch.job("ended"), watch.job("ours")
        assert ended is not None and ours is not None
        assert "template" not in ended["spec"], "a Job no trigger waits for is projected"
        assert ours["spec"]["template"]["spec"]["containers"][0]["name"] == "c", "the waited-for Job is whole"
        [pod] = watch.pods_of(ended["metadata"]["uid"])
        [status] = pod["status"]["containerStatuses"]
        assert status["state"]["terminated"]["exitCode"] == 0
    finally:
        await sub.close()
        await api.close()

"""The sandbox through ``kubernetes_asyncio`` (the client the watch engine uses)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import pod_body

pytestmark = pytest.mark.sandbox(kubelet=False, job_controller=False)


async def test_async_list_watch_create_patch_delete(sandbox: SandboxThread, k8s_async_client: Any) -> None:
    core = client.CoreV1Api(k8s_async_client)
    await core.create_namespaced_pod("default", pod_body("a1", labels={"x": "1"}))
    listed = await core.list_namespaced_pod("default", label_selector="x=1")
    assert [p.metadata.name for p in listed.items] == ["a1"]
    rv = listed.metadata.resource_version
    await core.patch_namespaced_pod("a1", "default", {"metadata": {"labels": {"y": "2"}}})
    await core.delete_namespaced_pod("a1", "default")
    seen = []
    async with watch.Watch().stream(
        core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1
    ) as stream:
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
    assert seen == [("MODIFIED", "a1"), ("DELETED", "a1")]


@pytest.mark.sandbox(kubelet=False, job_controller=False, history_window=1)
async def test_async_watch_too_old_raises_410(sandbox: SandboxThread, k8s_async_client: Any) -> None:
    core = client.CoreV1Api(k8s_async_client)
    first = await core.create_namespaced_pod("default", pod_body("b0"))
    for i in range(3):
        await core.create_namespaced_pod("default", pod_body(f"b{i + 1}"))
    with pytest.raises(ApiException) as err:
        async with watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            resource_version=first.metadata.resource_version,
            timeout_seconds=2,
        ) as stream:
            async for _event in stream:
                pass
    assert err.value.status == 410


@pytest.mark.sandbox(kubelet=False, job_controller=False, bookmark_interval=0.2)
async def test_async_bookmarks(sandbox: SandboxThread, k8s_async_client: Any) -> None:
    core = client.CoreV1Api(k8s_async_client)
    rv = (await core.list_namespaced_pod("default")).metadata.resource_version
    types = []
    async with watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    ) as stream:
        async for event in stream:
            types.append(event["type"])
    assert types and set(types) == {"BOOKMARK"}


async def test_async_paging(sandbox: SandboxThread, k8s_async_client: Any) -> None:
    core = client.CoreV1Api(k8s_async_client)
    for i in range(5):
        await core.create_namespaced_pod("default", pod_body(f"p{i}", labels={"pg": "1"}))
    names: list[str] = []
    token = None
    pages = 0
    while True:
        page = await core.list_namespaced_pod("default", label_selector="pg=1", limit=2, _continue=token)
        pages += 1
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"p{i}" for i in range(5)]
    assert pages == 3


async def test_sandbox_in_the_callers_event_loop(tmp_path: Any) -> None:
    from kubernetes_asyncio import config

    from airflow_jobwatch_testing.sandbox import Sandbox

    async with Sandbox(kubelet=False, job_controller=False, bookmark_interval=None) as sb:
        path = sb.write_kubeconfig(tmp_path / "kubeconfig")
        configuration = client.Configuration()
        await config.load_kube_config(config_file=path, client_configuration=configuration)
        async with client.ApiClient(configuration) as api_client:
            core = client.CoreV1Api(api_client)
            await core.create_namespaced_pod("default", pod_body("inloop"))
            sb.start_outage()
            await sb.end_outage()
            names = [p.metadata.name for p in (await core.list_namespaced_pod("default")).items]
            assert names == ["inloop"]
            assert sb.counters()["create pods"] == 1
            assert sb.get_object("pods", "default", "inloop")["metadata"]["name"] == "inloop"  # type: ignore[index]

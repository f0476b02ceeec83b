"""Stale watch-cache reads: resourceVersion=0 and NotOlderThan lists from a lagging cache, Exact lists,
"Too large resource version", and ``limit`` ignored by the watch cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest

from airflow_jobwatch_testing.sandbox import SandboxProcess, SandboxThread

from .helpers import pod_body

pytestmark = pytest.mark.sandbox(kubelet=False, job_controller=False)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "real-apiserver"


def _recorded(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name).read_text())["body"])


def _names(listed: Any) -> list[str]:
    return sorted(p.metadata.name for p in listed.items)


def _error(fn: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(kubernetes.client.ApiException) as info:
        fn(*args, **kwargs)
    return info.value.status, dict(json.loads(info.value.body))


def test_rv0_list_from_a_lagging_cache(sandbox: SandboxThread, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("old"))
    core.create_namespaced_pod("default", pod_body("new"))
    current = sandbox.current_resource_version()
    sandbox.set_watch_cache_lag(1)
    stale = core.list_namespaced_pod("default", resource_version="0")
    assert _names(stale) == ["old"]  # "new" is not in the cache yet
    assert int(stale.metadata.resource_version) == current - 1
    consistent = core.list_namespaced_pod("default")  # unset resourceVersion: from etcd
    assert _names(consistent) == ["new", "old"]
    assert int(consistent.metadata.resource_version) == current
    assert sandbox.counters()["stale list pods"] == 1


def test_frozen_cache_shows_deleted_pods_and_misses_running_ones(
    sandbox: SandboxThread, core: kubernetes.client.CoreV1Api
) -> None:
    """The case that invents deletions: an object created after the cache froze is missing from an
    RV=0 list, yet a GET by name (a consistent read) finds it."""
    core.create_namespaced_pod("default", pod_body("gone"))
    frozen = sandbox.freeze_watch_cache()
    core.create_namespaced_pod("default", pod_body("running"))
    core.delete_namespaced_pod("gone", "default", grace_period_seconds=0)
    stale = core.list_namespaced_pod("default", resource_version="0")
    assert _names(stale) == ["gone"]
    assert int(stale.metadata.resource_version) == frozen
    assert core.read_namespaced_pod("running", "default").metadata.name == "running"
    assert _error(core.read_namespaced_pod, "gone", "default")[0] == 404
    assert sandbox.watch_cache_resource_version("pods") == frozen
    sandbox.thaw_watch_cache()
    assert _names(core.list_namespaced_pod("default", resource_version="0")) == ["running"]


def test_limit_is_ignored_for_rv0_with_the_watch_cache_on(
    sandbox: SandboxThread, core: kubernetes.client.CoreV1Api
) -> None:
    for i in range(5):
        core.create_namespaced_pod("default", pod_body(f"p{i}"))
    default = core.list_namespaced_pod("default", resource_version="0", limit=2)
    assert len(default.items) == 2 and default.metadata._continue  # the sandbox's default: no cache
    sandbox.set_watch_cache(True)
    whole = core.list_namespaced_pod("default", resource_version="0", limit=2)
    assert len(whole.items) == 5 and not whole.metadata._continue
    paged = core.list_namespaced_pod("default", limit=2)  # a consistent read pages
    assert len(paged.items) == 2 and paged.metadata._continue
    sandbox.set_watch_cache(False)
    uncached = core.list_namespaced_pod("default", resource_version="0", limit=2)
    assert len(uncached.items) == 2 and uncached.metadata._continue


def test_not_older_than(sandbox: SandboxThread, core: kubernetes.client.CoreV1Api) -> None:
    first = core.create_namespaced_pod("default", pod_body("a")).metadata.resource_version
    core.create_namespaced_pod("default", pod_body("b"))
    core.create_namespaced_pod("default", pod_body("c"))
    status, _body = _error(core.list_namespaced_pod, "default", resource_version="999999")
    assert status == 504  # ahead of the server itself, cache or not
    sandbox.set_watch_cache_lag(1)
    cached = sandbox.watch_cache_resource_version()
    answer = core.list_namespaced_pod(
        "default", resource_version=first, resource_version_match="NotOlderThan"
    )
    assert int(answer.metadata.resource_version) == cached  # the cache's state, not older than asked
    assert _names(answer) == ["a", "b"]
    # The legacy form (a resourceVersion without a match) means NotOlderThan too.
    assert _names(core.list_namespaced_pod("default", resource_version=first)) == ["a", "b"]
    # Ahead of the cache: the real server's 504 (it waits up to 3 s first; the sandbox answers at once).
    current = sandbox.current_resource_version()
    status, body = _error(
        core.list_namespaced_pod,
        "default",
        resource_version=str(current),
        resource_version_match="NotOlderThan",
    )
    assert status == 504
    expected = _recorded("status-504-too-large-resource-version.json")
    expected["message"] = f"Timeout: Too large resource version: {current}, current: {cached}"
    assert body == expected


def test_exact_lists_the_past_and_410_once_compacted(
    sandbox: SandboxThread, core: kubernetes.client.CoreV1Api
) -> None:
    rv = core.create_namespaced_pod("default", pod_body("was-here")).metadata.resource_version
    core.delete_namespaced_pod("was-here", "default", grace_period_seconds=0)
    core.create_namespaced_pod("default", pod_body("later"))
    past = core.list_namespaced_pod("default", resource_version=rv, resource_version_match="Exact")
    assert _names(past) == ["was-here"]
    assert past.metadata.resource_version == rv
    sandbox.set_history_window(1)
    for i in range(3):
        core.create_namespaced_pod("default", pod_body(f"push{i}"))
    status, body = _error(
        core.list_namespaced_pod, "default", resource_version=rv, resource_version_match="Exact"
    )
    assert status == 410
    assert body == _recorded("status-410-list-exact-too-old.json")


def test_bad_resource_version_match(core: kubernetes.client.CoreV1Api) -> None:
    status, body = _error(
        core.list_namespaced_pod, "default", resource_version_match="Sometimes", resource_version="1"
    )
    assert status == 400 and "resourceVersionMatch" in body["message"]
    status, body = _error(core.list_namespaced_pod, "default", resource_version_match="NotOlderThan")
    assert (
        status == 400
        and body["message"] == "resourceVersionMatch is forbidden unless resourceVersion is provided"
    )


@pytest.mark.sandbox(kubelet=False, job_controller=False, watch_cache_lag=2)
async def test_async_client_stale_list(sandbox: SandboxThread, k8s_async_client: Any) -> None:
    core = kubernetes_asyncio.client.CoreV1Api(k8s_async_client)
    for name in ("x", "y", "z"):
        await core.create_namespaced_pod("default", pod_body(name))
    stale = await core.list_namespaced_pod("default", resource_version="0")
    assert _names(stale) == ["x"]
    assert _names(await core.list_namespaced_pod("default")) == ["x", "y", "z"]


def test_cli_watch_cache_lag(tmp_path: Path) -> None:
    with SandboxProcess(tmp_path / "kubeconfig", args=["--no-kubelet", "--watch-cache-lag", "1"]) as sb:
        with kubernetes.config.new_client_from_config(config_file=str(sb.kubeconfig)) as api_client:
            core = kubernetes.client.CoreV1Api(api_client)
            core.create_namespaced_pod("default", pod_body("one"))
            core.create_namespaced_pod("default", pod_body("two"))
            assert _names(core.list_namespaced_pod("default", resource_version="0")) == ["one"]
        sb.admin.fault("freeze_watch_cache")
        sb.admin.fault("thaw_watch_cache")
        assert sb.admin.counters()["stale list pods"] == 1

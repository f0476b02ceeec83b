"""The sandbox's API machinery through the official ``kubernetes`` client, over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from airflow_jobwatch_testing.sandbox import SandboxThread

from . import helpers


def pod_body(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return helpers.pod_body(name, labels=labels)


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_create_get_list_with_defaults(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod_body("a", {"app": "x"}))
    assert created.metadata.uid and created.metadata.resource_version
    assert created.metadata.generation == 1
    assert created.spec.containers[0].termination_message_path == "/dev/termination-log"
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert created.status.phase == "Pending"
    got = core.read_namespaced_pod("a", "default")
    assert got.metadata.resource_version == created.metadata.resource_version
    listed = core.list_namespaced_pod("default", label_selector="app=x")
    assert [p.metadata.name for p in listed.items] == ["a"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_errors_have_real_shapes(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", "default")
    assert missing.value.status == 404
    assert '"pods \\"nope\\" not found"' in missing.value.body
    core.create_namespaced_pod("default", pod_body("dup"))
    with pytest.raises(ApiException) as dup:
        core.create_namespaced_pod("default", pod_body("dup"))
    assert dup.value.status == 409 and '"reason":"AlreadyExists"' in dup.value.body
    with pytest.raises(ApiException) as bad:
        core.create_namespaced_pod("default", pod_body("Bad_Name"))
    assert bad.value.status == 422 and "RFC 1123 subdomain" in bad.value.body
    with pytest.raises(ApiException) as no_ns:
        core.create_namespaced_pod("nope", pod_body("x"))
    assert no_ns.value.status == 404 and 'namespaces \\"nope\\" not found' in no_ns.value.body
    with pytest.raises(ApiException) as bad_sel:
        core.list_namespaced_pod("default", label_selector="a in b")
    assert bad_sel.value.status == 400
    assert "unable to parse requirement: found 'b' expected: '('" in bad_sel.value.body
    with pytest.raises(ApiException) as bad_field:
        core.list_namespaced_pod("default", field_selector="spec.bogus=x")
    assert bad_field.value.status == 400 and "field label not supported: spec.bogus" in bad_field.value.body


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_unauthorized_without_token(sandbox: SandboxThread) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{sandbox.url}/api/v1/namespaces/default/pods", timeout=5)
    assert err.value.code == 401
    assert b'"reason":"Unauthorized"' in err.value.read()


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_stale_update_conflicts(core: client.CoreV1Api) -> None:
    pod = core.create_namespaced_pod("default", pod_body("c"))
    core.patch_namespaced_pod("c", "default", {"metadata": {"labels": {"v": "2"}}})
    pod.metadata.labels = {"v": "stale"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("c", "default", pod)
    assert err.value.status == 409 and '"reason":"Conflict"' in err.value.body
    fresh = core.read_namespaced_pod("c", "default")
    fresh.metadata.labels = {"v": "3"}
    assert core.replace_namespaced_pod("c", "default", fresh).metadata.labels == {"v": "3"}


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_label_and_field_selectors(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("s1", {"tier": "a", "env": "prod"}))
    core.create_namespaced_pod("default", pod_body("s2", {"tier": "b"}))
    core.create_namespaced_pod("default", pod_body("s3", {"tier": "c", "env": "dev"}))

    def names(**kw: str) -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod("default", **kw).items)

    assert names(label_selector="tier in (a,b)") == ["s1", "s2"]
    assert names(label_selector="tier notin (a,b)") == ["s3"]
    assert names(label_selector="env") == ["s1", "s3"]
    assert names(label_selector="!env") == ["s2"]
    assert names(label_selector="env!=prod") == ["s2", "s3"]
    assert names(label_selector="tier==a,env=prod") == ["s1"]
    assert names(field_selector="metadata.name=s2") == ["s2"]
    assert names(field_selector="metadata.name!=s2") == ["s1", "s3"]
    assert names(field_selector="status.phase=Pending") == ["s1", "s2", "s3"]


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_watch_rv0_then_live_then_timeout(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("w1"))
    w = watch.Watch()
    seen: list[tuple[str, str]] = []
    started = time.monotonic()
    for event in w.stream(core.list_namespaced_pod, "default", resource_version="0", timeout_seconds=2):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            core.create_namespaced_pod("default", pod_body("w2"))
    assert seen == [("ADDED", "w1"), ("ADDED", "w2")]
    assert time.monotonic() - started < 10  # the stream ended because of timeoutSeconds


@pytest.mark.sandbox(kubelet=False, job_controller=False, history_window=2)
def test_watch_from_compacted_rv_raises_410(core: client.CoreV1Api, sandbox: SandboxThread) -> None:
    first = core.create_namespaced_pod("default", pod_body("old"))
    for i in range(3):
        core.create_namespaced_pod("default", pod_body(f"new{i}"))
    w = watch.Watch()
    with pytest.raises(ApiException) as err:
        for _event in w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=first.metadata.resource_version,
            timeout_seconds=2,
        ):
            pass
    assert err.value.status == 410
    assert f"too old resource version: {first.metadata.resource_version}" in str(err.value)


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_watch_replays_from_rv(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("r1"))
    core.patch_namespaced_pod("r1", "default", {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("r1", "default")
    w = watch.Watch()
    types = [
        (e["type"], e["object"].metadata.name)
        for e in w.stream(core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=1)
    ]
    assert types == [("ADDED", "r1"), ("MODIFIED", "r1"), ("DELETED", "r1")]


@pytest.mark.sandbox(kubelet=False, job_controller=False)
def test_watch_timeout_zero_means_server_default(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    import urllib3

    with pytest.raises(urllib3.exceptions.HTTPError, match="Read timed out"):
        # A stream that ended at once would return normally; this one stays open past the read timeout.
        list(
            watch.Watch().stream(
                core.list_namespaced_pod,
                "default",
                resource_version="0",
                timeout_seconds=0,
                _request_timeout=(5, 0.5),
            )
        )

"""Paging, patch types, status subresource, graceful/finalizer deletion, discovery."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import pod_body

pytestmark = pytest.mark.sandbox(kubelet=False, job_controller=False)


def test_paging_tokens_like_the_real_server(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    for i in range(4):
        core.create_namespaced_pod("default", pod_body(f"pg-{i}", labels={"pg": "x"}))
    page1 = core.list_namespaced_pod("default", label_selector="pg=x", limit=2)
    assert [p.metadata.name for p in page1.items] == ["pg-0", "pg-1"]
    token = json.loads(base64.urlsafe_b64decode(page1.metadata._continue + "=="))
    assert token == {
        "v": "meta.k8s.io/v1",
        "rv": int(page1.metadata.resource_version),
        "start": "/pg-1\u0000",
    }
    # Changes after the first page do not show in later pages: they are the state at its revision.
    core.create_namespaced_pod("default", pod_body("pg-9", labels={"pg": "x"}))
    before = core.read_namespaced_pod("pg-2", "default")
    core.patch_namespaced_pod("pg-2", "default", {"metadata": {"labels": {"late": "yes"}}})
    core.delete_namespaced_pod("pg-3", "default")
    page2 = core.list_namespaced_pod(
        "default", label_selector="pg=x", limit=2, _continue=page1.metadata._continue
    )
    assert [p.metadata.name for p in page2.items] == ["pg-2", "pg-3"]
    assert page2.items[0].metadata.resource_version == before.metadata.resource_version
    assert "late" not in page2.items[0].metadata.labels
    assert page2.metadata.resource_version == page1.metadata.resource_version  # the snapshot's RV
    assert not page2.metadata._continue
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod("default", limit=2, _continue="garbage")
    assert bad.value.status == 400 and "invalid continue token" in bad.value.body


def test_paging_across_namespaces_follows_etcd_key_order(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    """Pages of an all-namespaces list follow etcd's key order, ``<namespace>/<name>``, and the continue
    token's ``start`` is such a key. In that order "a-b/x" comes before "a/x" ("-" sorts before "/"): a
    server that orders by (namespace, name) but resumes after the token's key string skips objects."""
    for ns in ("a", "a-b", "ab"):
        core.create_namespace({"metadata": {"name": ns}})
        for name in ("x", "y"):
            core.create_namespaced_pod(ns, pod_body(name, labels={"pg": "ns"}))
    whole = core.list_pod_for_all_namespaces(label_selector="pg=ns")
    paged: list[str] = []
    token = None
    while True:
        page = core.list_pod_for_all_namespaces(label_selector="pg=ns", limit=1, _continue=token)
        paged += [f"{p.metadata.namespace}/{p.metadata.name}" for p in page.items]
        token = page.metadata._continue
        if not token:
            break
        start = json.loads(base64.urlsafe_b64decode(token + "=="))["start"]
        assert start == paged[-1] + "\u0000"
    expected = ["a-b/x", "a-b/y", "a/x", "a/y", "ab/x", "ab/y"]
    assert paged == expected
    assert [f"{p.metadata.namespace}/{p.metadata.name}" for p in whole.items] == expected


@pytest.mark.sandbox(kubelet=False, job_controller=False, history_window=10_000)
def test_a_long_paged_list_is_one_state_while_writes_go_on(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    """A paged list of 300 pods, 7 per page, with creations, changes and deletions between every two pages,
    returns exactly the collection as it was at the first page's resourceVersion, each object once and in
    name order; the same list with resourceVersionMatch=Exact agrees. (The sandbox builds that past state
    once for all the list's pages.)"""
    for i in range(300):
        core.create_namespaced_pod("default", pod_body(f"lp-{i:03d}", labels={"lp": "1"}))
    first = core.list_namespaced_pod("default", label_selector="lp=1", limit=7)
    rv = first.metadata.resource_version
    at_rv = core.list_namespaced_pod(
        "default", label_selector="lp=1", resource_version=rv, resource_version_match="Exact"
    )
    expected = [(p.metadata.name, p.metadata.resource_version) for p in at_rv.items]
    assert [name for name, _ in expected] == [f"lp-{i:03d}" for i in range(300)]
    got = [(p.metadata.name, p.metadata.resource_version) for p in first.items]
    token = first.metadata._continue
    step = 0
    while token:
        step += 1
        core.create_namespaced_pod("default", pod_body(f"lp-new-{step:03d}", labels={"lp": "1"}))
        core.patch_namespaced_pod(f"lp-{2 * step + 1:03d}", "default", {"metadata": {"labels": {"x": "y"}}})
        core.delete_namespaced_pod(f"lp-{2 * step:03d}", "default", grace_period_seconds=0)
        page = core.list_namespaced_pod("default", label_selector="lp=1", limit=7, _continue=token)
        assert page.metadata.resource_version == rv
        got += [(p.metadata.name, p.metadata.resource_version) for p in page.items]
        token = page.metadata._continue
    assert got == expected
    assert step == 300 // 7  # 43 pages: 42 full, one of 6


@pytest.mark.sandbox(kubelet=False, job_controller=False, history_window=1)
def test_expired_continue_token_is_410(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    for i in range(3):
        core.create_namespaced_pod("default", pod_body(f"e{i}"))
    page1 = core.list_namespaced_pod("default", limit=1)
    for i in range(3):
        core.create_namespaced_pod("default", pod_body(f"f{i}"))
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", limit=1, _continue=page1.metadata._continue)
    assert err.value.status == 410 and '"reason":"Expired"' in err.value.body


def test_patch_types(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    body = pod_body("pt")
    body["spec"]["containers"].append({"name": "side", "image": "busybox:1", "command": ["true"]})
    core.create_namespaced_pod("default", body)
    api = core.api_client
    # strategic merge: containers merge by name (the default content type of the python client)
    core.patch_namespaced_pod(
        "pt", "default", {"spec": {"containers": [{"name": "side", "image": "busybox:2"}]}}
    )
    pod = sandbox.get_object("pods", "default", "pt")
    assert [c["image"] for c in pod["spec"]["containers"]] == ["busybox:1.36", "busybox:2"]  # type: ignore[index]
    # JSON merge patch: lists are replaced, null deletes
    api.call_api(
        "/api/v1/namespaces/default/pods/pt",
        "PATCH",
        header_params={"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
        body={"metadata": {"labels": {"a": "1", "b": "2"}}},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    api.call_api(
        "/api/v1/namespaces/default/pods/pt",
        "PATCH",
        header_params={"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
        body={"metadata": {"labels": {"a": None}}},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    assert sandbox.get_object("pods", "default", "pt")["metadata"]["labels"] == {"b": "2"}  # type: ignore[index]
    # JSON patch
    core.patch_namespaced_pod("pt", "default", [{"op": "add", "path": "/metadata/labels/c", "value": "3"}])
    assert sandbox.get_object("pods", "default", "pt")["metadata"]["labels"] == {"b": "2", "c": "3"}  # type: ignore[index]
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("pt", "default", [{"op": "remove", "path": "/metadata/nope"}])
    assert err.value.status == 422


def test_status_subresource_only_changes_status(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("st"))
    core.patch_namespaced_pod_status(
        "st", "default", {"metadata": {"labels": {"ignored": "1"}}, "status": {"phase": "Running"}}
    )
    pod = sandbox.get_object("pods", "default", "st")
    assert pod["status"]["phase"] == "Running"  # type: ignore[index]
    assert "ignored" not in (pod["metadata"].get("labels") or {})  # type: ignore[index]
    core.patch_namespaced_pod(
        "st", "default", {"status": {"phase": "Failed"}, "metadata": {"labels": {"k": "v"}}}
    )
    pod = sandbox.get_object("pods", "default", "st")
    assert pod["status"]["phase"] == "Running" and pod["metadata"]["labels"] == {"k": "v"}  # type: ignore[index]
    assert pod["metadata"]["generation"] == 1  # type: ignore[index]  # metadata is not spec


def test_finalizers_block_deletion_until_removed(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    body = pod_body("fin")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_pod("default", body)
    core.delete_namespaced_pod("fin", "default")
    pod = sandbox.get_object("pods", "default", "fin")
    assert pod is not None and pod["metadata"]["deletionTimestamp"]
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.patch_namespaced_pod("fin", "default", {"metadata": {"finalizers": None}})
    assert sandbox.get_object("pods", "default", "fin") is None
    events = [
        e["type"]
        for e in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1
        )
    ]
    assert events == ["DELETED"]


def test_watch_selector_transitions(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("tr", labels={"team": "a"}))
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.patch_namespaced_pod("tr", "default", {"metadata": {"labels": {"team": "b"}}})
    core.patch_namespaced_pod("tr", "default", {"metadata": {"labels": {"team": "a"}}})
    events = [
        e["type"]
        for e in watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            label_selector="team=a",
            resource_version=rv,
            timeout_seconds=1,
        )
    ]
    assert events == ["DELETED", "ADDED"]  # leaving the selector is a DELETED, entering an ADDED


def test_all_namespaces_and_namespaces(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_pod("other", pod_body("o1"))
    core.create_namespaced_pod("default", pod_body("d1"))
    names = sorted((p.metadata.namespace, p.metadata.name) for p in core.list_pod_for_all_namespaces().items)
    assert names == [("default", "d1"), ("other", "o1")]
    assert [
        p.metadata.name
        for p in core.list_pod_for_all_namespaces(field_selector="metadata.namespace=other").items
    ] == ["o1"]


def test_discovery_and_version(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    version = client.VersionApi(core.api_client).get_code()
    assert version.major == "1"
    resources = {r.name for r in core.get_api_resources().resources}
    assert {"pods", "pods/status", "pods/log", "namespaces"} <= resources
    batch = client.BatchV1Api(core.api_client).get_api_resources()
    assert {r.name for r in batch.resources} == {"jobs", "jobs/status"}


def test_generate_name(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    body = pod_body("")
    body["metadata"] = {"generateName": "gen-"}
    pod = core.create_namespaced_pod("default", body)
    assert pod.metadata.name.startswith("gen-") and len(pod.metadata.name) == 9
    assert pod.metadata.generate_name == "gen-"


def test_send_initial_events_ends_with_annotated_bookmark(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod("default", pod_body("ie"))
    lines = core.list_namespaced_pod(
        "default",
        watch=True,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        _preload_content=False,
    ).data.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_delete_collection(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("dc1", labels={"batch": "1"}))
    core.create_namespaced_pod("default", pod_body("dc2", labels={"batch": "1"}))
    core.create_namespaced_pod("default", pod_body("keep"))
    core.delete_collection_namespaced_pod("default", label_selector="batch=1")
    assert [p["metadata"]["name"] for p in sandbox.objects("pods")] == ["keep"]


def test_list_future_resource_version_is_504(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    future = str(sandbox.current_resource_version() + 1000)
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", resource_version=future)
    assert err.value.status == 504 and "Too large resource version" in err.value.body


def test_table_printing_for_kubectl(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    import urllib.request

    core.create_namespaced_pod("default", pod_body("tbl"))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    headers = {"Authorization": f"Bearer {sandbox.token}", "Accept": accept}
    url = f"{sandbox.url}/api/v1/namespaces/default/pods"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as resp:
        listed = json.loads(resp.read())
    assert listed["kind"] == "Table"
    assert [c["name"] for c in listed["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert listed["rows"][0]["cells"][:3] == ["tbl", "0/1", "Pending"]
    watch_url = url + "?watch=true&resourceVersion=0&timeoutSeconds=1"
    with urllib.request.urlopen(urllib.request.Request(watch_url, headers=headers), timeout=5) as resp:
        event = json.loads(resp.readline())
    assert event["type"] == "ADDED" and event["object"]["kind"] == "Table"
    assert event["object"]["rows"][0]["object"]["metadata"]["name"] == "tbl"

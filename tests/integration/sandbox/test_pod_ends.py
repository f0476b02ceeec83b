"""The sandbox notes when each pod's terminal phase is committed (for end-to-event latency), over HTTP."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client

from airflow_jobwatch_testing.sandbox import AdminClient, SandboxThread
from airflow_jobwatch_testing.sandbox.simulated import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    SIMULATE_ANNOTATION,
)

from .helpers import pod_body, wait_for


def _pod(name: str, seconds: str, exit_code: str) -> dict:
    body = pod_body(name, "true")
    body["metadata"]["annotations"] = {
        SIMULATE_ANNOTATION: "true",
        DURATION_ANNOTATION: seconds,
        EXIT_CODE_ANNOTATION: exit_code,
        "task_id": name,
    }
    return body


def test_pod_ends_are_noted_once_with_phase_and_annotations(
    sandbox: SandboxThread, kubeconfig: Path, core: client.CoreV1Api
) -> None:
    admin = AdminClient.from_kubeconfig(kubeconfig)
    core.create_namespaced_pod("default", _pod("before", "0", "0"))
    wait_for(
        lambda: core.read_namespaced_pod("before", "default").status.phase == "Succeeded",
        what="a pod that ends before recording starts",
    )
    admin.fault("record_pod_ends")
    started = time.time()
    core.create_namespaced_pod("default", _pod("ok", "0.3", "0"))
    core.create_namespaced_pod("default", _pod("bad", "0.3", "3"))

    def both() -> list | None:
        ends = admin.fault("pod_ends")
        return ends if len(ends) == 2 else None

    ends = wait_for(both, what="both pods' ends noted")
    by_name = {e["name"]: e for e in ends}
    assert set(by_name) == {"ok", "bad"}, "a pod that ended before recording began is not noted"
    assert by_name["ok"]["phase"] == "Succeeded" and by_name["bad"]["phase"] == "Failed"
    assert by_name["ok"]["annotations"]["task_id"] == "ok"
    for e in ends:
        assert started + 0.2 < e["at"] < time.time(), e
    # Later status writes (a deletion's) do not move the noted moment.
    noted = by_name["ok"]["at"]
    core.delete_namespaced_pod("ok", "default", grace_period_seconds=0)
    wait_for(
        lambda: not any(p.metadata.name == "ok" for p in core.list_namespaced_pod("default").items),
        what="deleted",
    )
    assert {e["name"]: e["at"] for e in admin.fault("pod_ends")}["ok"] == noted


def test_record_pod_ends_bounds_what_it_keeps(
    sandbox: SandboxThread, kubeconfig: Path, core: client.CoreV1Api
) -> None:
    admin = AdminClient.from_kubeconfig(kubeconfig)
    with pytest.raises(RuntimeError, match="limit must be >= 1"):
        admin.fault("record_pod_ends", limit=0)
    admin.fault("record_pod_ends", limit=2)
    for i in range(3):
        core.create_namespaced_pod("default", _pod(f"p{i}", "0", "0"))
        wait_for(lambda i=i: [e for e in admin.fault("pod_ends") if e["name"] == f"p{i}"], what=f"p{i} noted")
    assert sorted(e["name"] for e in admin.fault("pod_ends")) == ["p1", "p2"]

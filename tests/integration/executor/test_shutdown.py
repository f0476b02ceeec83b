"""Scheduler shutdown: ``end()`` never raises, and a pod that ends while it runs is left
for the next scheduler, whose adoption reports it.

The scheduler calls ``executor.end()`` after its loop has exited: it never reads the event buffer again.
Both thread orders are driven here:

* the API threads are idle: the pod's failure arrives in ``end()`` (the watcher's last messages);
* the API threads are busy (one thread, a pod create held by a proxy) and a clean-up is queued behind it:
  ``end()`` cancels the queued call, and must not trip over the cancelled future.

Either way the failed pod keeps its labels, and a new executor (another scheduler job) adopting the
orphaned task instance reports the failure.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from exec_helpers import heartbeat_until, submit, terminal
from faultproxy import FaultProxy, write_proxy_kubeconfig
from support.workloads import make_workload

pytestmark = pytest.mark.timeout(180)

PODS_PATH = "/api/v1/namespaces/default/pods"


def _wait_for(path: Path) -> str:
    return f"until [ -f '{path}' ]; do sleep 0.1; done"


def _pod(sandbox: Any, task_id: str) -> dict[str, Any] | None:
    pods = [
        p
        for p in sandbox.objects("pods", "default")
        if p["metadata"]["annotations"].get("task_id") == task_id
    ]
    return pods[0] if pods else None


def _watcher_has_unread_messages(ex: Any) -> bool:
    # Test-only peek at the supervisor's pipe from its watcher child (no public API says "a message is
    # waiting"): with the watch's own timeout set far away, the only message the child sends after the
    # pod's failure is that failure.
    return any(
        slot.child is not None and not slot.child.closed and slot.child.conn.poll(0)
        for slot in ex.supervisor._slots.values()
    )


@pytest.fixture
def proxy(kube_sandbox: Any, tmp_path: Path) -> Any:
    sandbox, _ = kube_sandbox
    with FaultProxy(sandbox.url) as p:
        p.kubeconfig = write_proxy_kubeconfig(str(tmp_path / "proxy-kubeconfig"), p, sandbox.token)
        yield p


@pytest.mark.parametrize("api_threads", ["idle", "busy"])
def test_end_returns_and_leaves_a_pod_that_failed_during_shutdown_for_adoption(
    executor_factory: Any, kube_sandbox: Any, proxy: Any, tmp_path: Path, api_threads: str
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory(
        job_id="42",
        kubeconfig=proxy.kubeconfig,
        # One API thread, and a create that is held by the proxy occupies it for up to 20 s.
        AIRFLOW__JOBWATCH__POD_CREATION_CONCURRENCY="1",
        AIRFLOW__KUBERNETES_EXECUTOR__WORKER_PODS_CREATION_BATCH_SIZE="1",
        AIRFLOW__KUBERNETES_EXECUTOR__KUBE_CLIENT_REQUEST_ARGS='{"_request_timeout": [5, 20]}',
        # No watch ends on its own during the test: the child sends nothing but pod changes.
        AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS="600",
    )
    dies_may_end = tmp_path / "dies-may-end"
    ok_may_end = tmp_path / "ok-may-end"
    dies = make_workload(task_id="dies", command=f"{_wait_for(dies_may_end)}; exit 137")
    ok = make_workload(task_id="ok", command=f"{_wait_for(ok_may_end)}; exit 0")
    submit(ex, dies, ok)
    events = heartbeat_until(ex, lambda e: sum(str(s) == "running" for s, _ in e.values()) == 2, timeout=60)
    if api_threads == "busy":
        # A third task's create is held: it occupies the only API thread until end() waits for it.
        proxy.rule = lambda method, path, query: "hold" if (method, path) == ("POST", PODS_PATH) else "pass"
        submit(ex, make_workload(task_id="blocked", command="exit 0"))
        deadline = time.monotonic() + 30
        while not any(action == "hold" for _, _, action in proxy.seen):
            ex.heartbeat()
            assert time.monotonic() < deadline, "the third create was not sent"
            time.sleep(0.05)
        # "ok" ends and is reported (the scheduler reads that event); its delete is queued behind the
        # held create.
        ok_may_end.touch()
        events = heartbeat_until(ex, lambda e: "ok" in terminal(e), timeout=60, events=events)
        assert terminal(events)["ok"][0] == "success"
    # "dies" fails between the scheduler's last heartbeat and end(): the failure is in the watcher's pipe.
    dies_may_end.touch()
    deadline = time.monotonic() + 60
    while not ((p := _pod(sandbox, "dies")) and p["status"].get("phase") == "Failed"):
        assert time.monotonic() < deadline, "the pod did not fail"
        time.sleep(0.05)
    deadline = time.monotonic() + 30
    while not _watcher_has_unread_messages(ex):
        assert time.monotonic() < deadline, "the watcher did not send the pod's failure"
        time.sleep(0.05)

    ex.end()  # must return, whatever was queued in the API threads

    assert ex.status()["left_for_adoption"] == 1
    pod = _pod(sandbox, "dies")
    assert pod is not None, "the failed pod was deleted at shutdown"
    labels = pod["metadata"]["labels"]
    assert labels.get("airflow_executor_done") != "True", "the failed pod was labelled done at shutdown"
    assert labels["airflow-worker"] == "42"

    # The next scheduler adopts the orphaned task instance and reports the failure.
    new = executor_factory(job_id="43", kubeconfig=str(kube_sandbox[1]))
    orphan = SimpleNamespace(key=dies.ti.key, queued_by_job_id=42)
    assert new.try_adopt_task_instances([orphan]) == [], "the failed pod was not found for adoption"
    events = heartbeat_until(new, lambda e: "dies" in terminal(e), timeout=30)
    state, info = terminal(events)["dies"]
    assert state == "failed"
    assert "137" in info, info


def test_a_peers_completed_pod_cleanup_does_not_delete_a_pod_whose_task_awaits_adoption(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Confirmed: a live peer's completed-pod clean-up (its own
    ``orphaned_tasks_check_interval`` phase) ran before adoption and deleted a dead scheduler's
    Succeeded pod whose task instance was still queued/running; adoption then found no pod and the task
    was reset and run again. A pod that finished recently is now left for the adopter."""
    from airflow_jobwatch.executors import completed_pods

    sandbox, _ = kube_sandbox
    # Production grace (the adoption interval + health threshold + one minute), not the tests' short one.
    monkeypatch.setattr(completed_pods, "COMPLETED_POD_GRACE_MARGIN_SECONDS", 60.0)
    dead = executor_factory(job_id="42")
    may_end = tmp_path / "may-end"
    w = make_workload(task_id="ends_unwatched", command=f"{_wait_for(may_end)}; exit 0")
    submit(dead, w)
    deadline = time.monotonic() + 60
    while not ((p := _pod(sandbox, "ends_unwatched")) and p["status"].get("phase") == "Running"):
        dead.heartbeat()
        assert time.monotonic() < deadline, "the pod did not start"
        time.sleep(0.1)
    dead.terminate()  # the scheduler dies; its worker exits without having recorded an end
    may_end.touch()
    deadline = time.monotonic() + 60
    while (_pod(sandbox, "ends_unwatched") or {}).get("status", {}).get("phase") != "Succeeded":
        assert time.monotonic() < deadline, "the pod did not succeed"
        time.sleep(0.1)

    # A live peer heartbeats before it adopts: its first sync() runs the completed-pod clean-up.
    peer = executor_factory(job_id="43")
    sandbox.reset_counters()
    deadline = time.monotonic() + 30
    while not sandbox.counters().get("list pods"):
        peer.heartbeat()
        assert time.monotonic() < deadline, "the peer did not search for finished pods"
        time.sleep(0.1)
    # ... and until it has acted on what it found (test-only peek: the search's answer handled, and
    # no clean-up queued or in flight in its API threads).
    deadline = time.monotonic() + 30
    while peer._completed_search is not None or peer._cleanup or peer._cleanup_inflight:
        peer.heartbeat()
        assert time.monotonic() < deadline, "the peer's completed-pod clean-up did not settle"
        time.sleep(0.1)
    assert _pod(sandbox, "ends_unwatched") is not None, "the peer deleted the pod before adopting its task"
    assert peer.status()["completed_pods_cleaned"] == 0

    orphan = SimpleNamespace(key=w.ti.key, queued_by_job_id=42)
    assert peer.try_adopt_task_instances([orphan]) == [], "adoption found no pod: the task would run again"
    events = heartbeat_until(peer, lambda e: "ends_unwatched" in terminal(e), timeout=30)
    assert terminal(events)["ends_unwatched"][0] == "success"

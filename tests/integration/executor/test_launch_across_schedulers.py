"""Which launch of a key is current, across schedulers: what an adopter may report, and what it may take back.

Driven as the scheduler does (queue_workload, heartbeat, try_adopt_task_instances) against the sandbox.

- The scheduler moves a task instance to QUEUED with a fresh ``external_executor_id`` (the executor opts in
  to Airflow's pre-assigned id), and the pod carries it. A pod whose id is not the one the database holds
  for the task instance belongs to an earlier launch: an adopter cleans it up and never reports it.
- A QUEUED task instance with no pod of its current launch (its scheduler stopped before creating it) is
  launched by the adopter on the same try, with the launch id the database names; a RUNNING one is reset.
- A task adopted away by another scheduler can be adopted back when that scheduler dies.
- A pod this executor saw running is never judged "disrupted before start", whatever its final status says.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from exec_helpers import (
    heartbeat_until,
    pods_of,
    poll,
    submit,
    terminal,
    terminal_events,
    wait_for_file,
    worker_pod_of,
)
from support.workloads import make_workload

from airflow_jobwatch.executors.pods import LAUNCH_ANNOTATION

pytestmark = pytest.mark.timeout(180)


def test_an_adopter_does_not_report_the_pod_of_an_earlier_launch_as_the_current_one(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Path
) -> None:
    """The key is queued again (resumed after deferral) while its first pod runs; the scheduler stops
    before the new pod exists. The adopter finds only the first pod: it is not the current launch."""
    sandbox, _ = kube_sandbox
    old = executor_factory(job_id="42")
    first_may_end = tmp_path / "first-may-end"
    first = make_workload(task_id="resumed", command=f"{wait_for_file(first_may_end)}; exit 0")
    first.ti.external_executor_id = "launch-queued-first"
    second = make_workload(task_id="resumed", command="exit 0")
    second.ti.external_executor_id = "launch-queued-second"
    events: list[tuple[Any, Any]] = []
    submit(old, first)
    poll(old, lambda: len(pods_of(sandbox, "resumed")) == 1, timeout=60, what="the first pod", events=events)
    (p1,) = pods_of(sandbox, "resumed")
    assert p1["metadata"]["annotations"][LAUNCH_ANNOTATION] == "launch-queued-first"
    # The second launch's create is refused until the scheduler stops.
    sandbox.set_error_rate(1.0, status=503, verbs={"create"})
    submit(old, second)
    poll(old, lambda: old.status()["create_retries"] >= 1, timeout=60, what="a refused create", events=events)
    old.end()
    sandbox.set_error_rate(0.0)
    first_may_end.touch()
    deadline = time.monotonic() + 60
    while pods_of(sandbox, "resumed")[0]["status"].get("phase") != "Succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)

    new = executor_factory(job_id="43")
    # What the database holds for the task instance: still QUEUED for the second launch.
    # What the database holds for the task instance: RUNNING for the second launch, whose pod does not
    # exist: its worker is lost, so it is handed back to be reset.
    orphan = SimpleNamespace(
        key=second.ti.key, queued_by_job_id=42, external_executor_id="launch-queued-second", state="running"
    )
    not_adopted = new.try_adopt_task_instances([orphan])
    assert not_adopted == [orphan], "a running task instance with no pod of its current launch must be reset"
    all_events: list[tuple[Any, Any]] = []
    # The earlier launch's pod is cleaned up (deleted: it succeeded), and nothing is reported for it.
    poll(
        new,
        lambda: not pods_of(sandbox, "resumed"),
        timeout=60,
        what="the earlier launch's pod to be cleaned up",
        events=all_events,
    )
    assert terminal_events(all_events) == [], f"an earlier launch's end was reported: {all_events}"
    assert second.ti.key not in new.running


def test_an_adopter_launches_a_queued_task_whose_scheduler_stopped_before_its_pod_existed(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but the database holds the task instance QUEUED for its second launch: the adopter launches
    it itself, on the same try, with the launch id the database names, and reports only that pod's end."""
    from airflow.executors.workloads import ExecuteTask

    sandbox, _ = kube_sandbox
    old = executor_factory(job_id="42")
    first_may_end = tmp_path / "first-may-end"
    first = make_workload(task_id="requeued", command=f"{wait_for_file(first_may_end)}; exit 3")
    first.ti.external_executor_id = "launch-first"
    second = make_workload(task_id="requeued", command="exit 0")
    second.ti.external_executor_id = "launch-second"
    events: list[tuple[Any, Any]] = []
    submit(old, first)
    poll(old, lambda: len(pods_of(sandbox, "requeued")) == 1, timeout=60, what="the first pod", events=events)
    sandbox.set_error_rate(1.0, status=503, verbs={"create"})
    submit(old, second)
    poll(old, lambda: old.status()["create_retries"] >= 1, timeout=60, what="a refused create", events=events)
    old.end()
    sandbox.set_error_rate(0.0)

    # The workload is rebuilt from the database's task instance, as the scheduler builds it; here the
    # task instance is not an ORM row, so the rebuilt workload is the one the old scheduler had.
    built: list[Any] = []
    monkeypatch.setattr(ExecuteTask, "make", classmethod(lambda cls, ti, **kw: built.append(ti) or second))
    new = executor_factory(job_id="43")
    orphan = SimpleNamespace(
        key=second.ti.key, queued_by_job_id=42, external_executor_id="launch-second", state="queued"
    )
    assert new.try_adopt_task_instances([orphan]) == [], "a queued task instance with no pod must be launched"
    assert built == [orphan]
    assert second.ti.key in new.running
    all_events: list[tuple[Any, Any]] = []
    poll(
        new,
        lambda: len(pods_of(sandbox, "requeued")) == 2,
        timeout=60,
        what="the adopter's pod",
        events=all_events,
    )
    launches = sorted(p["metadata"]["annotations"][LAUNCH_ANNOTATION] for p in pods_of(sandbox, "requeued"))
    assert launches == ["launch-first", "launch-second"]
    first_may_end.touch()  # the earlier launch's pod fails (exit 3): never reported
    heartbeat_until(new, lambda e: "requeued" in terminal(e), timeout=60, all_events=all_events)
    poll(
        new,
        lambda: all(
            p["status"].get("phase") in ("Succeeded", "Failed") for p in pods_of(sandbox, "requeued")
        ),
        timeout=60,
        what="both pods to end",
        events=all_events,
    )
    reported = terminal_events(all_events)
    assert [(k, s) for k, s, _ in reported] == [(second.ti.key, "success")], reported
    assert second.ti.key not in new.running


def test_an_adopter_reports_the_pod_whose_launch_the_database_names(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Path
) -> None:
    """Both launches have pods; the database names the first (oldest) one: that one is reported."""
    sandbox, _ = kube_sandbox
    old = executor_factory(job_id="42")
    # Both pods end only once the first scheduler is gone: a pod of an earlier launch that ends while its
    # scheduler runs is cleaned up by it (deleted), and there would be nothing left to adopt.
    may_end = tmp_path / "may-end"
    first = make_workload(task_id="twice", command=f"{wait_for_file(may_end)}; exit 3")
    first.ti.external_executor_id = "launch-a"
    second = make_workload(task_id="twice", command=f"{wait_for_file(may_end)}; exit 0")
    second.ti.external_executor_id = "launch-b"
    events: list[tuple[Any, Any]] = []
    submit(old, first)
    poll(old, lambda: len(pods_of(sandbox, "twice")) == 1, timeout=60, what="the first pod", events=events)
    created = pods_of(sandbox, "twice")[0]["metadata"]["creationTimestamp"]
    deadline = time.monotonic() + 10
    while time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) <= created:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    submit(old, second)
    poll(old, lambda: len(pods_of(sandbox, "twice")) == 2, timeout=60, what="the second pod", events=events)
    old.terminate()
    may_end.touch()
    deadline = time.monotonic() + 60
    while sorted(p["status"].get("phase", "") for p in pods_of(sandbox, "twice")) != ["Failed", "Succeeded"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    new = executor_factory(job_id="43")
    orphan = SimpleNamespace(key=first.ti.key, queued_by_job_id=42, external_executor_id="launch-a")
    assert new.try_adopt_task_instances([orphan]) == []
    all_events: list[tuple[Any, Any]] = []
    heartbeat_until(new, lambda e: "twice" in terminal(e), timeout=30, all_events=all_events)
    reported = terminal_events(all_events)
    assert [(k.task_id, s) for k, s, _ in reported] == [("twice", "failed")], reported


def test_a_task_adopted_away_can_be_adopted_back(
    executor_factory: Any, kube_sandbox: Any, core_v1: Any, tmp_path: Path
) -> None:
    """Scheduler 42 stalls, 99 adopts its pod, then 99 dies: 42 must adopt the task back and report its end."""
    sandbox, _ = kube_sandbox
    may_end = tmp_path / "may-end"
    ex = executor_factory(job_id="42")
    w = make_workload(task_id="flap", command=f"{wait_for_file(may_end)}; exit 0")
    w.ti.external_executor_id = "launch-flap"
    submit(ex, w)
    events: list[tuple[Any, Any]] = []
    poll(
        ex,
        lambda: any(p["status"].get("phase") == "Running" for p in pods_of(sandbox, "flap")),
        timeout=60,
        what="the pod to run",
        events=events,
    )
    poll(ex, lambda: ex.supervisor.all_synced(), timeout=60, what="the watch", events=events)
    (pod,) = pods_of(sandbox, "flap")
    core_v1.patch_namespaced_pod(
        pod["metadata"]["name"], "default", {"metadata": {"labels": {"airflow-worker": "99"}}}
    )
    poll(ex, lambda: w.ti.key not in ex.running, timeout=60, what="the slot to be freed", events=events)
    # Scheduler 99 dies; the task instance is orphaned again, queued by 99.
    orphan = SimpleNamespace(key=w.ti.key, queued_by_job_id=99, external_executor_id="launch-flap")
    assert ex.try_adopt_task_instances([orphan]) == [], "the task was not adopted back"
    assert w.ti.key in ex.running
    may_end.touch()
    poll(ex, lambda: terminal_events(events), timeout=60, what="the task's end", events=events)
    ((key, state, _info),) = terminal_events(events)
    assert (key, state) == (w.ti.key, "success")
    assert ex.running == set()


def test_a_pod_seen_running_is_not_relaunched_whatever_its_final_status_says(
    executor_factory: Any, kube_sandbox: Any, core_v1: Any
) -> None:
    """The final status has no start evidence (ContainerStatusUnknown/137, no startedAt or lastState), as
    after a pod GC write that lost the kubelet's last updates; but the executor saw the pod running."""
    sandbox, _ = kube_sandbox
    ex = executor_factory(job_id="42")
    w = make_workload(task_id="ran", command="sleep 120")
    submit(ex, w)
    events: list[tuple[Any, Any]] = []
    poll(
        ex,
        lambda: any(str(s) == "running" for _, (s, _) in events),
        timeout=60,
        what="the running event",
        events=events,
    )
    from kubernetes.client import V1ContainerState, V1ContainerStateTerminated

    (pod,) = pods_of(sandbox, "ran")
    name = pod["metadata"]["name"]
    # The sandbox's node stops the pod without reporting anything more (its kubelet's last updates lost).
    sandbox._call(lambda sb: sb.kubelet.kill_silently("default", name))
    current = core_v1.read_namespaced_pod(name, "default")
    current.status.phase = "Failed"
    current.status.reason = "Evicted"
    current.status.message = "The node was low on resource: memory."
    for cs in current.status.container_statuses:
        cs.state = V1ContainerState(
            terminated=V1ContainerStateTerminated(exit_code=137, reason="ContainerStatusUnknown")
        )
        cs.last_state = V1ContainerState()
        cs.started = False
        cs.ready = False
        cs.restart_count = 0
    core_v1.replace_namespaced_pod_status(name, "default", current)
    final = sandbox.get_object("pods", "default", name)["status"]["containerStatuses"][0]
    assert "startedAt" not in final["state"]["terminated"] and "running" not in final["state"], final
    poll(ex, lambda: terminal_events(events), timeout=60, what="the task's end", events=events)
    ((key, state, info),) = terminal_events(events)
    assert (key, state) == (w.ti.key, "failed"), info
    assert ex.status()["disruption_relaunches"] == 0 and ex.status()["pods_launched"] == 1
    assert len(pods_of(sandbox, "ran")) == 1, "a second pod was launched for a task that ran"


def test_a_pod_launched_by_the_upstream_executor_is_adopted_whatever_the_database_holds(
    executor_factory: Any, kube_sandbox: Any, core_v1: Any
) -> None:
    """Upstream's pods carry no launch id, and upstream stores its scheduler's job id as the task instance's
    external_executor_id: the pod is still the task's current launch (a switch of executor keeps tasks)."""
    sandbox, _ = kube_sandbox
    old = executor_factory(job_id="42")
    w = make_workload(task_id="switched", command="exit 0")
    events: list[tuple[Any, Any]] = []
    submit(old, w)
    poll(old, lambda: pods_of(sandbox, "switched"), timeout=60, what="the pod", events=events)
    old.terminate()
    (pod,) = pods_of(sandbox, "switched")
    core_v1.patch_namespaced_pod(
        pod["metadata"]["name"], "default", {"metadata": {"annotations": {LAUNCH_ANNOTATION: None}}}
    )
    assert LAUNCH_ANNOTATION not in pods_of(sandbox, "switched")[0]["metadata"]["annotations"]
    new = executor_factory(job_id="43")
    orphan = SimpleNamespace(key=w.ti.key, queued_by_job_id=42, external_executor_id="42")
    assert new.try_adopt_task_instances([orphan]) == []
    all_events: list[tuple[Any, Any]] = []
    heartbeat_until(new, lambda e: "switched" in terminal(e), timeout=60, all_events=all_events)
    assert [(k.task_id, s) for k, s, _ in terminal_events(all_events)] == [("switched", "success")]


def test_without_a_pre_assigned_id_an_adopter_launches_under_the_id_the_row_names_and_meets_the_late_pod(
    executor_factory: Any, kube_sandbox: Any, core_v1: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3.1, 3.2.0, 3.2.1: the rebuilt workload carries no launch id, but the row names the one the late
    scheduler reported. The adopter launches under it, so its pod has the late scheduler's pod's name: when
    the late create lands after the adopter's list, the adopter's create is answered 409 and takes that pod
    over. One pod."""
    from airflow.executors.workloads import ExecuteTask

    from airflow_jobwatch.executors.pods import launch_pod_name

    sandbox, _ = kube_sandbox
    w = make_workload(task_id="late31", command="sleep 3; exit 0")
    assert w.ti.external_executor_id is None  # as Airflow 3.1 rebuilds it
    monkeypatch.setattr(ExecuteTask, "make", classmethod(lambda cls, ti, **kw: w))
    adopter = executor_factory(job_id="43")
    orphan = SimpleNamespace(
        key=w.ti.key, queued_by_job_id=42, external_executor_id="launch-late", state="queued"
    )
    assert adopter.try_adopt_task_instances([orphan]) == []
    key = w.ti.key
    late_name = launch_pod_name(key, "launch-late")
    # The late scheduler's create lands now, after the adopter's list.
    core_v1.create_namespaced_pod(
        "default",
        worker_pod_of(key, name=late_name, launch="launch-late", job_id="42", command="sleep 3; exit 0"),
    )
    events: dict[Any, Any] = {}
    heartbeat_until(adopter, lambda e: "late31" in terminal(e), timeout=60, events=events)
    assert [p["metadata"]["name"] for p in pods_of(sandbox, "late31")] == [late_name]
    assert terminal(events)["late31"][0] == "success"

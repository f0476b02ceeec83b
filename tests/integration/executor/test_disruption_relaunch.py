"""A worker pod disrupted before any of its containers started is launched
again for the same try, bounded by ``[jobwatch] disruption_relaunches``; one disrupted while running fails.

The sandbox keeps each pod Pending (containers ``ContainerCreating``) for ``pod_start_delay`` seconds; the
kubelet's eviction then fails it as a real one does (``Evicted``, a ``DisruptionTarget`` condition, its
containers ``ContainerStatusUnknown`` with exit code 137 and no ``startedAt``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import structlog.testing
from exec_helpers import submit, worker_pod_of
from support.workloads import make_workload

pytestmark = [pytest.mark.timeout(180), pytest.mark.sandbox_opts(pod_start_delay=4.0)]


@pytest.fixture(autouse=True)
def _short_relaunch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_jobwatch.executors import results

    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_INITIAL_SECONDS", 0.2)
    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_MAX_SECONDS", 0.5)


def _pods(sandbox: Any, task_id: str) -> list[dict[str, Any]]:
    return [
        p
        for p in sandbox.objects("pods", "default")
        if p["metadata"]["annotations"].get("task_id") == task_id
    ]


def _heartbeat(ex: Any, events: list[tuple[Any, Any]]) -> None:
    ex.heartbeat()
    events.extend(ex.get_event_buffer().items())


def _terminal(events: list[tuple[Any, Any]]) -> list[tuple[str, str, Any]]:
    return [(k.task_id, str(s), info) for k, (s, info) in events if str(s) in ("success", "failed")]


def _evict_next_pending_pod(ex: Any, sandbox: Any, task_id: str, seen: set[str], events: list[Any]) -> str:
    """Wait for a new pod of ``task_id`` (still Pending: containers being created) and evict it."""
    deadline = time.monotonic() + 60
    while True:
        _heartbeat(ex, events)
        fresh = [p for p in _pods(sandbox, task_id) if p["metadata"]["name"] not in seen]
        if fresh:
            pod = fresh[0]
            assert pod["status"].get("phase") == "Pending", pod["status"]
            name: str = pod["metadata"]["name"]
            seen.add(name)
            sandbox.evict_pod("default", name)
            return name
        assert time.monotonic() < deadline, f"no new pod of {task_id}; events {events}"
        time.sleep(0.05)


def _adopt_once_the_late_create_lands(
    adopter: Any,
    w: Any,
    launch_id: str,
    listed: threading.Event,
    landed: Callable[[], bool],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, list[tuple[Any, Any]]]:
    """``adopter`` (scheduler 102) adopts ``w``'s task from scheduler 101, launch ``launch_id``: its first pod
    list sets ``listed`` and returns only once the late scheduler's held create has ``landed()``, so that the
    pod lands after the adopter listed. Returns the adopter's record once its create ended, and its events."""
    from airflow.executors.workloads import ExecuteTask

    monkeypatch.setattr(ExecuteTask, "make", classmethod(lambda cls, ti, **kw: w))
    real_list = adopter._list_everywhere

    def list_then_let_the_late_create_land(*args: Any, **kwargs: Any) -> Any:
        pods = real_list(*args, **kwargs)
        if not listed.is_set():
            listed.set()
            until = time.monotonic() + 30
            while not landed():
                assert time.monotonic() < until, "the late scheduler's relaunch never landed"
                time.sleep(0.05)
        return pods

    monkeypatch.setattr(adopter, "_list_everywhere", list_then_let_the_late_create_land)
    orphan = SimpleNamespace(
        key=w.ti.key, queued_by_job_id=101, external_executor_id=launch_id, state="queued"
    )
    assert adopter.try_adopt_task_instances([orphan]) == []
    adopter_events: list[tuple[Any, Any]] = []
    deadline = time.monotonic() + 60
    while (record := adopter.records.get(w.ti.key)) is not None and record.pod is None:
        _heartbeat(adopter, adopter_events)
        assert time.monotonic() < deadline, f"the adopter's create never ended; events {adopter_events}"
        time.sleep(0.05)
    return record, adopter_events


def _until_terminal(
    ex: Any, events: list[tuple[Any, Any]], timeout: float = 60
) -> list[tuple[str, str, Any]]:
    deadline = time.monotonic() + timeout
    while not _terminal(events):
        _heartbeat(ex, events)
        assert time.monotonic() < deadline, f"no terminal event; events {events}"
        time.sleep(0.1)
    return _terminal(events)


def test_a_pod_evicted_before_it_started_is_launched_again_for_the_same_try(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Any
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    w = make_workload(task_id="unlucky", command="exit 0")
    submit(ex, w)
    events: list[tuple[Any, Any]] = []
    seen: set[str] = set()
    evicted = _evict_next_pending_pod(ex, sandbox, "unlucky", seen, events)
    (terminal,) = _until_terminal(ex, events)
    assert terminal[:2] == ("unlucky", "success"), terminal
    assert evicted not in terminal[2]
    assert ex.running == set()
    status = ex.status()
    assert status["disruption_relaunches"] == 1
    assert status["pods_launched"] == 2 and status["failed"] == 0
    # The relaunch is said in the task's log, with the disruption.
    log = (tmp_path / "logs" / w.log_path).read_text()
    assert evicted in log and "Evicted" in log and "launching it again" in log
    # The pod a relaunch leaves behind is cleaned up as upstream cleans up a failed pod: with
    # delete_worker_pods_on_failure = False (this harness) it is kept for inspection, labelled done, so that
    # no adoption takes it for a launch of the try.
    from airflow_jobwatch.executors.pods import DONE_LABEL

    deadline = time.monotonic() + 20
    while not any(
        p["metadata"]["name"] == evicted and p["metadata"]["labels"].get(DONE_LABEL) == "True"
        for p in _pods(sandbox, "unlucky")
    ):
        _heartbeat(ex, events)
        assert time.monotonic() < deadline, "the evicted pod was not kept and labelled done"
        time.sleep(0.1)
    assert len(_terminal(events)) == 1


def test_past_disruption_relaunches_the_task_fails_naming_every_disruption(
    executor_factory: Any, kube_sandbox: Any
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory(AIRFLOW__JOBWATCH__DISRUPTION_RELAUNCHES="1")
    submit(ex, make_workload(task_id="doomed", command="exit 0"))
    events: list[tuple[Any, Any]] = []
    seen: set[str] = set()
    first = _evict_next_pending_pod(ex, sandbox, "doomed", seen, events)
    second = _evict_next_pending_pod(ex, sandbox, "doomed", seen, events)
    ((task_id, state, info),) = _until_terminal(ex, events)
    assert (task_id, state) == ("doomed", "failed")
    assert first in info and second in info and info.count("Evicted") >= 2, info
    assert "disruption_relaunches = 1" in info
    assert ex.status()["disruption_relaunches"] == 1
    assert ex.running == set()


def test_a_pod_evicted_while_running_fails_as_before(executor_factory: Any, kube_sandbox: Any) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    submit(ex, make_workload(task_id="evicted_running", command="sleep 60"))
    events: list[tuple[Any, Any]] = []
    deadline = time.monotonic() + 60
    while not [p for p in _pods(sandbox, "evicted_running") if p["status"].get("phase") == "Running"]:
        _heartbeat(ex, events)
        assert time.monotonic() < deadline
        time.sleep(0.1)
    (pod,) = _pods(sandbox, "evicted_running")
    sandbox.evict_pod("default", pod["metadata"]["name"])
    ((task_id, state, info),) = _until_terminal(ex, events)
    assert (task_id, state) == ("evicted_running", "failed")
    assert "Evicted" in info
    assert ex.status()["disruption_relaunches"] == 0 and ex.status()["pods_launched"] == 1


def test_an_adopter_meets_the_relaunch_of_a_late_scheduler_under_its_name(
    executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scheduler A's pod is evicted before it starts, with ``delete_worker_pods_on_failure`` (failed pods are
    deleted), and A relaunches the try. Scheduler B, taking A for dead, adopts the task instance in the moment
    before A's replacement exists: its list finds no live pod of the launch, so it creates the launch's pod
    itself, building its names from the first one on. A's create passed A's database check before the
    adoption and lands just after B's list. Exactly one live pod of the launch may come of it: the evicted
    pod, labelled done and kept until its replacement exists, answers B's first name with 409, and B meets
    A's replacement under the next one. The evicted pod is deleted once A no longer holds the task."""

    from airflow_jobwatch.executors.pods import DONE_LABEL

    sandbox, _ = kube_sandbox
    task_id = "contested_relaunch"
    late = executor_factory(job_id="101", AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS_ON_FAILURE="True")
    w = make_workload(task_id=task_id, command="sleep 60")
    w.ti.external_executor_id = "launch-relaunched"
    submit(late, w)
    late_events: list[tuple[Any, Any]] = []
    evicted = _evict_next_pending_pod(late, sandbox, task_id, set(), late_events)

    # A's relaunch: its create is sent (A's check passed) and held until B has listed the pods.
    listed = threading.Event()
    real_create = late._create_call

    def create_after_the_adopters_list(*args: Any, **kwargs: Any) -> Any:
        assert listed.wait(60), "the adopter never listed"
        return real_create(*args, **kwargs)

    monkeypatch.setattr(late, "_create_call", create_after_the_adopters_list)

    def live(pod: dict[str, Any]) -> bool:
        return pod["metadata"]["labels"].get(DONE_LABEL) != "True" and pod["status"].get("phase") != "Failed"

    deadline = time.monotonic() + 60
    while not late._inflight or any(
        p["metadata"]["name"] == evicted and live(p) for p in _pods(sandbox, task_id)
    ):
        _heartbeat(late, late_events)
        assert time.monotonic() < deadline, f"no relaunch sent; events {late_events}"
        time.sleep(0.05)

    adopter = executor_factory(job_id="102")
    record, adopter_events = _adopt_once_the_late_create_lands(
        adopter,
        w,
        "launch-relaunched",
        listed,
        lambda: any(live(p) for p in _pods(sandbox, task_id)),
        monkeypatch,
    )
    live_pods = [p["metadata"]["name"] for p in _pods(sandbox, task_id) if live(p)]
    assert len(live_pods) == 1, ("two live pods for one launch", live_pods, evicted)
    assert record is not None and record.pod == ("default", live_pods[0])
    assert _terminal(adopter_events) == [], adopter_events
    # The evicted pod goes once the late scheduler sees its task adopted away.
    deadline = time.monotonic() + 60
    while any(p["metadata"]["name"] == evicted for p in _pods(sandbox, task_id)):
        _heartbeat(late, late_events)
        _heartbeat(adopter, adopter_events)
        assert time.monotonic() < deadline, "the evicted pod was never deleted"
        time.sleep(0.1)
    assert _terminal(late_events) == [] and _terminal(adopter_events) == [], (late_events, adopter_events)


@pytest.mark.parametrize("delete_on_failure", ["True", "False"])
def test_an_adopter_stops_a_replaced_pending_pod_it_meets_under_the_launchs_first_name(
    executor_factory: Any,
    kube_sandbox: Any,
    core_v1: Any,
    monkeypatch: pytest.MonkeyPatch,
    delete_on_failure: str,
) -> None:
    """The scheduler that replaced a pod stuck Pending on a fatal waiting reason (``ErrImagePull``) stopped
    before the replacement existed: that pod is left labelled done, keeping the launch's first name taken.
    The adopter's create of that name is answered 409 by it; the adopter creates the launch's next pod and,
    once that pod exists, stops the Pending one, which could otherwise still start and run the try. When the
    task has ended, the stopped pod is deleted where ``delete_worker_pods_on_failure`` says so."""
    from airflow.executors.workloads import ExecuteTask

    from airflow_jobwatch.executors.pods import DONE_LABEL, launch_pod_name

    sandbox, _ = kube_sandbox
    task_id = "replaced_pending"
    w = make_workload(task_id=task_id, command="exit 0")
    w.ti.external_executor_id = "launch-pending"
    stuck = worker_pod_of(
        w.ti.key,
        name=launch_pod_name(w.ti.key, "launch-pending", 0),
        launch="launch-pending",
        job_id="101",
        command="exit 0",
    )
    stuck["metadata"]["labels"][DONE_LABEL] = "True"
    stuck["spec"]["containers"][0]["image"] = "registry.invalid/never:1"
    core_v1.create_namespaced_pod("default", stuck)
    deadline = time.monotonic() + 30
    while not any(
        (cs.get("state") or {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff")
        for p in _pods(sandbox, task_id)
        for cs in p["status"].get("containerStatuses") or []
    ):
        assert time.monotonic() < deadline, "the stuck pod never failed to pull its image"
        time.sleep(0.05)

    adopter = executor_factory(
        job_id="102", AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS_ON_FAILURE=delete_on_failure
    )
    monkeypatch.setattr(ExecuteTask, "make", classmethod(lambda cls, ti, **kw: w))
    orphan = SimpleNamespace(
        key=w.ti.key, queued_by_job_id=101, external_executor_id="launch-pending", state="queued"
    )
    assert adopter.try_adopt_task_instances([orphan]) == []
    events: list[tuple[Any, Any]] = []

    def stuck_pod() -> dict[str, Any] | None:
        return next((p for p in _pods(sandbox, task_id) if p["metadata"]["name"] == stuck_name), None)

    stuck_name = stuck["metadata"]["name"]
    deadline = time.monotonic() + 60
    while not _terminal(events) or (delete_on_failure == "True") == (stuck_pod() is not None):
        _heartbeat(adopter, events)
        pod = stuck_pod()
        if pod is not None and pod["status"].get("phase") == "Failed":
            assert pod["status"].get("reason") == "DeadlineExceeded", pod["status"]
        assert time.monotonic() < deadline, (
            "the task did not end, or the stuck pod was not cleaned up per delete_worker_pods_on_failure",
            events,
            [(p["metadata"]["name"], p["status"].get("phase")) for p in _pods(sandbox, task_id)],
        )
        time.sleep(0.1)
    assert [t[:2] for t in _terminal(events)] == [(task_id, "success")], events
    assert adopter.status()["pods_launched"] == 1
    if delete_on_failure == "False":
        # Kept for inspection, labelled done, and stopped: it never starts the try.
        deadline = time.monotonic() + 30
        while (stuck_pod() or {}).get("status", {}).get("reason") != "DeadlineExceeded":
            assert time.monotonic() < deadline, stuck_pod()
            time.sleep(0.1)


def test_a_replaced_pod_that_may_still_start_is_stopped_and_keeps_its_name(
    executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scheduler A's pods of one launch fail one after the other on an image that cannot be pulled (Pending,
    ``ErrImagePull``: each could yet start). Once the launch's next pod exists, each replaced one is stopped
    (``activeDeadlineSeconds`` set: Failed, ``DeadlineExceeded``), not deleted, so its name stays taken. When
    the second pod has failed too, scheduler B adopts the task in the moment before A's next relaunch exists
    and creates the launch's pods from the first name on: each earlier name answers 409, and B meets A's
    relaunch under the next one. One live pod of the launch, however the two race; the stopped pods are
    deleted once the key has left A."""

    from airflow_jobwatch.executors import results
    from airflow_jobwatch.executors.pods import DONE_LABEL, launch_pod_name

    monkeypatch.setattr(results, "queued_on_try", lambda keys, *_: dict.fromkeys(keys, True))
    sandbox, _ = kube_sandbox
    task_id = "stopped_not_deleted"
    late = executor_factory(
        job_id="101",
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_RETRIES="-1",
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_EXCLUDED_CONTAINER_REASONS="",
        AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS_ON_FAILURE="True",
    )
    w = make_workload(task_id=task_id, command="exit 0", image="registry.invalid/never:1")
    w.ti.external_executor_id = "launch-stopped"
    names = [launch_pod_name(w.ti.key, "launch-stopped", index) for index in range(3)]
    late_events: list[tuple[Any, Any]] = []

    def pod(name: str) -> dict[str, Any] | None:
        return next((p for p in _pods(sandbox, task_id) if p["metadata"]["name"] == name), None)

    def stopped(name: str) -> bool:
        status = (pod(name) or {}).get("status") or {}
        return (status.get("phase"), status.get("reason")) == ("Failed", "DeadlineExceeded")

    submit(late, w)
    deadline = time.monotonic() + 60
    first_seen = False
    while not (pod(names[1]) is not None and stopped(names[0])):
        _heartbeat(late, late_events)
        first_seen = first_seen or pod(names[0]) is not None
        assert not first_seen or pod(names[0]) is not None, "the replaced pod was deleted: its name is free"
        assert time.monotonic() < deadline, (
            "the replaced pod was not stopped",
            [(p["metadata"]["name"], p["status"]) for p in _pods(sandbox, task_id)],
            late_events,
        )
        time.sleep(0.05)
    assert pod(names[0])["metadata"]["labels"].get(DONE_LABEL) == "True"  # type: ignore[index]

    # A's second relaunch: its create is sent once the second pod failed, and held until B has listed.
    listed = threading.Event()
    real_create = late._create_call

    def create_after_the_adopters_list(*args: Any, **kwargs: Any) -> Any:
        assert listed.wait(60), "the adopter never listed"
        return real_create(*args, **kwargs)

    monkeypatch.setattr(late, "_create_call", create_after_the_adopters_list)

    def live(p: dict[str, Any]) -> bool:
        return p["metadata"]["labels"].get(DONE_LABEL) != "True" and p["status"].get("phase") != "Failed"

    deadline = time.monotonic() + 60
    while not late._inflight or any(live(p) for p in _pods(sandbox, task_id)):
        _heartbeat(late, late_events)
        assert time.monotonic() < deadline, f"no second relaunch sent; events {late_events}"
        time.sleep(0.05)
    assert pod(names[0]) is not None and pod(names[1]) is not None

    adopter = executor_factory(job_id="102")
    record, adopter_events = _adopt_once_the_late_create_lands(
        adopter, w, "launch-stopped", listed, lambda: pod(names[2]) is not None, monkeypatch
    )
    live_pods = [p["metadata"]["name"] for p in _pods(sandbox, task_id) if live(p)]
    assert live_pods == [names[2]], ("not one live pod for the launch", live_pods, names)
    assert record is not None and record.pod == ("default", names[2])
    # The stopped pods go once A sees the task adopted away.
    deadline = time.monotonic() + 60
    while pod(names[0]) is not None or pod(names[1]) is not None:
        _heartbeat(late, late_events)
        _heartbeat(adopter, adopter_events)
        assert time.monotonic() < deadline, "the stopped pods were never deleted"
        time.sleep(0.1)


def test_a_replaced_pod_that_may_still_start_is_deleted_where_it_cannot_be_stopped(
    executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the right to patch pods (here every PATCH is answered 403), a replaced pod that could still start
    is deleted once the launch's next pod exists, as it was before stopping existed, and the scheduler says
    once why (the refusal, and the right to grant)."""
    from airflow_jobwatch.executors import results
    from airflow_jobwatch.executors.pods import launch_pod_name

    monkeypatch.setattr(results, "queued_on_try", lambda keys, *_: dict.fromkeys(keys, True))
    sandbox, _ = kube_sandbox
    task_id = "not_stoppable"
    ex = executor_factory(
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_RETRIES="1",
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_EXCLUDED_CONTAINER_REASONS="",
    )
    w = make_workload(task_id=task_id, command="exit 0", image="registry.invalid/never:1")
    w.ti.external_executor_id = "launch-refused"
    first, second = (launch_pod_name(w.ti.key, "launch-refused", index) for index in range(2))
    sandbox.set_error_rate(1.0, status=403, verbs={"patch"})
    submit(ex, w)
    events: list[tuple[Any, Any]] = []
    names = lambda: {p["metadata"]["name"] for p in _pods(sandbox, task_id)}  # noqa: E731
    deadline = time.monotonic() + 60
    with structlog.testing.capture_logs() as entries:
        while not (second in names() and first not in names()):
            _heartbeat(ex, events)
            assert time.monotonic() < deadline, ("the replaced pod was not deleted", names(), events)
            time.sleep(0.05)
    refusals = [e for e in entries if "Could not stop the replaced pod" in str(e.get("event"))]
    assert [e["log_level"] for e in refusals] == ["warning"], refusals
    assert "403" in str(refusals[0]) and "`patch` on pods" in str(refusals[0]), refusals

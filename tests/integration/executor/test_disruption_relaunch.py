"""A worker pod disrupted before any of its containers started is launched
again for the same try, bounded by ``[jobwatch] disruption_relaunches``; one disrupted while running fails.

The sandbox keeps each pod Pending (containers ``ContainerCreating``) for ``pod_start_delay`` seconds; the
kubelet's eviction then fails it as a real one does (``Evicted``, a ``DisruptionTarget`` condition, its
containers ``ContainerStatusUnknown`` with exit code 137 and no ``startedAt``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from exec_helpers import submit
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

"""A pod another scheduler adopted frees this executor's slot, and reports nothing.

When a scheduler's heartbeat goes stale, a peer adopts its worker pods: it relabels them
``airflow-worker=<its own job id>``. If the first scheduler is in fact alive, its watch sees the pod leave
its label selector (a DELETED event whose object carries the new labels), or, when its watcher child was
down at that moment, the missing-pod GET after the restart finds the pod relabelled. Either way the task
belongs to the other scheduler now: upstream's watcher calls it ``ADOPTED`` and its executor removes the
key from ``running`` without an event. Reporting it failed (``Deleted``) would be wrong, and waiting for
an event that the selector no longer lets through leaks the slot for good.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from exec_helpers import heartbeat_until, submit, terminal
from support.workloads import make_workload

pytestmark = pytest.mark.timeout(180)


def _pod_of(sandbox: Any, task_id: str) -> dict[str, Any] | None:
    for pod in sandbox.objects("pods", "default"):
        if pod["metadata"]["annotations"].get("task_id") == task_id:
            return pod
    return None


def _running(sandbox: Any, task_id: str) -> bool:
    pod = _pod_of(sandbox, task_id)
    return pod is not None and pod["status"].get("phase") == "Running"


def _adopt(core_v1: Any, pod: dict[str, Any], job_id: str) -> None:
    """What the peer's try_adopt_task_instances does to the pod."""
    core_v1.patch_namespaced_pod(
        pod["metadata"]["name"], "default", {"metadata": {"labels": {"airflow-worker": job_id}}}
    )


def _wait_released(ex: Any, events: dict[Any, Any], all_events: list[Any], task_id: str) -> None:
    def released(_: Any) -> bool:
        return not any(k.task_id == task_id for k in ex.running)

    heartbeat_until(ex, released, timeout=60, events=events, all_events=all_events)


def test_pod_adopted_while_the_watch_runs_frees_the_slot_without_a_report(
    executor_factory: Any, kube_sandbox: Any, core_v1: Any
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory(job_id="42")
    submit(ex, make_workload(task_id="adoptee", command="sleep 120"))
    events: dict[Any, Any] = {}
    all_events: list[Any] = []
    heartbeat_until(
        ex, lambda _: _running(sandbox, "adoptee"), timeout=60, events=events, all_events=all_events
    )
    heartbeat_until(
        ex, lambda _: ex.supervisor.all_synced(), timeout=60, events=events, all_events=all_events
    )
    pod = _pod_of(sandbox, "adoptee")
    assert pod is not None
    _adopt(core_v1, pod, "99")
    _wait_released(ex, events, all_events, "adoptee")
    assert "adoptee" not in terminal(events), f"the other scheduler's task was reported: {all_events}"
    assert ex.supervisor.counters.adopted_away == 1 and ex.status()["adopted_away"] == 1
    # The pod is the other scheduler's: left alone (not deleted, not labelled done).
    after = sandbox.get_object("pods", "default", pod["metadata"]["name"])
    assert after is not None and "airflow_executor_done" not in after["metadata"]["labels"]


def test_pod_adopted_while_the_watcher_was_down_frees_the_slot_without_a_report(
    executor_factory: Any, kube_sandbox: Any, core_v1: Any
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory(job_id="42")
    submit(ex, make_workload(task_id="adoptee", command="sleep 120"))
    events: dict[Any, Any] = {}
    all_events: list[Any] = []
    heartbeat_until(
        ex, lambda _: _running(sandbox, "adoptee"), timeout=60, events=events, all_events=all_events
    )
    heartbeat_until(
        ex, lambda _: ex.supervisor.all_synced(), timeout=60, events=events, all_events=all_events
    )
    pod = _pod_of(sandbox, "adoptee")
    assert pod is not None
    # The watcher dies; before the supervisor (which acts on the next heartbeat) starts a new one, a peer
    # adopts the pod. The new child's first list does not contain it: only the missing-pod GET sees it.
    pid = ex.supervisor.child_pids()["default"]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _adopt(core_v1, pod, "99")
    _wait_released(ex, events, all_events, "adoptee")
    assert ex.supervisor.counters.restarts >= 1
    assert "adoptee" not in terminal(events), f"the other scheduler's task was reported: {all_events}"
    assert ex.supervisor.counters.adopted_away == 1
    assert ex.supervisor.tracked() == {}

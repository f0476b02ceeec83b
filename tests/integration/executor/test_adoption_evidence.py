"""Adoption and launching act only on whole evidence, and only while this scheduler holds the launch.

Driven as the scheduler does (queue_workload, heartbeat, try_adopt_task_instances) against the sandbox.
What Airflow's database holds for a task instance is answered by the test (these harnesses have no task
instance rows), through the one function the executor reads it with.

- A pod LIST that fails during adoption is "unknown", not "no pod": the task instance stays adopted,
  unresolved, is neither handed back for reset nor launched, and is looked for again with backoff.
- A pod in a namespace that only its ``pod_override`` names is found by the adopter (a list across all
  namespaces): one pod, one try. (Under RBAC, with that list refused: test_executor_rbac.py.)
- A pending create, or its retry, is dropped without acting once the database says this scheduler no
  longer holds the launch (another scheduler adopted it while this one was stalled).
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from exec_helpers import pods_of, poll, submit, terminal_events, wait_for_file
from support.workloads import make_workload

from airflow_jobwatch.executors import adoption_retry, results

pytestmark = pytest.mark.timeout(180)


def _row(state: str, job_id: str, launch: str, try_number: int = 1) -> Any:
    return SimpleNamespace(
        state=state, try_number=try_number, queued_by_job_id=job_id, external_executor_id=launch
    )


def _all_pods(sandbox: Any, task_id: str) -> list[dict[str, Any]]:
    return [
        p
        for ns in ("default", "elsewhere")
        for p in sandbox.objects("pods", ns)
        if (p["metadata"].get("annotations") or {}).get("task_id") == task_id
    ]


@pytest.fixture
def owner(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Which scheduler job the database says holds every launch: ``owner["job"]``, "42" until the test
    changes it, answered through ``results.launches_held``, the one function the executor asks. The
    patch raises if that function is renamed, so that these tests cannot go on passing without it."""
    held = {"job": "42"}
    monkeypatch.setattr(
        results, "launches_held", lambda launches, job_id: {k: held["job"] == job_id for k in launches}
    )
    return held


def test_a_failed_list_leaves_the_task_adopted_unresolved_until_a_list_succeeds(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, _ = kube_sandbox
    monkeypatch.setattr(adoption_retry, "ADOPTION_RETRY_INITIAL_SECONDS", 0.2)
    may_end = tmp_path / "may-end"
    old = executor_factory(job_id="42")
    w = make_workload(task_id="listed", command=f"{wait_for_file(may_end)}; exit 0")
    w.ti.external_executor_id = "launch-listed"
    events: list[tuple[Any, Any]] = []
    submit(old, w)
    poll(
        old,
        lambda: any(p["status"].get("phase") == "Running" for p in pods_of(sandbox, "listed")),
        timeout=60,
        what="the pod to run",
        events=events,
    )
    old.terminate()

    new = executor_factory(job_id="43")
    orphan = SimpleNamespace(
        key=w.ti.key, queued_by_job_id=42, external_executor_id="launch-listed", state="running"
    )
    sandbox.set_error_rate(1.0, status=500, verbs={"list"})
    assert new.try_adopt_task_instances([orphan]) == [], "a failed list must not hand the task back for reset"
    assert len(pods_of(sandbox, "listed")) == 1
    # The scheduler has given the task instance to this scheduler (it was not handed back).
    monkeypatch.setattr(
        results,
        "task_instance_rows",
        lambda keys: {w.ti.key: _row("running", "43", "launch-listed")},
    )
    sandbox.set_error_rate(0.0)
    all_events: list[tuple[Any, Any]] = []
    poll(new, lambda: w.ti.key in new.running, timeout=60, what="the retried adoption", events=all_events)
    may_end.touch()
    poll(new, lambda: terminal_events(all_events), timeout=60, what="the task's end", events=all_events)
    assert [(k, s) for k, s, _ in terminal_events(all_events)] == [(w.ti.key, "success")]
    assert len(pods_of(sandbox, "listed")) <= 1 and new.status()["pods_launched"] == 0


def test_a_restart_finds_the_pod_in_a_pod_override_namespace_and_launches_nothing(
    executor_factory: Any,
    kube_sandbox: Any,
    core_v1: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.executors.workloads import ExecuteTask

    sandbox, _ = kube_sandbox
    core_v1.create_namespace({"metadata": {"name": "elsewhere"}})
    may_end = tmp_path / "may-end"
    old = executor_factory(job_id="42")
    w = make_workload(task_id="away", command=f"{wait_for_file(may_end)}; exit 0", namespace="elsewhere")
    w.ti.external_executor_id = "launch-away"
    events: list[tuple[Any, Any]] = []
    submit(old, w)
    poll(old, lambda: _all_pods(sandbox, "away"), timeout=60, what="the pod", events=events)
    old.terminate()

    # If the adopter found no pod, it would launch the QUEUED task instance again from its rebuilt workload.
    monkeypatch.setattr(ExecuteTask, "make", classmethod(lambda cls, ti, **kw: w))
    new = executor_factory(job_id="43")
    orphan = SimpleNamespace(
        key=w.ti.key,
        queued_by_job_id=42,
        external_executor_id="launch-away",
        state="queued",
        executor_config=w.ti.executor_config if hasattr(w.ti, "executor_config") else None,
    )
    assert new.try_adopt_task_instances([orphan]) == []
    all_events: list[tuple[Any, Any]] = []
    may_end.touch()
    poll(new, lambda: terminal_events(all_events), timeout=60, what="the task's end", events=all_events)
    assert [(k, s) for k, s, _ in terminal_events(all_events)] == [(w.ti.key, "success")]
    assert new.status()["pods_launched"] == 0, "the adopter launched a second pod for the same try"
    assert len(_all_pods(sandbox, "away")) <= 1


def test_a_create_backing_off_is_dropped_once_another_scheduler_holds_the_launch(
    executor_factory: Any, kube_sandbox: Any, owner: dict[str, str]
) -> None:
    """Scheduler 42's create is refused (a full quota); meanwhile 42 was taken for dead and scheduler 43
    adopted the task instance. 42's next retry must not create the pod."""
    sandbox, _ = kube_sandbox
    ex = executor_factory(job_id="42")
    w = make_workload(task_id="fenced", command="exit 0")
    w.ti.external_executor_id = "launch-fenced"
    sandbox.set_error_rate(1.0, status=503, verbs={"create"})
    events: list[tuple[Any, Any]] = []
    submit(ex, w)
    poll(ex, lambda: ex.status()["create_retries"] >= 1, timeout=60, what="a refused create", events=events)
    owner["job"] = "43"
    sandbox.set_error_rate(0.0)
    poll(ex, lambda: w.ti.key not in ex.running, timeout=60, what="the launch to be dropped", events=events)
    for _ in range(10):  # a few more heartbeats: nothing may create it now
        ex.heartbeat()
        events.extend(ex.get_event_buffer().items())
    assert ex.status()["pods_launched"] == 0, "a scheduler that no longer holds the launch created its pod"
    assert pods_of(sandbox, "fenced") == []
    assert terminal_events(events) == []
    assert ex.status().get("launches_dropped") == 1


def test_a_scheduler_adopting_back_a_task_drops_its_own_stale_pending_launch(
    executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """42's create of a task backs off (503); 42 is taken for dead and 43 launches the task (same launch id,
    the database's); then 43 dies and 42 adopts the task back. The database names 42 and the launch again,
    so the check before a create would pass for 42's stale pending create: adoption must drop it."""
    sandbox, _ = kube_sandbox
    monkeypatch.setattr(adoption_retry, "ADOPTION_RETRY_INITIAL_SECONDS", 0.2)
    a = executor_factory(job_id="42")
    w = make_workload(task_id="aba", command="sleep 30")
    w.ti.external_executor_id = "launch-aba"
    events: list[tuple[Any, Any]] = []
    sandbox.set_error_rate(1.0, status=503, verbs={"create"})
    submit(a, w)
    poll(a, lambda: a.status()["create_retries"] >= 1, timeout=60, what="a refused create", events=events)
    sandbox.set_error_rate(0.0)
    b = executor_factory(job_id="43")  # 42's task adopted by 43, which launches it (no pod existed)
    submit(b, w)
    poll(b, lambda: pods_of(sandbox, "aba"), timeout=60, what="43's pod", events=events)
    b.terminate()
    orphan = SimpleNamespace(
        key=w.ti.key, queued_by_job_id=43, external_executor_id="launch-aba", state="queued"
    )
    assert a.try_adopt_task_instances([orphan]) == []
    # A stale create would be retried within its backoff (0.1 s doubling to 0.5 s here): 3 s of heartbeats.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        a.heartbeat()
        events.extend(a.get_event_buffer().items())
        time.sleep(0.1)
    assert a.status()["pods_launched"] == 0, "the stale launch created a second pod for the same try"
    assert len(pods_of(sandbox, "aba")) == 1 and w.ti.key in a.running


@pytest.mark.sandbox_opts(pod_start_delay=4.0)  # the pod stays Pending long enough to be evicted
def test_a_stalled_scheduler_does_not_relaunch_an_evicted_pod_of_a_task_adopted_elsewhere(
    executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch, owner: dict[str, str]
) -> None:
    """42's pod is evicted before it started, while 42 was taken for dead and 43 adopted the task (its
    relabel not yet done). 42 must not launch the task again: that launch is 43's to decide."""
    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_INITIAL_SECONDS", 0.1)
    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_MAX_SECONDS", 0.2)
    sandbox, _ = kube_sandbox
    ex = executor_factory(job_id="42")
    w = make_workload(task_id="evicted", command="exit 0")
    w.ti.external_executor_id = "launch-evicted"
    events: list[tuple[Any, Any]] = []
    submit(ex, w)
    (pod,) = poll(ex, lambda: pods_of(sandbox, "evicted"), timeout=60, what="the pod", events=events)
    assert pod["status"].get("phase") == "Pending", pod["status"]
    owner["job"] = "43"
    sandbox.evict_pod("default", pod["metadata"]["name"])
    poll(ex, lambda: w.ti.key not in ex.running, timeout=60, what="42 to let the task go", events=events)
    deadline = time.monotonic() + 2  # a relaunch would be created within its backoff (0.1-0.2 s here)
    while time.monotonic() < deadline:
        ex.heartbeat()
        events.extend(ex.get_event_buffer().items())
        time.sleep(0.1)
    assert ex.status()["pods_launched"] == 1, "the stalled scheduler launched the task again"
    assert terminal_events(events) == []

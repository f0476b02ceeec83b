"""One task instance key, several launches, against the sandbox.

A ``TaskInstanceKey`` keeps its try_number across deferral and resumption, reschedule-mode sensors and
some clears, so the scheduler can hand the executor a key again while the pod of its earlier launch
still runs or is just ending. A terminal result counts only for the launch that is current for its key:
the earlier launch's pod is cleaned up and nothing is reported for it.

The pods here wait for a file the test creates, so the test decides when each one ends; the sandbox
runs their containers as local processes, which see the test's temp directory.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from exec_helpers import heartbeat_until, pods_of, poll, submit, terminal, terminal_events, wait_for_file
from support.workloads import make_workload

from airflow_jobwatch.executors.pods import LAUNCH_ANNOTATION

pytestmark = pytest.mark.timeout(180)


def test_the_pod_of_an_earlier_launch_ending_during_the_new_create_is_cleaned_up_and_not_reported(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Path
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    first_may_end = tmp_path / "first-may-end"
    first = make_workload(task_id="resumes", command=f"{wait_for_file(first_may_end)}; exit 0")
    # The same key (dag, task, run, try 1, map index): what the scheduler sends when the task resumes.
    second = make_workload(task_id="resumes", command="exit 0")
    assert first.ti.key == second.ti.key
    events: list[tuple[Any, Any]] = []

    submit(ex, first)
    poll(
        ex,
        lambda: any(str(s) == "running" for _, (s, _) in events),
        timeout=60,
        what="the first launch's pod to run",
        events=events,
    )
    (old_pod,) = pods_of(sandbox, "resumes")
    old_name = old_pod["metadata"]["name"]

    # The key comes back while its first pod still runs; the new pod's create is answered 503.
    sandbox.set_error_rate(1.0, status=503, verbs={"create"})
    submit(ex, second)
    poll(
        ex,
        lambda: ex.status()["create_retries"] >= 1,
        timeout=60,
        what="the second launch's create to be refused",
        events=events,
    )
    # The first pod ends (Succeeded) while the second is still being created.
    first_may_end.touch()
    poll(
        ex,
        lambda: not any(p["metadata"]["name"] == old_name for p in pods_of(sandbox, "resumes")),
        timeout=60,
        what="the first launch's pod to be cleaned up (deleted: delete_worker_pods = True)",
        events=events,
    )
    assert terminal_events(events) == [], "the earlier launch's end was reported against the new launch"
    assert second.ti.key in ex.running, "the key left running while its current launch is being created"
    assert ex.status()["pending_creation"] == 1

    sandbox.set_error_rate(0.0)
    poll(ex, lambda: terminal_events(events), timeout=60, what="the second launch to end", events=events)
    ((key, state, info),) = terminal_events(events)
    assert (key, state) == (second.ti.key, "success")
    assert old_name not in info, info
    status = ex.status()
    assert status["stale_pods_cleaned"] == 1
    assert status["pods_launched"] == 2 and status["success"] == 1
    assert ex.running == set()


def test_adoption_reports_the_newest_launch_of_a_key_and_cleans_up_the_earlier_one(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Path
) -> None:
    """A dead scheduler had launched a key twice: the earlier pod succeeded, the newer one failed."""
    sandbox, _ = kube_sandbox
    old = executor_factory(job_id="42")
    first_may_end = tmp_path / "first-may-end"
    second_may_end = tmp_path / "second-may-end"
    first = make_workload(task_id="twice", command=f"{wait_for_file(first_may_end)}; exit 0")
    second = make_workload(task_id="twice", command=f"{wait_for_file(second_may_end)}; exit 3")
    events: list[tuple[Any, Any]] = []
    submit(old, first)
    poll(old, lambda: len(pods_of(sandbox, "twice")) == 1, timeout=60, what="the first pod", events=events)
    # Creation timestamps have a resolution of one second: the newer launch must be visibly newer.
    created = pods_of(sandbox, "twice")[0]["metadata"]["creationTimestamp"]
    deadline = time.monotonic() + 10
    while time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) <= created:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    submit(old, second)
    poll(old, lambda: len(pods_of(sandbox, "twice")) == 2, timeout=60, what="the second pod", events=events)
    old.terminate()  # the scheduler dies; both pods live on and end while nobody watches
    first_may_end.touch()
    second_may_end.touch()

    def phases() -> dict[str, str]:
        return {
            p["metadata"]["annotations"][LAUNCH_ANNOTATION]: p["status"].get("phase", "")
            for p in pods_of(sandbox, "twice")
        }

    deadline = time.monotonic() + 60
    while sorted(phases().values()) != ["Failed", "Succeeded"]:
        assert time.monotonic() < deadline, phases()
        time.sleep(0.1)
    by_phase = {phase: launch for launch, phase in phases().items()}

    new = executor_factory(job_id="43")
    orphan = SimpleNamespace(key=first.ti.key, queued_by_job_id=42)
    assert new.try_adopt_task_instances([orphan]) == []
    all_events: list[tuple[Any, Any]] = []
    heartbeat_until(new, lambda e: "twice" in terminal(e), timeout=30, all_events=all_events)
    reported = terminal_events(all_events)
    assert [(k.task_id, s) for k, s, _ in reported] == [("twice", "failed")], reported
    assert "exited with code 3" in reported[0][2]
    # The earlier launch's Succeeded pod is cleaned up (deleted); the failed one is kept, labelled done.
    deadline = time.monotonic() + 30
    while by_phase["Succeeded"] in phases():
        new.heartbeat()
        all_events.extend(new.get_event_buffer().items())
        assert time.monotonic() < deadline, "the earlier launch's pod was not cleaned up"
        time.sleep(0.1)
    assert len(terminal_events(all_events)) == 1
    assert new.status()["stale_pods_cleaned"] == 1

"""JobWatchExecutor driven directly (as the scheduler's loop drives it) against the sandbox.

No scheduler, no database: synthetic ExecuteTask workloads whose pods run ``sh -c ...``
(support.workloads), ``heartbeat()`` in a loop, and the event buffer checked.
Covers what the e2e tests cannot force: API errors on pod creation, upstream-compatible labels.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from exec_helpers import heartbeat_until as _heartbeat_until
from exec_helpers import submit as _submit
from exec_helpers import terminal as _terminal
from support.workloads import make_workload

pytestmark = pytest.mark.timeout(120)


def test_success_and_failure_reported_with_upstream_labels(executor_factory, kube_sandbox):
    sandbox, _ = kube_sandbox
    ex = executor_factory(job_id="42")
    ok = make_workload(task_id="ok", command="sleep 0.3; exit 0")
    bad = make_workload(task_id="bad", command="echo oops >&2; exit 3")
    _submit(ex, ok, bad)
    events = _heartbeat_until(ex, lambda e: len(_terminal(e)) == 2, timeout=60)
    terminal = _terminal(events)
    assert terminal["ok"][0] == "success"
    assert terminal["bad"][0] == "failed"
    assert "exited with code 3" in terminal["bad"][1]
    assert ex.running == set()
    # The failed pod is kept (delete_worker_pods_on_failure=False) and labelled done, as upstream does.
    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

    def bad_pod_done() -> dict[str, Any] | None:
        ex.sync()
        pods = [
            p
            for p in sandbox.objects("pods", "default")
            if p["metadata"]["annotations"].get("task_id") == "bad"
        ]
        if pods and pods[0]["metadata"]["labels"].get("airflow_executor_done") == "True":
            return pods[0]
        return None

    deadline = time.monotonic() + 20
    while (pod := bad_pod_done()) is None:
        assert time.monotonic() < deadline, "the failed pod was not labelled airflow_executor_done=True"
        time.sleep(0.1)
    expected = PodGenerator.build_labels_for_k8s_executor_pod(
        dag_id=bad.ti.dag_id,
        task_id="bad",
        try_number=1,
        airflow_worker="42",
        run_id=bad.ti.run_id,
    )
    labels = pod["metadata"]["labels"]
    assert {k: labels.get(k) for k in expected} == expected
    assert pod["metadata"]["annotations"]["run_id"] == bad.ti.run_id
    assert pod["metadata"]["annotations"]["try_number"] == "1"
    args = pod["spec"]["containers"][0]["args"]
    assert args[:3] == ["python", "-m", "airflow.sdk.execution_time.execute_workload"]

    # The successful pod is deleted. The delete runs in the executor's API threads (and a pod being
    # deleted lingers for its grace period), so wait for it on a deadline.
    def ok_pods() -> list[dict[str, Any]]:
        ex.sync()
        return [
            p
            for p in sandbox.objects("pods", "default")
            if p["metadata"]["annotations"].get("task_id") == "ok"
        ]

    deadline = time.monotonic() + 20
    while remaining := ok_pods():
        assert time.monotonic() < deadline, f"the successful pod was not deleted: {remaining}"
        time.sleep(0.1)
    assert [p["metadata"]["name"] for p in sandbox.objects("pods", "default")] == [pod["metadata"]["name"]]


def test_transient_create_errors_keep_the_task_queued_then_it_runs(executor_factory, kube_sandbox):
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    sandbox.set_error_rate(1.0, status=503, verbs={"create"})
    _submit(ex, make_workload(task_id="patient", command="exit 0"))
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        ex.heartbeat()
        assert not _terminal(ex.get_event_buffer())
        time.sleep(0.1)
    status = ex.status()
    assert status["create_retries"] >= 2
    assert status["pending_creation"] == 1 and status["running"] == 1  # still queued, slot held
    sandbox.set_error_rate(0.0)
    events = _heartbeat_until(ex, lambda e: "patient" in _terminal(e), timeout=60)
    assert _terminal(events)["patient"][0] == "success"


def test_429_with_retry_after_pauses_creation(executor_factory, kube_sandbox):
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    sandbox.set_error_rate(1.0, status=429, retry_after=2.0, verbs={"create"})
    _submit(ex, *(make_workload(task_id=f"t{i}", command="exit 0") for i in range(3)))
    # The creates run in threads: wait until the 429s of all three are in, then count.
    deadline = time.monotonic() + 30
    while ex.status()["create_retries"] < 3:
        ex.heartbeat()
        assert time.monotonic() < deadline, ex.status()
        time.sleep(0.05)
    sandbox.reset_counters()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        ex.heartbeat()
        time.sleep(0.05)
    # One 429 with Retry-After: 2 pauses all creation: no further create requests within 1.5 s.
    assert sandbox.counters().get("create pods", 0) == 0
    sandbox.set_error_rate(0.0)
    events = _heartbeat_until(ex, lambda e: len(_terminal(e)) == 3, timeout=60)
    assert {s for s, _ in _terminal(events).values()} == {"success"}


def test_permanent_create_error_fails_the_task_with_the_servers_message(executor_factory, tmp_path):
    ex = executor_factory()
    w = make_workload(task_id="nowhere", command="exit 0", namespace="no-such-namespace")
    _submit(ex, w)
    events = _heartbeat_until(ex, lambda e: "nowhere" in _terminal(e), timeout=30)
    state, info = _terminal(events)["nowhere"]
    assert state == "failed"
    assert "404" in info and "no-such-namespace" in info
    # The reason is in the task's log file too.
    log = (tmp_path / "logs" / w.log_path).read_text()
    assert "no-such-namespace" in log
    assert ex.running == set()


def test_revoke_deletes_the_pod_without_an_event(executor_factory, kube_sandbox):
    from types import SimpleNamespace

    sandbox, _ = kube_sandbox
    ex = executor_factory()
    w = make_workload(task_id="revoked", command="sleep 30")
    _submit(ex, w)

    def running() -> bool:
        ex.heartbeat()
        return any(
            p["metadata"]["annotations"].get("task_id") == "revoked" and p["status"].get("phase") == "Running"
            for p in sandbox.objects("pods", "default")
        )

    deadline = time.monotonic() + 30
    while not running():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    ex.get_event_buffer()
    ex.revoke_task(ti=SimpleNamespace(key=w.ti.key))
    assert ex.running == set()
    deadline = time.monotonic() + 20
    while [
        p
        for p in sandbox.objects("pods", "default")
        if p["metadata"]["annotations"].get("task_id") == "revoked"
    ]:
        assert time.monotonic() < deadline, "the revoked task's pod was not deleted"
        ex.heartbeat()
        time.sleep(0.1)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        ex.heartbeat()
        assert not ex.get_event_buffer(), "revoke_task must not produce events"
        time.sleep(0.1)


def test_adoption_after_scheduler_death(executor_factory, kube_sandbox):
    from types import SimpleNamespace

    sandbox, _ = kube_sandbox
    old = executor_factory(job_id="42")
    runs_on = make_workload(task_id="runs_on", command="sleep 2; exit 0")
    ends_meanwhile = make_workload(task_id="ends_meanwhile", command="exit 0")
    already_recorded = make_workload(task_id="already_recorded", command="exit 0")
    _submit(old, runs_on, ends_meanwhile, already_recorded)

    def pods_by_task() -> dict[str, dict[str, Any]]:
        return {p["metadata"]["annotations"]["task_id"]: p for p in sandbox.objects("pods", "default")}

    deadline = time.monotonic() + 30
    while len(pods_by_task()) < 3:
        old.heartbeat()
        assert time.monotonic() < deadline, "pods were not created"
        time.sleep(0.1)
    old.terminate()  # the scheduler dies: its watcher stops, its pods live on
    deadline = time.monotonic() + 30
    while {t: p["status"].get("phase") for t, p in pods_by_task().items()}.get(
        "ends_meanwhile"
    ) != "Succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)

    new = executor_factory(job_id="43")
    no_pod = make_workload(task_id="no_pod")
    orphans = [SimpleNamespace(key=w.ti.key, queued_by_job_id=42) for w in (runs_on, ends_meanwhile, no_pod)]
    not_adopted = new.try_adopt_task_instances(orphans)
    assert [ti.key.task_id for ti in not_adopted] == ["no_pod"]
    assert pods_by_task()["runs_on"]["metadata"]["labels"]["airflow-worker"] == "43"
    events = _heartbeat_until(new, lambda e: {"runs_on", "ends_meanwhile"} <= set(_terminal(e)), timeout=30)
    assert _terminal(events)["runs_on"][0] == "success"
    assert _terminal(events)["ends_meanwhile"][0] == "success"
    assert "already_recorded" not in _terminal(events)
    # The finished pod whose task was not orphaned is cleaned up by the adopter.
    deadline = time.monotonic() + 20
    while "already_recorded" in pods_by_task():
        new.heartbeat()
        assert time.monotonic() < deadline, "the dead scheduler's finished pod was not cleaned up"
        time.sleep(0.1)


def test_get_task_log_reads_the_running_pods_log(executor_factory, kube_sandbox):
    from types import SimpleNamespace

    sandbox, _ = kube_sandbox
    ex = executor_factory(job_id="42")
    w = make_workload(task_id="chatty", command="echo line-one; echo line-two; sleep 30")
    _submit(ex, w)
    ti = SimpleNamespace(
        key=w.ti.key,
        dag_id=w.ti.dag_id,
        task_id="chatty",
        run_id=w.ti.run_id,
        map_index=-1,
        try_number=1,
        queued_by_job_id=42,
        executor_config=None,
    )
    deadline = time.monotonic() + 30
    while True:
        ex.heartbeat()
        messages, logs = ex.get_task_log(ti, 1)
        if logs and "line-two" in logs[0]:
            break
        assert time.monotonic() < deadline, (messages, logs)
        time.sleep(0.2)
    assert logs[0].splitlines()[:2] == ["line-one", "line-two"]  # decoded text, not "b'line-one\\n..."
    assert any("Log of pod default/" in m for m in messages)
    # A try without a pod says so instead of raising.
    messages, logs = ex.get_task_log(ti, 2)
    assert logs == [] and "No worker pod" in messages[0]


def test_finished_pods_of_gone_schedulers_are_cleaned_up(executor_factory, kube_sandbox, core_v1):
    """Upstream's _adopt_completed_pods: Succeeded pods a dead scheduler left behind are removed."""
    sandbox, _ = kube_sandbox

    def leftover(name: str, command: str, job_id: str = "99", **labels: str) -> None:
        core_v1.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes_executor": "True", "airflow-worker": job_id, **labels},
                    "annotations": {"dag_id": "d", "task_id": name, "run_id": "r", "try_number": "1"},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "base", "image": "python", "command": ["sh", "-c", command]}],
                },
            },
        )

    leftover("dead-succeeded", "exit 0")
    leftover("dead-failed", "exit 1")
    leftover("dead-running", "sleep 120")
    leftover("dead-succeeded-done", "exit 0", airflow_executor_done="True")
    leftover("not-an-executor-pod", "exit 0", kubernetes_executor="False")

    def phases() -> dict[str, str]:
        return {
            p["metadata"]["name"]: p["status"].get("phase", "") for p in sandbox.objects("pods", "default")
        }

    deadline = time.monotonic() + 30
    while not (
        phases().get("dead-succeeded") == "Succeeded"
        and phases().get("dead-failed") == "Failed"
        and phases().get("dead-running") == "Running"
    ):
        assert time.monotonic() < deadline, phases()
        time.sleep(0.1)
    ex = executor_factory(job_id="43")
    deadline = time.monotonic() + 30
    while "dead-succeeded" in phases():
        ex.heartbeat()
        assert time.monotonic() < deadline, "the dead scheduler's Succeeded pod was not cleaned up"
        time.sleep(0.1)
    assert ex.status()["completed_pods_cleaned"] == 1
    # Failed pods stay for inspection, running ones are adoption's business, the rest is not ours.
    assert {"dead-failed", "dead-running", "dead-succeeded-done", "not-an-executor-pod"} <= set(phases())
    assert not ex.get_event_buffer(), "cleaning up another scheduler's pods reports nothing"


@pytest.mark.parametrize(("before", "after"), [("jobwatch", "upstream"), ("upstream", "jobwatch")])
def test_pods_stay_adoptable_across_a_switch_of_worker_pod_labels(
    executor_factory, kube_sandbox, before, after
):
    """A pod launched under one label scheme is adopted under the other (the full-switch migration path)."""
    from types import SimpleNamespace

    from airflow_jobwatch.executors.pods import LABEL_SCHEMES

    sandbox, _ = kube_sandbox
    old = executor_factory(job_id="42", AIRFLOW__JOBWATCH__WORKER_POD_LABELS=before)
    w = make_workload(task_id="switcher", command="sleep 3; exit 0")
    _submit(old, w)

    def pod() -> dict[str, Any] | None:
        pods = [
            p
            for p in sandbox.objects("pods", "default")
            if p["metadata"]["annotations"].get("task_id") == "switcher"
        ]
        return pods[0] if pods else None

    deadline = time.monotonic() + 30
    while pod() is None:
        old.heartbeat()
        assert time.monotonic() < deadline, "the pod was not created"
        time.sleep(0.1)
    labels = pod()["metadata"]["labels"]
    assert labels[LABEL_SCHEMES[before].worker] == "42"
    assert LABEL_SCHEMES[after].worker not in labels
    old.terminate()

    new = executor_factory(job_id="43", AIRFLOW__JOBWATCH__WORKER_POD_LABELS=after)
    assert new.try_adopt_task_instances([SimpleNamespace(key=w.ti.key, queued_by_job_id=42)]) == []
    labels = pod()["metadata"]["labels"]
    assert labels[LABEL_SCHEMES[after].worker] == "43"
    assert labels[LABEL_SCHEMES[after].executor] == "True"
    assert LABEL_SCHEMES[before].worker not in labels and LABEL_SCHEMES[before].executor not in labels
    events = _heartbeat_until(new, lambda e: "switcher" in _terminal(e), timeout=30)
    assert _terminal(events)["switcher"][0] == "success"

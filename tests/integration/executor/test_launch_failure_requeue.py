"""A pod that fails before its task ran: ``[kubernetes_executor] pod_launch_failure_retries`` and
``pod_launch_failure_excluded_container_reasons`` with upstream's meaning, decided from Airflow's record.

The executor asks Airflow's database, once per ``sync()`` for the pods that ended, whether each task
instance is still QUEUED on its try. These tests have no metadata database, so that one read
(``results.queued_on_try``) answers what the database would; everything else runs as in production,
against the sandbox over HTTP.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from exec_helpers import submit
from support.workloads import make_workload

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _short_relaunch_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_jobwatch.executors import results

    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_INITIAL_SECONDS", 0.2)
    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_MAX_SECONDS", 0.5)


def _database_says(monkeypatch: pytest.MonkeyPatch, state: str, asked: list[Any]) -> None:
    """The task instances are ``state`` on their try in the (absent) metadata database."""
    from airflow_jobwatch.executors import results

    def answer(keys: list[Any]) -> dict[Any, bool]:
        asked.append(list(keys))
        return {k: state == "queued" for k in keys}

    monkeypatch.setattr(results, "queued_on_try", answer)


def _pods(sandbox: Any, task_id: str) -> list[dict[str, Any]]:
    return [
        p
        for p in sandbox.objects("pods", "default")
        if p["metadata"]["annotations"].get("task_id") == task_id
    ]


def _run_until_reported(ex: Any, task_id: str, timeout: float = 90) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not any(state in ("success", "failed") for state, _ in events):
        assert time.monotonic() < deadline, f"{task_id} was never reported; events {events}"
        ex.heartbeat()
        events.extend(
            (str(s), info) for k, (s, info) in ex.get_event_buffer().items() if k.task_id == task_id
        )
        time.sleep(0.05)
    return events


@pytest.mark.parametrize(
    ("excluded", "database", "pods", "retries_left"),
    [
        # Upstream's defaults: an exit with reason Error is excluded (the worker started and died).
        ("Error", "queued", 1, False),
        # Nothing excluded: requeued once (the default pod_launch_failure_retries = 1), then it fails.
        ("", "queued", 2, True),
        # The task instance is RUNNING: the task ran, so it is never launched again.
        ("", "running", 1, False),
    ],
    ids=["error-excluded", "requeued-once", "task-ran"],
)
def test_a_pod_that_failed_before_its_task_ran(
    executor_factory: Any,
    kube_sandbox: Any,
    monkeypatch: pytest.MonkeyPatch,
    excluded: str,
    database: str,
    pods: int,
    retries_left: bool,
) -> None:
    sandbox, _ = kube_sandbox
    asked: list[Any] = []
    _database_says(monkeypatch, database, asked)
    ex = executor_factory(
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_EXCLUDED_CONTAINER_REASONS=excluded
    )
    submit(ex, make_workload(task_id="early", command="exit 3"))
    events = _run_until_reported(ex, "early")
    assert [s for s, _ in events if s in ("success", "failed")] == ["failed"], events
    assert len(_pods(sandbox, "early")) <= pods
    assert ex.status()["launch_failure_requeues"] == (1 if retries_left else 0)
    assert asked and all(len(keys) == 1 for keys in asked), asked  # one read per sync, for the ended pod


def test_unlimited_and_off(executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """-1 requeues until the task runs (here: three times, then the database says RUNNING); 0 never."""
    asked: list[Any] = []
    _database_says(monkeypatch, "queued", asked)
    ex = executor_factory(
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_RETRIES="-1",
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_EXCLUDED_CONTAINER_REASONS="",
    )
    from airflow_jobwatch.executors import results

    calls = {"n": 0}

    def queued_three_times(keys: list[Any]) -> dict[Any, bool]:
        calls["n"] += 1
        return {k: calls["n"] <= 3 for k in keys}

    monkeypatch.setattr(results, "queued_on_try", queued_three_times)
    submit(ex, make_workload(task_id="often", command="exit 3"))
    _run_until_reported(ex, "often")
    assert ex.status()["launch_failure_requeues"] == 3

    off = executor_factory(
        job_id="43",
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_RETRIES="0",
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_EXCLUDED_CONTAINER_REASONS="",
    )
    _database_says(monkeypatch, "queued", asked)
    submit(off, make_workload(task_id="never", command="exit 3"))
    _run_until_reported(off, "never")
    assert off.status()["launch_failure_requeues"] == 0


def test_a_bad_retries_value_is_a_clear_error(executor_factory: Any) -> None:
    from airflow.exceptions import AirflowConfigException

    with pytest.raises(
        AirflowConfigException, match=r"pod_launch_failure_retries must be an integer.*'many'"
    ):
        executor_factory(AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_RETRIES="many")


@pytest.mark.parametrize("delete_on_failure", ["True", "False"])
def test_a_requeued_pod_is_cleaned_up_as_upstream_cleans_up_a_failed_pod(
    executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch, delete_on_failure: str
) -> None:
    """With delete_worker_pods_on_failure = False the pod that failed before its task ran is kept for
    inspection (labelled done), as upstream keeps it; with True it is deleted."""
    sandbox, _ = kube_sandbox
    _database_says(monkeypatch, "queued", [])
    ex = executor_factory(
        AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_EXCLUDED_CONTAINER_REASONS="",
        AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS_ON_FAILURE=delete_on_failure,
    )
    submit(ex, make_workload(task_id="kept", command="exit 3"))
    _run_until_reported(ex, "kept")
    assert ex.status()["launch_failure_requeues"] == 1
    from airflow_jobwatch.executors.pods import DONE_LABEL

    def cleaned_up() -> bool:
        pods = _pods(sandbox, "kept")
        if delete_on_failure == "True":
            return not pods
        return len(pods) == 2 and all(p["metadata"]["labels"].get(DONE_LABEL) == "True" for p in pods)

    deadline = time.monotonic() + 30
    while not cleaned_up():
        assert time.monotonic() < deadline, [p["metadata"]["labels"] for p in _pods(sandbox, "kept")]
        ex.heartbeat()
        time.sleep(0.05)

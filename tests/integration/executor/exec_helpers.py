"""Helpers shared by the executor tests that drive JobWatchExecutor as the scheduler loop does."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def submit(executor: Any, *workloads: Any) -> None:
    from unittest import mock

    for w in workloads:
        executor.queue_workload(w, session=mock.sentinel.unused_session)


def heartbeat_until(
    executor: Any,
    cond: Callable[[dict[Any, Any]], bool],
    *,
    timeout: float,
    events: dict[Any, Any] | None = None,
    all_events: list[tuple[Any, Any]] | None = None,
) -> dict[Any, Any]:
    """Heartbeat (as the scheduler does) until ``cond(events)`` or the deadline.

    ``all_events`` (if given) gets every event in order, so a test can check that no key got two.
    """
    events = events if events is not None else {}
    deadline = time.monotonic() + timeout
    while True:
        executor.heartbeat()
        buffered = executor.get_event_buffer()
        if all_events is not None:
            all_events.extend(buffered.items())
        events.update(buffered)
        if cond(events):
            return events
        assert time.monotonic() < deadline, f"timed out; events so far: {events}"
        time.sleep(0.1)


def poll(
    executor: Any, cond: Callable[[], Any], *, timeout: float, what: str, events: list[tuple[Any, Any]]
) -> Any:
    """Heartbeat ``executor`` (as the scheduler does), appending every event to ``events`` in order, until
    ``cond()`` is truthy; returns that value. Fails naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        executor.heartbeat()
        events.extend(executor.get_event_buffer().items())
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}; events so far: {events}"
        time.sleep(0.1)


def terminal(events: dict[Any, Any]) -> dict[str, tuple[str, Any]]:
    return {k.task_id: (str(s), info) for k, (s, info) in events.items() if str(s) in ("success", "failed")}


def wait_for_file(path: Path) -> str:
    """A shell command that waits until ``path`` exists."""
    return f"until [ -f '{path}' ]; do sleep 0.1; done"


def pods_of(sandbox: Any, task_id: str) -> list[dict[str, Any]]:
    """The sandbox's pods in ``default`` whose ``task_id`` annotation is ``task_id``."""
    return [
        p
        for p in sandbox.objects("pods", "default")
        if (p["metadata"].get("annotations") or {}).get("task_id") == task_id
    ]


def terminal_events(events: list[tuple[Any, Any]]) -> list[tuple[Any, str, Any]]:
    """The success/failed entries of a list of ``(key, (state, info))`` events, as ``(key, state, info)``."""
    return [(k, str(s), info) for k, (s, info) in events if str(s) in ("success", "failed")]


def upstream_executor(db_url: str, executor_factory: Any, monkeypatch: Any, request: Any) -> Any:
    """Upstream's KubernetesExecutor, not yet started, on the sandbox that ``executor_factory`` configures,
    with Airflow's ORM on ``db_url`` until the test ends. Its lookup of whether a workload is still current
    (``_should_create_pod_for_job``) is answered "yes": these harnesses have no task instance rows."""
    from airflow import settings

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", db_url)
    previous = settings.SQL_ALCHEMY_CONN
    settings.SQL_ALCHEMY_CONN = db_url
    settings.configure_orm()

    def restore_db() -> None:
        settings.SQL_ALCHEMY_CONN = previous
        settings.configure_orm()

    request.addfinalizer(restore_db)
    ours = executor_factory()  # sets the shared [kubernetes_executor] environment; not used further
    ours.end()
    # Upstream sends each task's KubernetesJob through a multiprocessing Manager queue (pickled). Every
    # kubernetes model object it builds keeps a copy of the client's process-wide default Configuration; an
    # earlier test in this process that loaded a kubeconfig into that default leaves a refresh hook there that
    # cannot be pickled. Start upstream with no default, as in a fresh scheduler (restored afterwards).
    import kubernetes.client

    monkeypatch.setattr(kubernetes.client.Configuration, "_default", None)
    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor import KubernetesExecutor

    ex = KubernetesExecutor()  # older providers (Airflow 3.1's) take no arguments
    ex.parallelism = 16
    ex.job_id = "43"
    ex._should_create_pod_for_job = lambda task: True
    return ex


def worker_pod_of(key: Any, *, name: str, launch: str, job_id: str, command: str) -> dict[str, Any]:
    """A worker pod of ``key``'s launch ``launch`` as another scheduler job made it: upstream's labels and
    annotations, the launch id annotation, and a container running ``sh -c command``."""
    from airflow_jobwatch.executors.pods import LAUNCH_ANNOTATION

    annotations = {
        "dag_id": key.dag_id,
        "task_id": key.task_id,
        "run_id": key.run_id,
        "try_number": str(key.try_number),
        "map_index": str(key.map_index),
        LAUNCH_ANNOTATION: launch,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"airflow-worker": job_id, "kubernetes_executor": "True"},
            "annotations": annotations,
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "base", "image": "busybox", "command": ["sh", "-c", command]}],
        },
    }

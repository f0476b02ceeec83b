"""Pods launched while the watcher child starts, and gone before its first list, are still reported.

Found by bench/bench_churn.py: such a pod is neither in the child's first list nor in the set of expected
pods it was handed at its start, so no event and no check ever reported it and its task stayed running.
Driven through a real :class:`WatcherSupervisor` and child against the sandbox. The supervisor reads the
child's ``Synced`` only in ``poll()``, so what is tracked before the first ``poll()`` is "launched while
the child started", deterministically. The pods tracked here were never created: a pod gone before the
list looks exactly like that to the API server (404).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from test_watcher import FAST_INFORMER, JOB_ID

from airflow_jobwatch.executors.pods import worker_label_selector
from airflow_jobwatch.executors.watcher import PodResult, WatcherSupervisor
from airflow_jobwatch.kube.cluster.client import ClusterConfig
from airflow_jobwatch.kube.meaning.states import DEFAULT_FATAL_WAITING_REASONS

pytestmark = pytest.mark.timeout(120)


def _supervisor(kubeconfig: str) -> WatcherSupervisor:
    return WatcherSupervisor(
        cluster=ClusterConfig(config_file=kubeconfig),
        namespaces=["default"],
        label_selector=worker_label_selector(JOB_ID),
        informer_config=FAST_INFORMER,
        fatal_waiting_reasons=DEFAULT_FATAL_WAITING_REASONS,
        unresponsive_after=30.0,
    )


def _poll_until(sup: WatcherSupervisor, done: Any, timeout: float, what: str) -> list[PodResult]:
    results: list[PodResult] = []
    deadline = time.monotonic() + timeout
    while not done(results):
        assert time.monotonic() < deadline, f"{what} within {timeout} s; results: {results!r}"
        results.extend(sup.poll())
        time.sleep(0.05)
    return results


def test_pod_confirmed_while_the_child_starts_and_gone_is_reported(kube_sandbox: Any) -> None:
    sup = _supervisor(kube_sandbox[1])
    sup.start()
    try:
        # Launched (create answered) after the child started, before it listed; gone before the list.
        sup.track("default", "early-gone", "key-early", confirmed=True)
        results = _poll_until(
            sup, lambda r: any(x.key == "key-early" for x in r), 30, "a result for the vanished pod"
        )
        (gone,) = [x for x in results if x.key == "key-early"]
        assert gone.terminal and gone.phase == "failed" and gone.gap, gone
        assert "final state is unknown" in gone.message
    finally:
        sup.stop(timeout=1.0)


def test_pod_whose_create_was_answered_after_the_list_and_gone_is_reported(kube_sandbox: Any) -> None:
    sup = _supervisor(kube_sandbox[1])
    sup.start()
    try:
        # The create was out while the child listed; its answer comes after the list.
        sup.track("default", "late-answer", "key-late", confirmed=False)
        _poll_until(sup, lambda _r: sup.all_synced(), 30, "the watcher's first list")
        sup.track("default", "late-answer", "key-late", confirmed=True)
        results = _poll_until(
            sup, lambda r: any(x.key == "key-late" for x in r), 30, "a result for the vanished pod"
        )
        (gone,) = [x for x in results if x.key == "key-late"]
        assert gone.terminal and gone.phase == "failed" and gone.gap, gone
    finally:
        sup.stop(timeout=1.0)


def test_pod_tracked_while_the_child_starts_and_still_there_is_not_failed(kube_sandbox: Any) -> None:
    """The check must not contradict the watch: a pod that exists gets no gap result."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(kube_sandbox[1]))
    sup = _supervisor(kube_sandbox[1])
    sup.start()
    try:
        api.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "alive",
                    "labels": {"kubernetes_executor": "True", "airflow-worker": str(JOB_ID)},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "base", "image": "busybox", "command": ["sleep", "6"]}],
                },
            },
        )
        sup.track("default", "alive", "key-alive", confirmed=True)
        _poll_until(sup, lambda _r: sup.all_synced(), 30, "the watcher's first list")
        # The child's check runs 3 s after its list, while the pod still runs; the pod's end is then
        # reported from the watch, as a success, not as a pod gone unseen.
        results = _poll_until(
            sup, lambda r: any(x.key == "key-alive" and x.terminal for x in r), 60, "the pod's end"
        )
        (end,) = [x for x in results if x.key == "key-alive" and x.terminal]
        assert end.phase == "succeeded" and not end.gap, end
    finally:
        sup.stop(timeout=1.0)

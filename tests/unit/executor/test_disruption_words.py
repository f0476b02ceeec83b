"""Recognising a disrupted pod (kube/states.pod_disruption) and wording it for the task."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.executors.disruption import describe_disruption, disruption_parts

PODS = Path(__file__).parent.parent / "fixtures" / "pods"


def _pod(name: str, node: str | None = "n1") -> dict[str, Any]:
    pod: dict[str, Any] = copy.deepcopy(json.loads((PODS / f"{name}.json").read_text()))
    if node:
        pod["spec"]["nodeName"] = node
    return pod


@pytest.mark.parametrize(
    ("fixture", "words"),
    [
        ("preempted", "preempted by the scheduler on node n1: default-scheduler: preempting to accommodate"),
        ("evicted", "evicted on node n1: the node was low on memory"),
    ],
)
def test_recorded_disruptions_in_words(fixture: str, words: str) -> None:
    found = disruption_parts(_pod(fixture))
    assert found is not None
    assert describe_disruption(*found).startswith(words)


@pytest.mark.parametrize(
    "fixture", ["failed-exit-3", "oom-killed", "deadline-exceeded", "succeeded", "running"]
)
def test_other_ends_are_not_disruptions(fixture: str) -> None:
    assert disruption_parts(_pod(fixture)) is None


def test_wording_without_node_or_message_and_unknown_reasons() -> None:
    assert describe_disruption("DeletionByPodGC", None, None) == (
        "deleted by the pod garbage collector (its node is gone)"
    )
    assert describe_disruption("SomethingNew", "why", "n2") == "disrupted (SomethingNew) on node n2: why"
    long = describe_disruption("EvictionByEvictionAPI", "x" * 1000, None)
    assert long.endswith("...") and len(long) < 500


def test_a_preempted_pod_seen_only_in_its_deletion_is_named() -> None:
    """Preemption deletes the pod: the watch may never show it Failed, only its DELETED event, whose object
    still has the DisruptionTarget condition the scheduler set first."""
    from airflow_jobwatch.executors.watcher.child import PodRelay
    from airflow_jobwatch.executors.watcher.messages import PodUpdate, WatcherSpec
    from airflow_jobwatch.kube.cluster.client import ClusterConfig
    from airflow_jobwatch.kube.engine.informer import EventType, InformerConfig, InformerEvent

    pod = _pod("running", node="spot-7")
    pod["metadata"]["labels"] = {"kubernetes_executor": "True", "airflow-worker": "42"}
    pod["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "default-scheduler: preempting to accommodate a higher priority pod",
        }
    )
    spec = WatcherSpec(
        cluster=ClusterConfig(),
        namespace="default",
        label_selector="kubernetes_executor=True,airflow-worker=42,airflow_executor_done!=True",
        informer_config=InformerConfig(),
        fatal_waiting_reasons=frozenset(),
    )
    sent: list[Any] = []
    PodRelay(spec, sent.append).on_event(InformerEvent(EventType.DELETED, pod))
    [update] = sent
    assert isinstance(update, PodUpdate) and update.state["reason"] == "PreemptionByScheduler"
    assert update.disruption is not None
    assert update.disruption.startswith("preempted by the scheduler on node spot-7")

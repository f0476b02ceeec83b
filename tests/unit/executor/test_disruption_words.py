"""issue 21 item 1: recognising a disrupted pod (kube/states.pod_disruption) and wording it for the task."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.executors.disruption import describe_disruption
from airflow_jobwatch.kube.states import pod_disruption

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
    found = pod_disruption(_pod(fixture))
    assert found is not None
    assert describe_disruption(*found).startswith(words)


@pytest.mark.parametrize(
    "fixture", ["failed-exit-3", "oom-killed", "deadline-exceeded", "succeeded", "running"]
)
def test_other_ends_are_not_disruptions(fixture: str) -> None:
    assert pod_disruption(_pod(fixture)) is None


def test_wording_without_node_or_message_and_unknown_reasons() -> None:
    assert describe_disruption("DeletionByPodGC", None, None) == (
        "deleted by the pod garbage collector (its node is gone)"
    )
    assert describe_disruption("SomethingNew", "why", "n2") == "disrupted (SomethingNew) on node n2: why"
    long = describe_disruption("EvictionByEvictionAPI", "x" * 1000, None)
    assert long.endswith("...") and len(long) < 500

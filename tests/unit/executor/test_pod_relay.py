"""What the watcher child remembers per pod does not grow with the pods seen over time.

``PodRelay`` is the child's informer subscriber. It used to add every pod it ever saw to a ``seen`` set
(needed only by the check after the first list), so a scheduler running for weeks grew one entry per
task. Now it keeps one signature per *live* pod and, until the first-list check has answered, the
expected pods that list lacked.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from airflow_jobwatch.executors.pods import worker_label_selector
from airflow_jobwatch.executors.watcher.child import PodRelay
from airflow_jobwatch.executors.watcher.messages import PodAdopted, PodUpdate, WatcherSpec
from airflow_jobwatch.kube.cluster.client import ClusterConfig
from airflow_jobwatch.kube.engine.informer import EventType, InformerConfig, InformerEvent

PODS = Path(__file__).parent.parent / "fixtures" / "pods"
SELECTOR = worker_label_selector("42")


def _spec() -> WatcherSpec:
    return WatcherSpec(
        cluster=ClusterConfig(),
        namespace="default",
        label_selector=SELECTOR,
        informer_config=InformerConfig(),
        fatal_waiting_reasons=frozenset({"ErrImagePull"}),
    )


def _pod(fixture: str, i: int, **labels: str) -> dict[str, Any]:
    pod: dict[str, Any] = copy.deepcopy(json.loads((PODS / f"{fixture}.json").read_text()))
    meta = pod["metadata"]
    meta["name"] = f"worker-{i}"
    meta["uid"] = f"uid-{i}"
    meta["labels"] = {"kubernetes_executor": "True", "airflow-worker": "42", **labels}
    meta["annotations"] = {"dag_id": "d", "task_id": f"t{i}", "run_id": "r", "try_number": "1"}
    return pod


def test_memory_follows_live_pods_not_pods_seen() -> None:
    sent: list[Any] = []
    relay = PodRelay(_spec(), sent.append)
    relay.expect([])
    live_high_water = 0
    for round_ in range(20):
        live = range(round_ * 100, round_ * 100 + 100)
        for i in live:  # 100 tasks start ...
            relay.on_event(InformerEvent(EventType.ADDED, _pod("pending-new", i)))
            relay.on_event(InformerEvent(EventType.MODIFIED, _pod("running", i)))
        live_high_water = max(live_high_water, len(relay.last_sent))
        for i in live:  # ... and end: succeeded, then labelled done (leaves the selector) or deleted
            relay.on_event(InformerEvent(EventType.MODIFIED, _pod("succeeded", i)))
            if i % 2:
                done = _pod("succeeded", i, airflow_executor_done="True")
                relay.on_event(InformerEvent(EventType.DELETED, done))
            else:
                relay.on_event(InformerEvent(EventType.DELETED, _pod("succeeded", i)))
        assert len(relay.last_sent) == 0, f"round {round_}: entries left for ended pods"
        assert relay.unresolved == set()
    assert live_high_water == 100  # bounded by the pods alive at once; 2,000 pods were seen
    updates = [m for m in sent if isinstance(m, PodUpdate)]
    assert sum(1 for m in updates if m.state["phase"] == "succeeded" and not m.deleted) == 2000


def test_first_list_check_is_resolved_by_the_watch_and_then_forgotten() -> None:
    sent: list[Any] = []
    relay = PodRelay(_spec(), sent.append)
    missing = relay.expect({("default", "worker-1"), ("default", "worker-2")})
    assert missing == [("default", "worker-1"), ("default", "worker-2")]
    # The watch delivers worker-1 (created after the list started): its GET answer must not count.
    relay.on_event(InformerEvent(EventType.ADDED, _pod("running", 1)))
    assert relay.unresolved == {("default", "worker-2")}
    # Thousands of other pods come and go; nothing of them is kept for the check.
    for i in range(100, 1100):
        relay.on_event(InformerEvent(EventType.ADDED, _pod("pending-new", i)))
        relay.on_event(InformerEvent(EventType.DELETED, _pod("succeeded", i)))
    assert relay.unresolved == {("default", "worker-2")}
    assert set(relay.last_sent) == {"uid-1"}


def test_a_pod_that_left_the_selector_for_another_scheduler_is_adopted_not_deleted() -> None:
    sent: list[Any] = []
    relay = PodRelay(_spec(), sent.append)
    relay.on_event(InformerEvent(EventType.ADDED, _pod("running", 7)))
    relay.on_event(InformerEvent(EventType.DELETED, _pod("running", 7, **{"airflow-worker": "99"})))
    assert isinstance(sent[-1], PodAdopted) and sent[-1].worker == "99"
    assert relay.last_sent == {}
    # A real deletion (or a tombstone) of a pod that still carries our labels stays a deletion.
    relay.on_event(InformerEvent(EventType.DELETED_UNKNOWN, _pod("running", 8)))
    assert isinstance(sent[-1], PodUpdate) and sent[-1].deleted and sent[-1].state["reason"] == "Deleted"

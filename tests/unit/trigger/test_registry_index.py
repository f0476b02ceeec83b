"""NamespaceWatch's index, fed with informer events by hand (the informers themselves are not started).

The events are our own InformerEvent objects carrying API JSON, as the informer delivers them. Pod events
go through a pod informer that is never started (its store written as a watch event writes it, then the
event delivered), since the watch's pod index holds uids and reads the pods from that store.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_jobwatch.kube.engine.informer import EventType, Informer, InformerConfig, InformerEvent
from airflow_jobwatch.triggers import tombstones
from airflow_jobwatch.triggers.registry import NamespaceWatch, WatchKey


async def _no_client() -> Any:
    raise AssertionError("not used: the informers are not started in these tests")


def _job(name: str, uid: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}, "status": status}


def _pod(name: str, uid: str, job_name: str, job_uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "labels": {"batch.kubernetes.io/job-name": job_name, "controller-uid": job_uid},
        },
        "status": {"phase": "Running"},
    }


@pytest.fixture
def watch() -> NamespaceWatch:
    watch = NamespaceWatch(WatchKey("c", "ns"), _no_client, config=InformerConfig())
    watch.pods = Informer(
        object(), kind="pods", namespace="ns", config=InformerConfig(compact_store=True, projection=False)
    )
    watch.pods.subscribe(watch._on_pod_event)
    return watch


def _pod_event(watch: NamespaceWatch, etype: EventType, pod: dict[str, Any]) -> None:
    """Deliver a pod event as the pod informer does: store (or drop) it, then call its subscribers."""
    assert watch.pods is not None
    if etype in (EventType.DELETED, EventType.DELETED_UNKNOWN):
        watch.pods.cache.delete(pod["metadata"]["uid"], etype, pod)
    else:
        watch.pods.cache.put(pod)


def test_pods_are_indexed_by_their_jobs_uid_and_only_that_jobs_listeners_are_called(watch):
    calls: list[str] = []
    watch.listen("a", lambda: calls.append("a"))
    watch.listen("b", lambda: calls.append("b"))
    _pod_event(watch, EventType.ADDED, _pod("a-1", "p1", "a", "ua"))
    _pod_event(watch, EventType.ADDED, _pod("a-2", "p2", "a", "ua"))
    assert calls == ["a", "a"]
    assert sorted(p["metadata"]["name"] for p in watch.pods_of("ua")) == ["a-1", "a-2"]
    assert watch.pods_of("ub") == []
    _pod_event(watch, EventType.DELETED_UNKNOWN, _pod("a-1", "p1", "a", "ua"))
    assert [p["metadata"]["name"] for p in watch.pods_of("ua")] == ["a-2"]


def test_a_removed_listener_is_not_called(watch):
    calls: list[str] = []
    remove = watch.listen("a", lambda: calls.append("a"))
    remove()
    watch._on_job_event(InformerEvent(EventType.MODIFIED, _job("a", "ua")))
    assert calls == []


def test_a_failing_listener_does_not_stop_the_others(watch):
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    watch.listen("a", broken)
    watch.listen("a", lambda: calls.append("ok"))
    watch._on_job_event(InformerEvent(EventType.MODIFIED, _job("a", "ua")))
    assert calls == ["ok"]


def test_deleted_job_leaves_a_tombstone_with_its_pods(watch):
    _pod_event(watch, EventType.ADDED, _pod("a-1", "p1", "a", "ua"))
    final = _job("a", "ua", conditions=[{"type": "Complete", "status": "True"}])
    watch._on_job_event(InformerEvent(EventType.DELETED, final))
    tomb = watch.tombstone("a")
    assert tomb.job["status"] == final["status"] and tomb.observed
    assert [p["metadata"]["name"] for p in tomb.pods] == ["a-1"]
    # a new Job under the same name keeps the old incarnation's tombstone (different uid) ...
    watch._on_job_event(InformerEvent(EventType.ADDED, _job("a", "ua2")))
    assert watch.tombstone("a") is not None
    # ... but re-adding the same uid (a relist that finds it after all) clears it
    watch._on_job_event(InformerEvent(EventType.DELETED, _job("a", "ua2")))
    watch._on_job_event(InformerEvent(EventType.ADDED, _job("a", "ua2")))
    assert watch.tombstone("a") is None


def test_a_vanished_job_leaves_a_tombstone_that_says_its_end_was_not_seen(watch):
    watch._on_job_event(InformerEvent(EventType.DELETED_UNKNOWN, _job("a", "ua")))
    assert watch.tombstone("a").observed is False


def test_a_deleted_jobs_tombstone_keeps_each_pods_freshest_copy(watch):
    """Pod events after the Job's DELETED (its DELETED included) update the tombstone; an older copy
    arriving late does not replace a newer one."""
    running = _pod("a-1", "p1", "a", "ua")
    running["metadata"]["resourceVersion"] = "5"
    _pod_event(watch, EventType.ADDED, running)
    watch._on_job_event(InformerEvent(EventType.DELETED, _job("a", "ua")))
    final = _pod("a-1", "p1", "a", "ua")
    final["metadata"].update(resourceVersion="9", annotations={"big": "x" * 1000})
    final["status"] = {"phase": "Succeeded"}
    _pod_event(watch, EventType.DELETED, final)
    stale = dict(running, metadata=dict(running["metadata"], resourceVersion="7"))
    _pod_event(watch, EventType.MODIFIED, stale)
    [pod] = watch.tombstone("a").pods
    assert pod["status"]["phase"] == "Succeeded"
    assert "annotations" not in pod["metadata"]  # only what a decision reads is kept
    # another Job's pods never touch it
    _pod_event(watch, EventType.ADDED, _pod("b-1", "p2", "b", "ub"))
    assert [p["metadata"]["uid"] for p in watch.tombstone("a").pods] == ["p1"]


def test_a_job_of_another_uid_under_a_listened_name_counts_as_missing(watch):
    class _Jobs:
        def __init__(self, job: dict[str, Any]) -> None:
            self.job = job

        def uid_of(self, namespace: str | None, name: str) -> str | None:
            return str(self.job["metadata"]["uid"]) if name == "a" else None

    watch.jobs = _Jobs(_job("a", "new"))  # type: ignore[assignment]
    remove = watch.listen("a", lambda: None, job_uid="new")
    assert watch._any_job_missing() is False
    remove()
    watch.listen("a", lambda: None, job_uid="old")
    assert watch._any_job_missing() is True


def test_tombstones_are_bounded(watch, monkeypatch):
    monkeypatch.setattr(tombstones, "TOMBSTONE_MAX_ENTRIES", 3)
    for i in range(5):
        watch._on_job_event(InformerEvent(EventType.DELETED, _job(f"j{i}", f"u{i}")))
    assert [name for name in ("j0", "j1", "j2", "j3", "j4") if watch.tombstone(name)] == ["j2", "j3", "j4"]


def test_tombstones_expire(watch, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(tombstones.time, "monotonic", lambda: now[0])
    watch._on_job_event(InformerEvent(EventType.DELETED, _job("old", "u")))
    now[0] += tombstones.TOMBSTONE_MAX_AGE_SECONDS + 1
    assert watch.tombstone("old") is None


async def test_each_waiting_trigger_has_its_own_wake_up_and_none_is_kept_once_it_stops_waiting(watch):
    """A trigger that woke for another reason (its result, its timeout) hands its wake-up back, so the
    watch holds one per trigger still waiting, however often they wake; a change wakes every one."""
    first, second = watch.changed(), watch.changed()
    assert first is not second
    for _ in range(100):  # a trigger waking on its timeout again and again
        watch.forget(watch.changed())
    watch.forget(first)
    assert first.cancelled()
    assert watch._change_waiters == {second}
    watch._wake()
    assert second.done() and not second.cancelled()
    assert watch._change_waiters == set()

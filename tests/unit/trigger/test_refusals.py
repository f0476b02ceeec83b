"""triggers/refusals.py: the latest FailedCreate message per Job, from the events the shared watch delivers."""

from __future__ import annotations

from typing import Any

from airflow_jobwatch.kube.engine.informer import EventType, InformerConfig, InformerEvent
from airflow_jobwatch.triggers.refusals import Refusals


def event(name: str, job_uid: str, message: str, last: str) -> dict[str, Any]:
    """A FailedCreate Event about a Job, as the Job controller records it (core/v1)."""
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
        "involvedObject": {"kind": "Job", "name": "j", "namespace": "default", "uid": job_uid},
        "reason": "FailedCreate",
        "message": message,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": last,
        "lastTimestamp": last,
    }


def refusals() -> Refusals:
    return Refusals(object(), "default", config=InformerConfig())  # never started: fed by the test


def test_the_latest_refusal_wins_whatever_the_order_of_delivery() -> None:
    r = refusals()
    r._on_event(InformerEvent(EventType.ADDED, event("j.2", "job-1", "quota", "2026-01-01T00:00:05Z")))
    r._on_event(InformerEvent(EventType.ADDED, event("j.1", "job-1", "webhook", "2026-01-01T00:00:01Z")))
    assert r.reason("job-1") == "quota"  # an older event listed later does not hide the newer one
    r._on_event(InformerEvent(EventType.MODIFIED, event("j.1", "job-1", "webhook", "2026-01-01T00:00:09Z")))
    assert r.reason("job-1") == "webhook"  # the recorder counted it again: now the latest
    assert r.reason("job-2") is None


def test_listeners_hear_only_their_jobs_refusals_until_they_stop() -> None:
    r = refusals()
    heard: list[str] = []
    stop = r.listen("job-1", heard.append)
    r._on_event(InformerEvent(EventType.ADDED, event("a", "job-2", "not mine", "2026-01-01T00:00:01Z")))
    r._on_event(InformerEvent(EventType.ADDED, event("b", "job-1", "mine", "2026-01-01T00:00:02Z")))
    stop()
    r._on_event(InformerEvent(EventType.ADDED, event("c", "job-1", "later", "2026-01-01T00:00:03Z")))
    assert heard == ["mine"]


def test_an_expired_event_is_forgotten() -> None:
    r = refusals()
    obj = event("j.1", "job-1", "quota", "2026-01-01T00:00:01Z")
    r._on_event(InformerEvent(EventType.ADDED, obj))
    r._on_event(InformerEvent(EventType.DELETED, obj))  # the API server's --event-ttl removed it
    assert r.reason("job-1") is None

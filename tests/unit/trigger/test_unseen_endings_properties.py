"""Property: the trigger reports a terminal outcome only when it was observed.

A Job of one pod (``backoffLimit: 0``) runs, maybe ends, and is deleted. The registry's index is fed by
hand with what the two informers would deliver, in any interleaving of the Job's events (ADDED, maybe
its terminal MODIFIED, then DELETED or a relist's DELETED_UNKNOWN) with its pod's (each of running,
final and deleted-final copies delivered or not, in resourceVersion order as a watch delivers them).
Then, whatever the order:

* an observed DELETED reports the Job's real outcome, or ``deleted`` when it still ran;
* a DELETED_UNKNOWN reports the real outcome only if the Job's terminal state or the pod's final state
  was delivered, and ``unknown`` otherwise;
* a reported exit code and XCom value are those of the pod's freshest delivered copy.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobwatch.kube.engine.informer import EventType, InformerConfig, InformerEvent
from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.registry import NamespaceWatch, WatchKey

UID = "job-uid"


async def _no_client() -> Any:
    raise AssertionError("not used: the informers are not started")


class _Informer:
    """What the registry reads of an informer: synced, and its store by name and by uid (written before
    each event is delivered, as the informer does)."""

    synced = True
    failing = False

    def __init__(self) -> None:
        self.by_uid: dict[str, dict[str, Any]] = {}

    def by_name(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return next((o for o in self.by_uid.values() if o["metadata"]["name"] == name), None)

    def get(self, uid: str) -> dict[str, Any] | None:
        return self.by_uid.get(uid)


def _job(truth: str, rv: int) -> dict[str, Any]:
    conditions = {
        "success": [{"type": "Complete", "status": "True", "reason": "Complete"}],
        "failed": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
        "running": [],
    }[truth]
    counts = {"success": {"succeeded": 1}, "failed": {"failed": 1}, "running": {"active": 1}}[truth]
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": UID, "resourceVersion": str(rv)},
        "spec": {"backoffLimit": 0, "completions": 1},
        "status": {"conditions": conditions, "startTime": "2026-12-06T20:00:00Z", **counts},
    }


def _pod(truth: str, rv: int, *, final: bool) -> dict[str, Any]:
    phase = "Running"
    state: dict[str, Any] = {"running": {"startedAt": "2026-12-06T20:00:01Z"}}
    if final and truth == "success":
        phase, state = (
            "Succeeded",
            {"terminated": {"exitCode": 0, "reason": "Completed", "message": '{"v": 7}'}},
        )
    elif final and truth == "failed":
        phase, state = "Failed", {"terminated": {"exitCode": 3, "reason": "Error"}}
    return {
        "metadata": {
            "name": "j-pod",
            "namespace": "ns",
            "uid": "pod-uid",
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-12-06T20:00:00Z",
            "labels": {"controller-uid": UID, "batch.kubernetes.io/job-name": "j"},
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "base", "state": state}]},
    }


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, bool, list[tuple[str, InformerEvent]]]:
    truth = draw(st.sampled_from(["success", "failed", "running"]))
    observed = draw(st.booleans())  # the Job's deletion seen as DELETED, or found gone at a relist
    job_events = [InformerEvent(EventType.ADDED, _job("running", 1))]
    if truth != "running" and draw(st.booleans()):
        job_events.append(InformerEvent(EventType.MODIFIED, _job(truth, 5)))
    seen = _job(truth, 9) if observed else job_events[-1].obj  # DELETED carries the final state
    job_events.append(InformerEvent(EventType.DELETED if observed else EventType.DELETED_UNKNOWN, seen))
    pod_events = []
    if draw(st.booleans()):
        pod_events.append(InformerEvent(EventType.ADDED, _pod(truth, 2, final=False)))
    if truth != "running" and draw(st.booleans()):
        pod_events.append(InformerEvent(EventType.MODIFIED, _pod(truth, 6, final=True)))
    if draw(st.booleans()):
        pod_events.append(InformerEvent(EventType.DELETED, _pod(truth, 10, final=truth != "running")))
    # An interleaving that keeps each watch's own order.
    slots = draw(st.permutations(["job"] * len(job_events) + ["pod"] * len(pod_events)))
    jobs, pods = iter(job_events), iter(pod_events)
    order = [(kind, next(jobs) if kind == "job" else next(pods)) for kind in slots]
    return truth, observed, order


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_a_terminal_outcome_is_reported_only_when_observed(scenario):
    truth, observed, order = scenario
    watch = NamespaceWatch(WatchKey("c", "ns"), _no_client, config=InformerConfig())
    watch.jobs, watch.pods = _Informer(), _Informer()  # type: ignore[assignment]
    trigger = JobTrigger("j", "ns", job_uid=UID, do_xcom_push=True)
    watch.listen("j", lambda: None, job_uid=UID)
    for kind, event in order:
        if kind == "job":
            store = watch.jobs.by_uid  # type: ignore[union-attr]
            if event.type in (EventType.DELETED, EventType.DELETED_UNKNOWN):
                store.pop(UID, None)
            else:
                store[UID] = event.obj
            watch._on_job_event(event)
        else:
            pods = watch.pods.by_uid  # type: ignore[union-attr]
            if event.type in (EventType.DELETED, EventType.DELETED_UNKNOWN):
                pods.pop(event.uid, None)
            else:
                pods[event.uid] = event.obj
            watch._on_pod_event(event)
    payload = trigger._decisions().decide(watch)
    assert isinstance(payload, dict)

    delivered_pods = [e.obj for k, e in order if k == "pod"]
    freshest = max(delivered_pods, key=lambda p: int(p["metadata"]["resourceVersion"]), default=None)
    pod_final = freshest is not None and freshest["status"]["phase"] != "Running"
    job_terminal_seen = observed or any(
        k == "job" and e.type is EventType.MODIFIED for k, e in order
    )  # a DELETED carries the final state

    if observed:
        expected = truth if truth != "running" else "deleted"
    elif job_terminal_seen or pod_final:
        expected = truth
    else:
        expected = "unknown"
    assert payload["outcome"] == expected, (payload["message"], order)
    if payload["outcome"] in ("success", "failed"):
        assert job_terminal_seen or pod_final  # a terminal outcome only if observed
    if payload["outcome"] == "unknown":
        assert "retry" not in payload["message"]
    if pod_final:
        assert [p["exit_code"] for p in payload["pods"]] == [0 if truth == "success" else 3]
        if truth == "success":
            assert payload["xcom_result"] == ['{"v": 7}']

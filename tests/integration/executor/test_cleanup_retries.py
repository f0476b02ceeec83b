"""A pod's cleanup (its delete, or its "done" label) that the API server refuses is tried again after a
backoff, not at every scheduler loop, and given up after a bounded number of tries with one warning that
names the pod and what to run."""

from __future__ import annotations

import time
from typing import Any

import pytest
import structlog.testing
from exec_helpers import submit
from support.workloads import make_workload

pytestmark = [pytest.mark.timeout(120)]


def test_a_refused_delete_backs_off_and_is_given_up_with_a_warning(
    executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_jobwatch.executors import base

    monkeypatch.setattr(base, "CLEANUP_BACKOFF_INITIAL_SECONDS", 0.2)
    monkeypatch.setattr(base, "CLEANUP_BACKOFF_MAX_SECONDS", 0.4)
    monkeypatch.setattr(base, "CLEANUP_ATTEMPTS", 4)
    sandbox, _ = kube_sandbox
    ex = executor_factory(AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS="True")
    deletes: list[str] = []
    real_delete = ex.core_v1.delete_namespaced_pod

    def counted_delete(name: str, *args: Any, **kwargs: Any) -> Any:
        deletes.append(name)
        return real_delete(name, *args, **kwargs)

    monkeypatch.setattr(ex.core_v1, "delete_namespaced_pod", counted_delete)
    sandbox.set_error_rate(1.0, status=403, verbs={"delete"})
    w = make_workload(task_id="undeletable", command="exit 0")
    submit(ex, w)
    events: list[tuple[Any, Any]] = []
    heartbeats = 0
    deadline = time.monotonic() + 90
    with structlog.testing.capture_logs() as entries:
        while not any("giving up" in str(e.get("event")) for e in entries):
            ex.heartbeat()
            heartbeats += 1
            events.extend(ex.get_event_buffer().items())
            assert time.monotonic() < deadline, ("the refused delete was never given up", deletes, events)
            time.sleep(0.02)
        given_up_after = len(deletes)
        # Given up for good: no further tries, however many loops follow.
        quiet_until = time.monotonic() + 1.5
        while time.monotonic() < quiet_until:
            ex.heartbeat()
            time.sleep(0.02)
    assert [str(s) for _, (s, _) in events if str(s) in ("success", "failed")] == ["success"], events
    assert given_up_after == 4 == len(deletes), deletes
    assert heartbeats > 4 * given_up_after, ("a try at every loop", heartbeats, deletes)
    warnings = [e for e in entries if "giving up" in str(e.get("event"))]
    assert [e["log_level"] for e in warnings] == ["warning"], warnings
    text = str(warnings[0])
    assert "403" in text and f"kubectl delete pod -n default {deletes[0]}" in text, text
    assert [p["metadata"]["name"] for p in sandbox.objects("pods", "default")] == [deletes[0]]

"""A worker pod disrupted while running fails as before, and says what disrupted it.

The failure's message (the event's ``info``, which the scheduler records) and the task's log name the
disruption in the task's own words, and ``jobwatch.executor.disruptions.<reason>`` counts it. Driven as the
scheduler loop drives the executor, with the sandbox's kubelet evicting the running pod (Failed, reason
Evicted, with the ``DisruptionTarget`` condition a real kubelet adds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from exec_helpers import heartbeat_until, submit, terminal
from support.workloads import make_workload

from airflow_jobwatch import metrics

pytestmark = pytest.mark.timeout(180)


def test_evicted_running_pod_fails_naming_the_eviction(
    executor_factory: Any, kube_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disrupted: list[str] = []
    real = metrics.pod_disrupted
    monkeypatch.setattr(metrics, "pod_disrupted", lambda reason: (disrupted.append(reason), real(reason)))
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    work = make_workload(task_id="victim", command="sleep 120")
    submit(ex, work)

    def running_pod() -> dict[str, Any] | None:
        for pod in sandbox.objects("pods", "default"):
            if (
                pod["metadata"]["annotations"].get("task_id") == "victim"
                and pod["status"].get("phase") == "Running"
            ):
                return pod
        return None

    events: dict[Any, Any] = {}
    heartbeat_until(ex, lambda _: running_pod() is not None, timeout=60, events=events)
    pod = running_pod()
    assert pod is not None
    sandbox.evict_pod("default", pod["metadata"]["name"])
    heartbeat_until(ex, lambda e: "victim" in terminal(e), timeout=60, events=events)
    state, info = terminal(events)["victim"]
    assert state == "failed"
    expected = "was evicted on node sandbox-node: the node was low on memory"
    assert expected in info, info
    assert "Evicted" in info  # the details follow
    assert disrupted == ["Evicted"]
    log = (tmp_path / "logs" / work.log_path).read_text()
    assert expected in log, log


def test_ordinary_failure_is_not_called_a_disruption(executor_factory: Any, monkeypatch) -> None:
    disrupted: list[str] = []
    monkeypatch.setattr(metrics, "pod_disrupted", disrupted.append)
    ex = executor_factory()
    submit(ex, make_workload(task_id="plain", command="exit 3"))
    events = heartbeat_until(ex, lambda e: "plain" in terminal(e), timeout=60)
    state, info = terminal(events)["plain"]
    assert state == "failed" and "exited with code 3" in info and " was " not in info.split(":")[0]
    assert disrupted == []

"""A pod create refused for a ResourceQuota keeps its task queued, visibly.

The create is retried with backoff as before; what is new is that it can be seen: the gauge
``jobwatch.executor.tasks_waiting_for_quota``, the status file's ``waiting_for_quota``, and one log line
per task and per change of reason (not one per attempt). A proxy in front of the sandbox answers pod
creates as a namespace ResourceQuota on pod count does (the real 403 body) until the test lifts it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from exec_helpers import heartbeat_until, submit, terminal
from faultproxy import QUOTA_NAME, FaultProxy, write_proxy_kubeconfig
from support.workloads import make_workload

from airflow_jobwatch import metrics

pytestmark = pytest.mark.timeout(180)


class _Log:
    """Records what the executor logs, by level."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Any:
        def record(msg: str, *args: Any, **_: Any) -> None:
            self.lines.append((level, msg % args if args else msg))

        return record


@pytest.fixture
def proxy(kube_sandbox: Any, tmp_path: Path) -> Any:
    sandbox, _ = kube_sandbox
    with FaultProxy(sandbox.url) as p:
        p.kubeconfig = write_proxy_kubeconfig(str(tmp_path / "proxy-kubeconfig"), p, sandbox.token)
        yield p


def test_tasks_waiting_for_quota_are_counted_and_logged_once(
    proxy: Any, executor_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    gauge: list[int] = []
    monkeypatch.setattr(metrics, "tasks_waiting_for_quota", gauge.append)
    full = [True]
    proxy.rule = lambda method, path, query: (
        "quota_403" if full[0] and method == "POST" and path.endswith("/pods") else "pass"
    )
    ex = executor_factory(kubeconfig=proxy.kubeconfig)
    log = _Log()
    ex._log = log  # the executor's logger (LoggingMixin caches it here)
    submit(ex, *(make_workload(task_id=f"q{i}", command="exit 0") for i in range(2)))
    events: dict[Any, Any] = {}
    # Several attempts each (backoff 0.1 s doubling to 0.5 s in these tests) ...
    heartbeat_until(ex, lambda _: ex.status()["create_retries"] >= 8, timeout=60, events=events)
    assert not terminal(events), "a quota refusal keeps the task queued"
    assert ex.status()["waiting_for_quota"] == 2
    assert gauge and gauge[-1] == 2
    # ... but one warning per task, naming the quota.
    warnings = [text for level, text in log.lines if level == "warning" and "Could not create" in text]
    assert len(warnings) == 2, warnings
    assert all(f"exceeded quota: {QUOTA_NAME}" in w and "stays queued" in w for w in warnings)
    debug = [text for level, text in log.lines if level == "debug" and "Could not create" in text]
    assert len(debug) >= 6
    # Room frees up: both run, and nobody waits any more.
    full[0] = False
    heartbeat_until(ex, lambda e: {"q0", "q1"} <= set(terminal(e)), timeout=60, events=events)
    assert {terminal(events)[t][0] for t in ("q0", "q1")} == {"success"}
    assert gauge[-1] == 0 and ex.status()["waiting_for_quota"] == 0


def test_a_change_of_reason_is_logged_again(proxy: Any, executor_factory: Any, kube_sandbox: Any) -> None:
    sandbox, _ = kube_sandbox
    full = [True]
    proxy.rule = lambda method, path, query: (
        "quota_403" if full[0] and method == "POST" and path.endswith("/pods") else "pass"
    )
    ex = executor_factory(kubeconfig=proxy.kubeconfig)
    log = _Log()
    ex._log = log
    submit(ex, make_workload(task_id="q", command="exit 0"))
    heartbeat_until(ex, lambda _: ex.status()["create_retries"] >= 3, timeout=60)
    full[0] = False
    sandbox.set_error_rate(1.0, status=503, verbs={"create"})  # the quota has room, the API is sick now
    heartbeat_until(ex, lambda _: ex.status()["create_retries"] >= 6, timeout=60)
    assert ex.status()["waiting_for_quota"] == 0  # not waiting for quota any more
    sandbox.set_error_rate(0.0)
    events = heartbeat_until(ex, lambda e: "q" in terminal(e), timeout=60)
    assert terminal(events)["q"][0] == "success"
    warnings = [text for level, text in log.lines if level == "warning" and "Could not create" in text]
    assert [("exceeded quota" in w, "503" in w) for w in warnings] == [(True, False), (False, True)], warnings

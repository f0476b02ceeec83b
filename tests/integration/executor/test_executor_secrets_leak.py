"""What JobWatchExecutor writes for an authentication failure holds no credential: the scheduler's
kubeconfig carries marker strings in its token and password, the API server refuses the token (401),
a task is submitted; the failed task's event, the task log folder, the status file, the log records
and the scheduler's stderr (where the watcher process logs) show none of them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from support.workloads import make_workload

from airflow_jobwatch_testing.pod_template import pod_template_yaml
from airflow_jobwatch_testing.sandbox import SandboxThread

# slow: the same on every Airflow minor, so CI runs it once (in the main suite), not in each compat run
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def sandbox401() -> Iterator[SandboxThread]:
    with SandboxThread(bookmark_interval=1.0) as sb:
        yield sb


def _until(ex: Any, cond: Callable[[dict[str, Any]], Any], what: str, within: float = 60) -> Any:
    events: dict[str, Any] = {}
    deadline = time.monotonic() + within
    while True:
        ex.heartbeat()
        for key, (state, info) in ex.get_event_buffer().items():
            events[key.task_id] = (str(state), info)
        result = cond(events)
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}; status {ex.status()}"
        time.sleep(0.1)


def test_an_authentication_failure_leaks_no_credential(
    sandbox401: SandboxThread,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level("DEBUG")
    tag = uuid.uuid4().hex[:12]
    token, password = f"tokenMARK{tag}value0123456789", f"passwordMARK{tag}"
    kubeconfig = tmp_path / "scheduler-kubeconfig"
    sandbox401.write_kubeconfig(kubeconfig)
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token, "username": "scheduler", "password": password}
    kubeconfig.write_text(yaml.safe_dump(config))
    template = tmp_path / "pod_template.yaml"
    template.write_text(pod_template_yaml())
    status_file, logs = tmp_path / "status.json", tmp_path / "logs"
    for k, v in {
        "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
        "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": str(kubeconfig),
        "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": "default",
        "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(logs),
        "AIRFLOW__JOBWATCH__BACKOFF_INITIAL_SECONDS": "0.1",
        "AIRFLOW__JOBWATCH__BACKOFF_MAX_SECONDS": "1",
        "AIRFLOW__JOBWATCH__EXECUTOR_STATUS_FILE": str(status_file),
    }.items():
        monkeypatch.setenv(k, v)
    from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

    ex = JobWatchExecutor(parallelism=2)
    ex.job_id = "9"
    ex.start()
    try:
        ex.queue_workload(make_workload(task_id="t401"), session=mock.sentinel.unused_session)
        state, info = _until(
            ex, lambda e: e.get("t401") if e.get("t401", ("",))[0] == "failed" else None, "the task to fail"
        )
        _until(ex, lambda _: status_file.exists() and "401" in status_file.read_text(), "the status file")
        seen = {"event": str(info), "status": ex.status(), "status file": status_file.read_text()}
    finally:
        ex.end()
    out, err = capfd.readouterr()
    seen.update({"stdout": out, "stderr": err, "log": caplog.text})
    for path in [*logs.rglob("*"), *tmp_path.glob("*.json")]:
        if path.is_file():
            seen[str(path)] = path.read_text(errors="replace")
    assert "401" in seen["status file"] or "Unauthorized" in seen["status file"], seen["status file"]
    for where, text in seen.items():
        for marker in (token, password, f"MARK{tag}"):
            assert marker not in str(text), f"a credential leaked into {where}"

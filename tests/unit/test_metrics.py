"""Every metric airflow_jobwatch.metrics sends is in the docs/metrics.md table, and every row of the
table is sent by something. (The StatsD wire format is tested in tests/integration/test_metrics_statsd.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch import metrics

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    """Stands in for Airflow's stats module: the metrics backend itself is not what is tested here."""

    def __init__(self) -> None:
        self._sent: list[tuple[str, str, Any, dict[str, Any]]] = []

    @property
    def sent(self) -> list[tuple[str, str, Any, dict[str, Any]]]:
        """What reached the backend (metrics go through a sender thread: wait for it first)."""
        assert metrics.flush()
        return self._sent

    def incr(self, name: str, count: int = 1, tags: dict[str, Any] | None = None) -> None:
        self._sent.append(("counter", name, count, tags or {}))

    def gauge(self, name: str, value: float, tags: dict[str, Any] | None = None) -> None:
        self._sent.append(("gauge", name, value, tags or {}))

    def timing(self, name: str, value: float, tags: dict[str, Any] | None = None) -> None:
        self._sent.append(("timer", name, value, tags or {}))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(metrics, "_backend", lambda: rec)
    return rec


def _documented() -> dict[str, str]:
    """Metric-name regex -> type, from the docs tables."""
    rows = re.findall(
        r"^\| `(jobwatch\.[^`]+)` \| ([a-z]+)", (ROOT / "docs" / "metrics.md").read_text(), re.M
    )
    table = {}
    for name, kind in rows:
        pattern = re.escape(name)
        pattern = re.sub(r"<[a-z]+>", r"[A-Za-z0-9_-]+", pattern.replace(r"\<", "<").replace(r"\>", ">"))
        table[pattern] = kind
    return table


def _emit_everything() -> None:
    m = metrics.InformerMetrics("executor", "pods", "default")
    m.on_list(relist=False)
    m.on_list(relist=True)
    m.on_expired()
    m.on_watch_start(restart=True)
    m.on_stall()
    for event_type in ("ADDED", "MODIFIED", "DELETED", "DELETED_UNKNOWN"):
        m.on_event(event_type)
    m.on_health(False)
    m.on_stop()
    metrics.pod_created(launch_seconds=2)
    metrics.pod_create_error(429)
    metrics.terminal_report("success", after_watcher_gap=False)
    metrics.terminal_report("failed", after_watcher_gap=True)
    metrics.watcher_restarts(1)
    metrics.stale_launch_pod()
    metrics.disruption_relaunch("Evicted")
    metrics.pod_disrupted("PreemptionByScheduler")
    metrics.tasks_waiting_for_quota(2)
    metrics.shared_watches({"ns1": 3})
    metrics.shared_watches({})
    metrics.job_get("ns1", "missing")
    metrics.job_detected(
        {
            "status": {
                "conditions": [
                    {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ]
            }
        },
        status="success",
    )


def test_every_metric_sent_is_documented_with_its_type(recorder: Recorder):
    _emit_everything()
    table = _documented()
    assert recorder.sent
    for kind, name, _value, _tags in recorder.sent:
        matches = [t for p, t in table.items() if re.fullmatch(p, name)]
        assert matches, f"{name} is sent but not in docs/metrics.md"
        assert kind in matches[0], f"{name} is a {kind}, docs say {matches[0]}"


def test_every_documented_metric_is_sent(recorder: Recorder):
    _emit_everything()
    sent = {name for _, name, _, _ in recorder.sent}
    for pattern in _documented():
        assert any(re.fullmatch(pattern, name) for name in sent), (
            f"docs/metrics.md row {pattern} is never sent"
        )


def test_names_and_tags(recorder: Recorder):
    metrics.InformerMetrics("triggerer", "jobs", None).on_event("MODIFIED")
    metrics.pod_create_error(0)
    (_, name, value, tags), (_, name2, _, tags2) = recorder.sent
    assert name == "jobwatch.informer.triggerer.jobs.all.events.modified"
    assert value == 1
    assert tags == {"component": "triggerer", "kind": "jobs", "namespace": "all", "type": "MODIFIED"}
    assert name2 == "jobwatch.executor.create_errors.0"
    assert tags2 == {"status": "0"}


def test_detection_delay_is_measured_from_the_earliest_terminal_condition(recorder: Recorder):
    job = {
        "status": {
            "conditions": [
                {"type": "FailureTarget", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Failed", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
                {"type": "Suspended", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
            ]
        }
    }
    metrics.job_detected(job, status="failed")
    metrics.job_detected({"status": {}}, status="failed")  # no terminal condition: nothing sent
    metrics.job_detected(None, status="deleted")
    [(_, name, value_ms, tags)] = recorder.sent
    assert name == "jobwatch.triggerer.detection_delay"
    import datetime

    expected = (
        datetime.datetime.now(datetime.UTC).timestamp()
        - datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp()
    )
    assert abs(value_ms / 1000 - expected) < 60
    assert tags == {"status": "failed"}

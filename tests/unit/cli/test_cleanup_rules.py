"""Which worker pods `airflow jobwatch cleanup-pods` deletes: upstream's `cleanup-pods` rules, row by row."""

from __future__ import annotations

import datetime

import pytest

from airflow_jobwatch.cli.cleanup import completion_time, verdict

NOW = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=datetime.UTC)


def ago(minutes: float) -> str:
    return (NOW - datetime.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    phase: str,
    *,
    created: float = 60,
    finished: float | None = None,
    reason: str | None = None,
    restart: str = "Never",
) -> dict:
    status: dict = {"phase": phase}
    if reason:
        status["reason"] = reason
    if finished is not None:
        status["containerStatuses"] = [
            {"name": "base", "state": {"terminated": {"exitCode": 0, "finishedAt": ago(finished)}}}
        ]
    return {
        "metadata": {"name": "p", "creationTimestamp": ago(created)},
        "spec": {"restartPolicy": restart},
        "status": status,
    }


@pytest.mark.parametrize(
    ("the_pod", "pending", "completed", "expected"),
    [
        (pod("Succeeded", finished=10), 30, 1, "completed"),
        (pod("Succeeded", finished=0.5), 30, 1, None),  # finished too recently
        (pod("Succeeded", finished=0.5), 30, 0, "completed"),  # 0: at once
        (pod("Failed", finished=10), 30, 1, "completed"),
        (pod("Failed", finished=10, restart="OnFailure"), 30, 1, None),  # kubelet may still restart it
        (pod("Failed", reason="Evicted", created=10, restart="Always"), 30, 1, "completed"),
        (pod("Running", created=600), 30, 1, None),
        (pod("Pending", created=31), 30, 1, "pending too long"),
        (pod("Pending", created=29), 30, 1, None),
        (pod("Pending", created=4), 1, 1, None),  # the 5-minute floor protects new pods
        (pod("Pending", created=6), 1, 1, "pending too long"),
        (pod("Unknown", created=600), 30, 1, None),
    ],
)
def test_upstream_rules(the_pod, pending, completed, expected):
    assert verdict(the_pod, now=NOW, min_pending_minutes=pending, min_completed_minutes=completed) == expected


def test_completion_time_falls_back_to_conditions_then_creation():
    p = pod("Failed", created=90)
    assert completion_time(p) == NOW - datetime.timedelta(minutes=90)
    p["status"]["conditions"] = [
        {"type": "Ready", "lastTransitionTime": ago(30)},
        {"type": "X", "lastTransitionTime": ago(20)},
    ]
    assert completion_time(p) == NOW - datetime.timedelta(minutes=20)
    p["status"]["initContainerStatuses"] = [{"state": {"terminated": {"finishedAt": ago(5)}}}]
    assert completion_time(p) == NOW - datetime.timedelta(minutes=5)

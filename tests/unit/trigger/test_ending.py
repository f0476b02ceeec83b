"""The words of a failed Job's task, and when a trigger's failure may end the task."""

from __future__ import annotations

import datetime
import json
import time
from types import SimpleNamespace

import pytest
from airflow.utils.json import XComDecoder

from airflow_jobwatch.ending.end import (
    failure_text,
    hold_resume,
    job_finished,
    resume_hold_seconds,
    trigger_failure_respects_retries,
    xcom_json,
)

EVICTED = {
    "pod": "job-x-abc",
    "reason": "EvictionByEvictionAPI",
    "message": "evicted through the Eviction API (a node drain, the cluster autoscaler or a user) on node n1",
    "started": True,
    "node": "n1",
    "detail": None,
}
FAILED = {
    "status": "error",
    "outcome": "failed",
    "reason": "BackoffLimitExceeded",
    "message": "Job has reached the specified backoff limit.",
    "name": "x",
    "namespace": "ns",
}


def test_a_failure_after_a_disruption_names_it_and_the_option_that_absorbs_it() -> None:
    text = failure_text({**FAILED, "disruptions": [EVICTED]})
    assert text.startswith("Kubernetes Job ns/x failed: BackoffLimitExceeded: Job has reached")
    assert (
        "It failed after 1 disruption: pod job-x-abc was evicted through the Eviction API (a node drain, "
        "the cluster autoscaler or a user) on node n1; `disruption_retries` absorbs disruptions." in text
    )


def test_disruptions_counted_and_no_hint_when_disruption_retries_is_set() -> None:
    text = failure_text(
        {**FAILED, "disruptions": [EVICTED, {**EVICTED, "pod": "job-x-def"}]}, disruption_retries=1
    )
    assert "after 2 disruptions: pod job-x-abc was evicted" in text and "; pod job-x-def was evicted" in text
    assert "`disruption_retries` absorbs" not in text


def test_no_disruption_no_clause() -> None:
    assert failure_text({**FAILED, "disruptions": []}) == (
        "Kubernetes Job ns/x failed: BackoffLimitExceeded: Job has reached the specified backoff limit."
    )


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("3.1.8", False),
        ("3.2.1", False),
        ("3.3.0", False),
        ("3.3.1", True),
        ("3.3.2", True),
        ("3.4.0.dev0", True),
    ],
)
def test_trigger_failure_respects_retries_from_3_3_1(version: str, expected: bool) -> None:
    assert trigger_failure_respects_retries(version) is expected


def test_xcom_json_reads_back_as_the_worker_would_write_it() -> None:
    value = {"created": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), "pods": ["a"], "n": None}
    assert json.loads(json.dumps(xcom_json(value)), cls=XComDecoder) == value


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([{"type": "Complete", "status": "True"}], True),
        ([{"type": "FailureTarget", "status": "True"}], True),
        ([{"type": "Failed", "status": "False"}], False),
        ([{"type": "Suspended", "status": "True"}], False),
        ([], False),
    ],
)
def test_job_finished_reads_the_jobs_own_conditions(conditions: list[dict[str, str]], expected: bool) -> None:
    assert job_finished({"status": {"conditions": conditions}}) is expected


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args)


def _trigger(deferred_at: float | None) -> SimpleNamespace:
    return SimpleNamespace(deferred_at=deferred_at, log=_Log(), namespace="ns", job_name="x")


HOLD = 2.0


async def test_an_early_resume_is_held_until_the_hold_has_passed_since_the_deferral() -> None:
    trigger = _trigger(time.time() - HOLD + 0.3)
    started = time.time()
    await hold_resume(trigger, HOLD)
    assert time.time() >= trigger.deferred_at + HOLD - 0.01
    assert time.time() - started < HOLD  # only what was left of it
    assert len(trigger.log.lines) == 1 and "resuming the task in" in trigger.log.lines[0]


@pytest.mark.parametrize("deferred_at", [None, "long ago"])
async def test_a_late_resume_is_not_held(deferred_at: str | None) -> None:
    trigger = _trigger(None if deferred_at is None else time.time() - HOLD - 1)
    started = time.monotonic()
    await hold_resume(trigger, HOLD)
    assert time.monotonic() - started < 0.2
    assert trigger.log.lines == []


def test_the_hold_is_read_from_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resume_hold_seconds() == 15.0
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESUME_HOLD_SECONDS", "0")
    assert resume_hold_seconds() == 0.0
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESUME_HOLD_SECONDS", "-1")
    with pytest.raises(ValueError, match="resume_hold_seconds"):
        resume_hold_seconds()

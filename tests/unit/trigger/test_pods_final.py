"""``pods_final``: whether a terminal decision's pods are final enough to report, or the decision is held
(for at most ``_POD_SETTLE_SECONDS``) while the pod watch and the Job controller catch up.

The Job controller records a pod that ended in ``status.uncountedTerminatedPods`` first (together with
``SuccessCriteriaMet`` / ``FailureTarget`` when that pod decides the Job), and only in a later status
update folds it into ``succeeded`` / ``failed``. Until then the Job's counters are not final, and the
uncounted pods are ended pods the pod watch must show too.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_jobwatch.triggers.job import client_job_dict, pods_final


def _job(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "default", "uid": "job-uid"},
        "spec": {"template": {"spec": {"containers": [{"name": "base", "image": "busybox"}]}}},
        "status": status,
    }


def _payload(
    outcome: str, status: dict[str, Any], phases: list[str], *, api_json: bool = False
) -> dict[str, Any]:
    job = _job(status)
    return {
        "outcome": outcome,
        # the trigger's payloads carry kubernetes.client's V1Job.to_dict() shape (snake_case)
        "job": job if api_json else client_job_dict(job),
        "pods": [
            {"name": f"p{i}", "phase": phase, "exit_code": None, "reason": None}
            for i, phase in enumerate(phases)
        ],
    }


SUCCESS_CRITERIA = [{"type": "SuccessCriteriaMet", "status": "True"}]
COMPLETE = [*SUCCESS_CRITERIA, {"type": "Complete", "status": "True"}]
FAILURE_TARGET = [{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"}]
FAILED = [*FAILURE_TARGET, {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]


@pytest.mark.parametrize(
    ("outcome", "status", "phases", "final"),
    [
        pytest.param(
            "success", {"succeeded": 1, "conditions": COMPLETE}, ["succeeded"], True, id="counted-success"
        ),
        pytest.param(
            "success",
            {
                "succeeded": 0,
                "uncountedTerminatedPods": {"succeeded": ["u1"]},
                "conditions": SUCCESS_CRITERIA,
            },
            ["succeeded"],
            False,
            id="success-pod-shown-but-not-yet-counted",
        ),
        pytest.param(
            "success",
            {"uncountedTerminatedPods": {"succeeded": ["u1"]}, "conditions": SUCCESS_CRITERIA},
            [],
            False,
            id="success-uncounted-pod-not-shown",
        ),
        pytest.param(
            "failed",
            {"failed": 1, "uncountedTerminatedPods": {"failed": ["u2"]}, "conditions": FAILURE_TARGET},
            ["failed"],
            False,
            id="second-failure-uncounted-and-not-shown",
        ),
        pytest.param(
            "failed",
            {"failed": 1, "uncountedTerminatedPods": {"failed": ["u2"]}, "conditions": FAILURE_TARGET},
            ["failed", "failed"],
            False,
            id="second-failure-shown-but-not-yet-counted",
        ),
        pytest.param(
            "failed", {"failed": 2, "conditions": FAILED}, ["failed", "failed"], True, id="counted-failures"
        ),
        pytest.param(
            "success",
            {"succeeded": 1, "conditions": COMPLETE},
            ["succeeded", "running"],
            False,
            id="a-pod-still-running",
        ),
        pytest.param(
            "success",
            {"succeeded": 2, "conditions": COMPLETE},
            ["succeeded"],
            False,
            id="fewer-shown-than-counted",
        ),
        pytest.param("success", {"conditions": COMPLETE}, [], False, id="success-without-any-pod-shown"),
        pytest.param(
            "failed",
            {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]},
            [],
            True,
            id="failed-before-any-pod",
        ),
        pytest.param(
            "success",
            {
                "succeeded": 1,
                "uncountedTerminatedPods": {"succeeded": [], "failed": []},
                "conditions": COMPLETE,
            },
            ["succeeded"],
            True,
            id="empty-uncounted-lists",
        ),
        pytest.param(
            "success",
            {"succeeded": 1, "uncountedTerminatedPods": {}, "conditions": COMPLETE},
            ["succeeded"],
            True,
            id="empty-uncounted",
        ),
    ],
)
def test_pods_final(outcome: str, status: dict[str, Any], phases: list[str], final: bool) -> None:
    assert pods_final(_payload(outcome, status, phases)) is final
    # the same answer for a Job in API JSON (camelCase), should one ever reach it
    assert pods_final(_payload(outcome, status, phases, api_json=True)) is final


def test_garbage_in_uncounted_pods_never_raises() -> None:
    for junk in ("x", 3, ["u"], {"succeeded": "u1"}, {"succeeded": None}, {"failed": 7}):
        payload = _payload(
            "success", {"succeeded": 1, "uncountedTerminatedPods": junk}, ["succeeded"], api_json=True
        )
        assert isinstance(pods_final(payload), bool)

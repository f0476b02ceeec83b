"""What the task log and the task's error say about the Job.

* A failed Job's error names the failing pod and its container's exit code, and the log has one
  summary line per pod, even when the Job's terminal condition reached the watch before the pod's
  final state did (two watches; the in-worker watch is open before the Job exists, so the race is
  common there).
* The watch's internals ("informer ...: starting", "listed N objects at resourceVersion ...") are
  DEBUG: a task log is for the task.
"""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
import structlog.testing
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred

from airflow_jobwatch.kube.meaning.states import classify_job
from airflow_jobwatch.triggers.job import JobTrigger

from .conftest import NS
from .test_job_operator import FakeTI, _rendered, make_context, make_operator

pytestmark = pytest.mark.timeout(240)

EXIT_CODE = re.compile(r"pod '[^']+': container 'base' exited with code 3")


def _failing(kubeconfig, **kwargs):
    return make_operator(
        kubeconfig,
        cmds=["sh", "-c", "echo about-to-fail; exit 3"],
        wait_until_job_complete=True,
        get_logs=False,
        **kwargs,
    )


def test_in_worker_failure_always_names_the_exit_code(sandbox, kubeconfig):
    """Six failing Jobs waited for in the worker: each error carries the exit code, each task log the
    pod's summary line (before the fix, 2 runs in 3 lacked both)."""
    for run in range(6):
        op = _failing(kubeconfig)
        context = make_context(FakeTI())
        context["run_id"] = f"fail-{run}"
        with structlog.testing.capture_logs() as logs, pytest.raises(AirflowException) as info:
            op.execute(context)
        assert EXIT_CODE.search(str(info.value)), (run, str(info.value))
        text = _rendered(logs)
        assert re.search(r"  pod \S+: failed, exit code 3, reason Error", text), (run, text)


def test_an_event_without_the_pods_final_state_is_completed(sandbox, kubeconfig):
    """The event as the race makes it: the Job's failure condition, but no pod yet (what the trigger
    sends when the Job's watch event overtook the pod's). The task's error and log still name the
    pod and its exit code, read from the API when the task reports."""
    op = _failing(kubeconfig, deferrable=True)
    context = make_context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = JobTrigger(**deferred.value.trigger.serialize()[1])
    event = asyncio.run(asyncio.wait_for(trigger.wait(), 60))
    assert event["outcome"] == "failed"
    job = sandbox.get_object("jobs", NS, event["name"])
    event.update(pods=[], pod_names=[], message=classify_job(job).message)  # the Job alone, no pod
    assert not EXIT_CODE.search(event["message"])
    with structlog.testing.capture_logs() as logs, pytest.raises(AirflowException) as info:
        op.execute_complete(context, event)
    assert EXIT_CODE.search(str(info.value)), str(info.value)
    assert "BackoffLimitExceeded" in str(info.value)
    assert re.search(r"  pod \S+: failed, exit code 3, reason Error", _rendered(logs)), _rendered(logs)


def test_in_worker_task_log_has_no_watch_internals_at_info(sandbox, kubeconfig, caplog):
    """The in-worker wait runs the shared watch: its routine lines are DEBUG (they still exist there),
    and nothing of the watch reaches the task log at INFO on a healthy run."""
    caplog.set_level(logging.DEBUG, logger="airflow_jobwatch")
    op = make_operator(kubeconfig, cmds=["sh", "-c", "echo hi"], wait_until_job_complete=True, get_logs=True)
    op.execute(make_context())
    watch_lines = [
        r
        for r in caplog.records
        if r.name.startswith(("airflow_jobwatch.kube", "airflow_jobwatch.triggers.registry"))
    ]
    assert [r.getMessage() for r in watch_lines if r.levelno >= logging.INFO] == []
    debug = [r.getMessage() for r in watch_lines if r.levelno == logging.DEBUG]
    assert any(re.search(r"informer \S+: listed \d+ objects at resourceVersion", m) for m in debug), debug
    assert any(re.search(r"informer \S+: starting", m) for m in debug), debug

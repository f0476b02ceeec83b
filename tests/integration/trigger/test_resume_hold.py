"""``[jobwatch] resume_hold_seconds`` holds only a task that resumes on a worker: a task the trigger ends
from the triggerer has no resume to race with the deferring worker's exit, so it ends at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import structlog.testing
from airflow.providers.common.compat.sdk import TaskDeferred
from airflow.triggers.base import TaskSuccessEvent

from .test_job_operator import FakeTI, _rendered, make_context, make_operator

pytestmark = pytest.mark.timeout(120)

HELD = "resuming the task in"


def _deferred(op: Any) -> Any:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(make_context())
    trigger = deferred.value.trigger
    trigger.task_instance = FakeTI()  # as the triggerer sets it: the trigger may end the task itself
    return trigger


async def _first_event(trigger: Any, limit: float) -> Any:
    async def first() -> Any:
        async for event in trigger.run():
            return event
        return None

    return await asyncio.wait_for(first(), limit)


async def test_a_task_ended_from_the_triggerer_is_not_held(sandbox, kubeconfig, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESUME_HOLD_SECONDS", "600")
    op = make_operator(
        kubeconfig, cmds=["true"], deferrable=True, wait_until_job_complete=True, get_logs=False
    )
    trigger = _deferred(op)
    assert trigger.end_task is not None and trigger.deferred_at is not None
    with structlog.testing.capture_logs() as logs:
        event = await _first_event(trigger, 60)  # a 600 s hold would time this out
    assert isinstance(event, TaskSuccessEvent), event
    assert HELD not in _rendered(logs)


async def test_a_task_that_resumes_on_a_worker_is_held(sandbox, kubeconfig, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESUME_HOLD_SECONDS", "3")
    op = make_operator(
        kubeconfig,
        cmds=["true"],
        deferrable=True,
        wait_until_job_complete=True,
        on_success_callback=lambda context: None,
        get_logs=False,
    )
    trigger = _deferred(op)
    assert trigger.end_task is None  # a callback runs on a worker: the task resumes
    with structlog.testing.capture_logs() as logs:
        event = await _first_event(trigger, 60)
    assert not isinstance(event, TaskSuccessEvent) and event.payload["status"] == "success", event
    assert HELD in _rendered(logs)
    assert time.time() - trigger.deferred_at >= 3  # not resumed before the hold had passed

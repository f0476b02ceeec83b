"""execution_timeout's timer read back (airflow_jobwatch.operators.alarm): a timer that was running when
execute() started and has gone off raises AirflowTaskTimeout, once; nothing else ever does."""

from __future__ import annotations

import datetime
import signal
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from airflow.providers.common.compat.sdk import AirflowTaskTimeout

from airflow_jobwatch.operators.alarm import ExecutionTimeoutAlarm

pytestmark = pytest.mark.timeout(60, method="thread")  # the signal method would share SIGALRM

TIMEOUT = datetime.timedelta(seconds=30)


@pytest.fixture(autouse=True)
def dropped_alarms() -> Iterator[None]:
    """SIGALRM handled by a handler that raises nothing, as when Python drops what Airflow's raised."""
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _wait_until_the_timer_went_off() -> None:
    deadline = time.monotonic() + 10
    while signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        assert time.monotonic() < deadline, "the timer never went off"
        time.sleep(0.01)


def test_a_timer_that_went_off_while_the_task_runs_raises_once() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    alarm = ExecutionTimeoutAlarm.at_start(SimpleNamespace(execution_timeout=TIMEOUT))
    _wait_until_the_timer_went_off()
    with pytest.raises(AirflowTaskTimeout, match="Timeout, PID: "):
        alarm.check()
    alarm.check()  # once


def test_a_running_timer_raises_nothing() -> None:
    signal.setitimer(signal.ITIMER_REAL, 30)
    alarm = ExecutionTimeoutAlarm.at_start(SimpleNamespace(execution_timeout=TIMEOUT))
    alarm.check()


@pytest.mark.parametrize(
    ("execution_timeout", "timer"),
    [
        pytest.param(None, 0.05, id="no-execution-timeout"),  # a timer someone else set
        pytest.param(TIMEOUT, None, id="no-timer-at-start"),  # e.g. execute() called outside Airflow
    ],
)
def test_without_a_timer_armed_for_the_task_nothing_is_raised(
    execution_timeout: datetime.timedelta | None, timer: float | None
) -> None:
    if timer is not None:
        signal.setitimer(signal.ITIMER_REAL, timer)
    alarm = ExecutionTimeoutAlarm.at_start(SimpleNamespace(execution_timeout=execution_timeout))
    if timer is None:
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # one started after execute() began is not the task's
    _wait_until_the_timer_went_off()
    alarm.check()


def test_a_timer_disarmed_before_it_was_due_raises_nothing() -> None:
    """A hook that stops the timer (a nested timeout(), signal.alarm(0)) did not make it go off."""
    signal.setitimer(signal.ITIMER_REAL, 30)
    alarm = ExecutionTimeoutAlarm.at_start(SimpleNamespace(execution_timeout=TIMEOUT))
    signal.setitimer(signal.ITIMER_REAL, 0)
    alarm.check()
    assert alarm.armed

"""``execution_timeout``'s alarm, noticed even when Python dropped what its handler raised.

Airflow arms ``execution_timeout`` as a one-shot real-time timer (``setitimer(ITIMER_REAL)``) whose
SIGALRM handler raises ``AirflowTaskTimeout`` in the main thread (``airflow.sdk.execution_time.timeout``),
and disarms it only after ``execute()`` has returned. Python runs a signal handler at the next bytecode
the main thread runs; when that bytecode is in a finalizer (``__del__``) or in a weakref callback that
the garbage collector runs (asyncio keeps its tasks, and threading its threads, in WeakSets whose
callbacks are Python code), what the handler raises is printed ("Exception ignored in ...") and dropped.
The task then runs on: it creates its Job, and waits for it to end. A collection of a large heap takes
long enough on a loaded machine for an alarm to land in it.

So the operator reads the timer when ``execute()`` starts, and again where it is about to act or waits
(before the Job is created, at least once a second while it waits, and when the wait ends): a timer that
was running and now reads zero has gone off while the task still runs, and the task raises
``AirflowTaskTimeout`` itself, which Airflow answers with ``on_kill()`` as for its own. This reads back
Airflow's deadline; it never sets one of its own (one that fired first would end the task with an
ordinary error, and ``on_kill()`` would not run: see :func:`~airflow_jobwatch.operators.inworker.wait_in_worker`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from airflow.providers.common.compat.sdk import AirflowTaskTimeout

__all__ = ["ExecutionTimeoutAlarm"]


#: How long after the deadline the timer held at start its reading zero counts as the alarm having gone
#: off. A timer disarmed before that (a nested ``timeout()`` in a hook, ``signal.alarm(0)``) is not it.
DEADLINE_SLACK_SECONDS = 0.05


def _timer_left() -> float:
    return signal.getitimer(signal.ITIMER_REAL)[0]


def _timer_running() -> bool:
    return _timer_left() > 0


class ExecutionTimeoutAlarm:
    """Whether ``execution_timeout``'s timer, running when ``execute()`` started, has gone off since."""

    def __init__(self, *, armed: bool, log: Any = None, deadline: float | None = None) -> None:
        self.armed = armed
        self.log = log
        #: ``time.monotonic()`` at which the timer read at start was due; None: not known (always due).
        self.deadline = deadline

    @classmethod
    def at_start(cls, op: Any) -> ExecutionTimeoutAlarm:
        """Read when ``execute()`` starts: armed when the task has an ``execution_timeout`` and the
        process's real-time timer runs (Airflow armed it around this call, in the main thread)."""
        armed = (
            getattr(op, "execution_timeout", None) is not None
            and hasattr(signal, "getitimer")
            and threading.current_thread() is threading.main_thread()
            and _timer_running()
        )
        deadline = time.monotonic() + _timer_left() if armed else None
        return cls(armed=armed, log=getattr(op, "log", None), deadline=deadline)

    def check(self) -> None:
        """Raise ``AirflowTaskTimeout`` when the timer has gone off although the task still runs (what
        its handler raised was dropped); once, and only if it was running when the task started."""
        if not self.armed or _timer_running():
            return
        if self.deadline is not None and time.monotonic() < self.deadline - DEADLINE_SLACK_SECONDS:
            # Disarmed before it was due: someone else stopped the timer, it did not go off.
            return
        self.armed = False
        handler = signal.getsignal(signal.SIGALRM)
        message = getattr(getattr(handler, "__self__", None), "error_message", None)
        if self.log is not None:
            self.log.warning(
                "execution_timeout's alarm went off but the exception it raised was lost (Python drops one "
                "raised in a finalizer or a garbage-collector callback); ending the task now"
            )
        raise AirflowTaskTimeout(message or f"Timeout, PID: {os.getpid()}")

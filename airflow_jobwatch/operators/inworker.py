"""The in-worker wait: the Job created and waited for in the worker, with the trigger's own code.

Not deferred, the operator runs ``JobTrigger``'s wait under ``asyncio.run`` in a helper thread
(:class:`LoopThread`), so that Airflow's ``execution_timeout`` alarm always reaches the main thread
(:func:`wait_in_worker` says why), and follows the pods' logs while the Job runs (:class:`LogFollower`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowTaskTimeout

from airflow_jobwatch.kube.meaning.states import classify_job
from airflow_jobwatch.operators import request, resume
from airflow_jobwatch.operators.podlogs import requested_containers, write_container_log

if TYPE_CHECKING:
    from airflow.sdk import Context
    from kubernetes.client import models as k8s

    from airflow_jobwatch.operators.alarm import ExecutionTimeoutAlarm
    from airflow_jobwatch.operators.taskjob import TaskJob

__all__ = ["LogFollower", "LoopThread", "create_and_wait", "doing_now", "wait_in_worker"]


async def create_and_wait(tj: TaskJob, job_request: k8s.V1Job, context: Context) -> dict[str, Any]:
    """The in-worker wait: open the namespace's watch, create the Job, wait for it.

    Runs in the event loop of :func:`wait_in_worker`'s helper thread, never in the main thread.
    """
    meta = job_request.metadata
    trigger = tj.trigger(meta.name, meta.namespace, None)
    async with trigger.watching() as watch:
        # A blocking create in this loop is fine: the loop is ours alone, serving our informers.
        job = request.create_job(tj, job_request, context)
        trigger = tj.trigger(job.metadata.name, job.metadata.namespace, job.metadata.uid)
        if not tj.get_logs:
            return await trigger.wait()
        follower = LogFollower(tj, job.metadata.namespace)
        discovering = asyncio.create_task(follower.discover(lambda: watch.pods_of(job.metadata.uid)))
        try:
            event = await trigger.wait()
        except BaseException:  # cancelled (the task is being stopped: execution_timeout...) or failed
            follower.close()
            raise
        finally:
            discovering.cancel()
        follower.start_ready(watch.pods_of(job.metadata.uid))  # pods first seen at the very end
        await follower.drain(_LOG_DRAIN_SECONDS)
        tj.logs_wanted, tj.logs_streamed = follower.wanted, follower.started
        return event


def wait_in_worker(
    tj: TaskJob,
    job_request: k8s.V1Job,
    context: Context,
    *,
    alarm: ExecutionTimeoutAlarm | None = None,
) -> dict[str, Any]:
    """Create the Job and wait for it in the worker, the way Airflow's ``execution_timeout`` expects.

    How Airflow 3 enforces ``execution_timeout`` (``task_runner._run_execute_callable``): a SIGALRM
    whose handler raises ``AirflowTaskTimeout``, a ``BaseException``, in the main thread; the runner
    then calls ``on_kill()``, which deletes the Job with ``on_kill_propagation_policy``. Two rules
    follow, and this function is built on them:

    * **No deadline of our own.** A deadline computed here (from ``ti.start_date``) would fire before
      Airflow's timer and end the task with an ordinary error, so Airflow would never call
      ``on_kill()`` and the Job would run on (and, with ``backoffLimit > 0``, the Job controller would
      replace every pod the clean-up deleted). The trigger gets no timeout in the worker.
    * **The event loop never runs in the main thread.** Python runs a signal handler in the main
      thread, between two bytecodes of whatever the main thread is running. If that were an event
      loop, the handler's ``AirflowTaskTimeout`` would be raised inside a task's step (asyncio stores
      a ``BaseException`` other than ``KeyboardInterrupt``/``SystemExit`` as that task's result: an
      informer dies silently) or inside a callback (logged by the loop): the timeout is lost and the
      task runs on. So the loop (informers, the trigger's wait, log discovery) runs in a helper
      thread, which signals never interrupt, and the main thread only blocks in
      ``threading.Event.wait()``: a lock wait that a signal interrupts (Python >= 3.2 on POSIX),
      out of which the handler's exception propagates in the main thread, as from upstream's
      ``time.sleep`` poll.
    * **An alarm whose exception was dropped still ends the wait.** When the handler runs inside a
      finalizer or a garbage collector's callback, Python drops what it raises
      (:mod:`~airflow_jobwatch.operators.alarm`); the main thread reads the timer back (``alarm``) at
      least every ``_ALARM_CHECK_SECONDS`` while it waits, and once the wait has ended.

    When anything is raised in the main thread while it waits (the alarm, ``KeyboardInterrupt``), the
    wait's task is cancelled in its loop, which closes the log streams, leaves the shared watch and
    stops the informers; the main thread waits for that (at most ``_STOP_SECONDS``), so that a Job
    whose create was in flight is recorded in the operator's ``job``, and re-raises. Airflow then calls
    ``on_kill()``, which deletes the Job. (SIGTERM needs nothing special: Airflow's handler calls
    ``on_kill()`` in the main thread, the Job is deleted, and the wait ends with ``deleted``.)
    """
    runner = LoopThread(lambda: create_and_wait(tj, job_request, context), name=f"jobwatch-wait-{tj.task_id}")
    try:
        event: dict[str, Any] = runner.run(tj.log, check=alarm.check if alarm is not None else None)
    except AirflowTaskTimeout as e:
        raise AirflowTaskTimeout(f"{e} ({doing_now(tj)})") from e
    return event


def doing_now(tj: TaskJob) -> str:
    """What the Job is doing now, for the in-worker timeout's message (the deferred timeout's words:
    "it was running: ..."); best effort, never raises."""
    job = tj.job
    if job is None:
        return "the Job was not created yet"
    ns, name = job.metadata.namespace, job.metadata.name
    try:
        now = resume.read_job_now(tj, ns, name, job.metadata.uid)
        if now is None:
            return f"Job {ns}/{name} could not be read"
        pods = resume.read_pods(tj, ns, now.metadata.uid, {})
        state = classify_job(now, pods, fatal_waiting_reasons=tj.fatal_reasons)
    except Exception as e:
        return f"Job {ns}/{name} could not be read: {e}"
    return f"Job {ns}/{name} was {state.phase} when execution_timeout passed: {state.message}"


#: After the in-worker wait has ended, how long the log followers may still take to reach the end of
#: their streams (containers that ended are read to the end at once; this bounds a pod that still runs
#: after its Job met its success criteria, whose log upstream would follow for ever).
_LOG_DRAIN_SECONDS = 60.0

#: How often the in-worker wait looks in the shared watch's cache for pods whose containers have started.
_LOG_DISCOVERY_SECONDS = 0.5


class LogFollower:
    """Follows the logs of a Job's pods while the in-worker wait runs: one thread per (pod, container)
    whose container has started (``pods/log?follow=true``), started as the pods appear in the shared
    watch's cache (retried pods and parallel pods included), so lines reach the task log as they are
    written."""

    def __init__(self, tj: TaskJob, namespace: str) -> None:
        self.tj = tj
        self.namespace = namespace
        self.started: set[tuple[str, str]] = set()
        self.wanted: dict[str, list[str]] = {}
        self.threads: list[threading.Thread] = []
        self.responses: list[Any] = []
        self.stopped = threading.Event()

    async def discover(self, pods: Callable[[], list[dict[str, Any]]]) -> None:
        while True:
            self.start_ready(pods())
            await asyncio.sleep(_LOG_DISCOVERY_SECONDS)

    def start_ready(self, pods: list[dict[str, Any]]) -> None:
        if self.stopped.is_set():
            return
        for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or "")):
            meta, status = pod.get("metadata") or {}, pod.get("status") or {}
            name = str(meta.get("name"))
            begun = {
                cs.get("name")
                for cs in (status.get("initContainerStatuses") or [])
                + (status.get("containerStatuses") or [])
                if set((cs.get("state") or {}).keys()) & {"running", "terminated"} or cs.get("lastState")
            }
            # The cache keeps a projection of each pod (kube/engine/projection.py) without the spec's container
            # list; the container statuses name every container once the kubelet reports the pod.
            if name not in self.wanted:  # once per pod: it warns about requested containers not there
                if not status.get("containerStatuses"):
                    continue
                self.wanted[name] = requested_containers(
                    self.tj,
                    name,
                    [cs.get("name") for cs in status.get("initContainerStatuses") or []],
                    [cs.get("name") for cs in status.get("containerStatuses") or []],
                )
            wanted = self.wanted[name]
            for container in wanted:
                if container not in begun or (name, container) in self.started:
                    continue
                self.started.add((name, container))
                thread = threading.Thread(
                    target=write_container_log,
                    args=(self.tj, name, self.namespace, container),
                    kwargs={"follow": True, "opened": self.responses.append, "stopped": self.stopped},
                    name=f"log-{name}-{container}",
                    daemon=True,
                )
                thread.start()
                self.threads.append(thread)

    async def drain(self, limit: float) -> None:
        """Wait (up to ``limit`` seconds) for the followers to reach the end of their logs."""
        deadline = time.monotonic() + limit
        for thread in self.threads:
            await asyncio.to_thread(thread.join, max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            self.tj.log.warning(
                "Stopped following logs still open %.0f s after the Job ended (a pod still running?)", limit
            )
            self.close()

    def close(self) -> None:
        """End every log stream still open; their threads then return (and release the connection).

        ``HTTPResponse.shutdown()`` (urllib3 >= 2.3) shuts the socket down for reading, which wakes a
        thread blocked in ``recv``. ``close()`` would not: it waits for the buffered reader's lock, which
        the following thread holds until the stream ends, so it is only the fallback.
        """
        self.stopped.set()
        for response in self.responses:
            with contextlib.suppress(Exception):
                shutdown = getattr(response, "shutdown", None)
                if callable(shutdown):
                    shutdown()
                else:
                    response.close()


#: How often the main thread, while it waits, reads back execution_timeout's timer: the longest a task
#: runs on after an alarm whose exception Python dropped (a read costs one system call).
_ALARM_CHECK_SECONDS = 1.0

#: After the main thread was interrupted (execution_timeout's alarm...), how long it waits for the
#: in-worker wait's loop to stop (a create in flight answers, the watch closes) before re-raising anyway.
#: A create is bounded by the client's request timeout; closing informers takes milliseconds.
_STOP_SECONDS = 30.0


class LoopThread:
    """Runs one coroutine to its end with ``asyncio.run`` in a thread of its own, while the calling
    (main) thread waits in a way signals can interrupt. See :func:`wait_in_worker`
    for why; the thread inherits the caller's context variables (the task's log context)."""

    def __init__(self, make: Callable[[], Coroutine[Any, Any, Any]], *, name: str) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._stopping = False
        self._finished = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._main,), name=name, daemon=True)

    def _main(self) -> None:
        try:
            self._result = asyncio.run(self._run())
        except BaseException as e:  # handed to the main thread, which re-raises it
            self._error = e
        finally:
            self._finished.set()

    async def _run(self) -> Any:
        with self._lock:
            if self._stopping:  # stopped before the loop had even started
                raise asyncio.CancelledError
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        return await self._make()

    def _stop(self) -> None:
        with self._lock:
            self._stopping = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed already: nothing to cancel
                loop.call_soon_threadsafe(task.cancel)

    def run(self, log: Any, *, check: Callable[[], None] | None = None) -> Any:
        """Start the thread and return the coroutine's result (or raise its exception).

        Whatever a signal handler raises while the main thread waits here propagates to the caller,
        after the loop was stopped (at most ``_STOP_SECONDS``); so does what ``check`` raises, which is
        called every ``_ALARM_CHECK_SECONDS`` while the coroutine runs and once when it has ended.
        """
        try:
            self._thread.start()  # (its own wait for the thread to start is interruptible too)
            # interruptible: the alarm's AirflowTaskTimeout is raised right here
            while not self._finished.wait(_ALARM_CHECK_SECONDS):
                if check is not None:
                    check()
            if check is not None:
                check()
        except BaseException:
            self._stop()
            # Not alive: either done, or not yet running its target, which then sees `_stopping` first
            # and ends before it creates anything.
            if self._thread.is_alive() and not self._finished.wait(_STOP_SECONDS):
                log.warning("The Job's wait did not stop within %.0f s; leaving it behind", _STOP_SECONDS)
            raise
        if self._error is not None:
            raise self._error
        return self._result

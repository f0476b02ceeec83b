"""``execution_timeout`` and the other ways a task ends while its Job still runs.

Airflow 3 enforces ``execution_timeout`` in the worker with a SIGALRM whose handler raises
``AirflowTaskTimeout`` (a ``BaseException``) in the main thread; ``_run_execute_callable`` then calls
``on_kill()`` and re-raises. These tests run the operators through that very function (Airflow's task
runner; a private function, used here because it *is* the path under test), in the test's main thread,
against the sandbox, and look at what a user sees: the exception, whether ``on_kill`` ran, and which
Kubernetes objects are left.

pytest-timeout runs with its thread method here: its signal method would share SIGALRM with Airflow's.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import re
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from airflow.providers.cncf.kubernetes.operators.job import (
    KubernetesJobOperator as UpstreamKubernetesJobOperator,
)
from airflow.providers.common.compat.sdk import AirflowException, AirflowTaskTimeout, TaskDeferred

try:
    # Airflow 3.3's task runner: the call that arms execution_timeout's SIGALRM around execute().
    from airflow.sdk.execution_time.task_runner import _run_execute_callable
except ImportError:  # Airflow 3.1 / 3.2 arm it inside _execute_task, with no callable of its own
    pytest.skip(
        "Airflow's task runner has no _run_execute_callable before 3.3; this differential runs on 3.3",
        allow_module_level=True,
    )

from airflow_jobwatch.operators.job import KubernetesJobOperator as OurKubernetesJobOperator
from airflow_jobwatch.triggers.job import JobTrigger

from .conftest import NS
from .test_job_operator import FakeDag, FakeTI, wait_until_sync

pytestmark = pytest.mark.timeout(300, method="thread")

UPSTREAM, OURS = "upstream", "ours"


@pytest.fixture(autouse=True)
def _restore_sigalrm() -> Iterator[None]:
    """Airflow's timeout leaves its SIGALRM handler installed; put the previous one back."""
    previous = signal.getsignal(signal.SIGALRM)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _jobs_of_run(sandbox: Any, run_id: str) -> list[dict[str, Any]]:
    """The Jobs whose pod template carries this dag run's labels (each test run uses its own run_id)."""
    return [
        j
        for j in sandbox.objects("jobs", NS)
        if ((j["spec"]["template"].get("metadata") or {}).get("labels") or {}).get("run_id") == run_id
    ]


def _live_pods_of(sandbox: Any, job_name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in sandbox.objects("pods", NS)
        if (p["metadata"].get("labels") or {}).get("job-name") == job_name
        and not p["metadata"].get("deletionTimestamp")
    ]


def _completed(job: dict[str, Any] | None) -> bool:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def _wait_threads_gone(prefix: str, limit: float = 30.0) -> None:
    wait_until_sync(
        lambda: not [t for t in threading.enumerate() if t.name.startswith(prefix)],
        f"threads {prefix}* to end",
        limit=limit,
        state=lambda: [t.name for t in threading.enumerate()],
    )


def _run_under_airflow_timeout(op: Any, context: dict[str, Any], execute: Any = None) -> BaseException | None:
    """``execute`` (default ``op.execute``) as Airflow's task runner runs it: under ``execution_timeout``
    (SIGALRM), calling ``on_kill()`` on ``AirflowTaskTimeout``. Returns what it raised."""
    try:
        _run_execute_callable(context, execute or op.execute, op)
    except BaseException as e:  # AirflowTaskTimeout is a BaseException
        return e
    return None


def _record_on_kill(op: Any) -> list[float]:
    calls: list[float] = []
    original = op.on_kill

    def on_kill() -> None:
        calls.append(time.monotonic())
        original()

    op.on_kill = on_kill
    return calls


def _operator(variant: str, kubeconfig: Any, **kwargs: Any) -> Any:
    cls = UpstreamKubernetesJobOperator if variant == UPSTREAM else OurKubernetesJobOperator
    kwargs.setdefault("image", "busybox:1.36")
    kwargs.setdefault("backoff_limit", 2)
    kwargs.setdefault("wait_until_job_complete", True)
    kwargs.setdefault("termination_grace_period", 0)
    return cls(
        task_id="task",
        namespace=NS,
        kubernetes_conn_id=None,
        config_file=str(kubeconfig),
        job_poll_interval=0.5,
        **kwargs,
    )


def test_timeout_in_the_worker_is_upstreams(sandbox, kubeconfig, monkeypatch):
    """Differential: the same Job (backoffLimit 2, longer than the timeout) under the same
    ``execution_timeout``, waited for in the worker. Upstream: ``AirflowTaskTimeout``, then ``on_kill()``,
    which deletes the Job (Foreground): nothing is left, nothing is re-created. Ours must do the same."""
    # Upstream lists the Job's pods right after creating it and fails if there are none yet (#70585);
    # give it its pods first (after `self.job` is set, so that its on_kill knows the Job either way).
    original_get_pods = UpstreamKubernetesJobOperator.get_pods

    def get_pods(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = self.job.metadata.name
        wait_until_sync(lambda: bool(_live_pods_of(sandbox, name)), f"the pod of {name}", limit=60)
        return original_get_pods(self, *args, **kwargs)

    monkeypatch.setattr(UpstreamKubernetesJobOperator, "get_pods", get_pods)

    seen: dict[str, tuple[Any, ...]] = {}
    for variant in (UPSTREAM, OURS):
        op = _operator(
            variant, kubeconfig, cmds=["sleep", "60"], execution_timeout=datetime.timedelta(seconds=6)
        )
        kills = _record_on_kill(op)
        run_id = f"timeout-{variant}"
        ti = FakeTI()
        error = _run_under_airflow_timeout(op, {"ti": ti, "run_id": run_id, "dag": FakeDag()})
        name = ti.xcoms.get("job_name")
        assert name, f"{variant}: no Job was created ({error!r})"
        wait_until_sync(
            lambda run_id=run_id: not _jobs_of_run(sandbox, run_id),
            f"{variant}'s Job to be deleted",
            limit=60,
            state=lambda run_id=run_id: _jobs_of_run(sandbox, run_id),
        )
        wait_until_sync(
            lambda name=name: not _live_pods_of(sandbox, name), f"{variant}'s pods to go", limit=60
        )
        seen[variant] = (type(error).__name__, len(kills) >= 1, "Job deleted, no pod left")
        if variant == OURS:  # and the message says what the Job was doing, as the deferred one does
            assert re.search(rf"Job {NS}/{name} was running when execution_timeout passed", str(error)), error
    assert seen[OURS] == seen[UPSTREAM] == ("AirflowTaskTimeout", True, "Job deleted, no pod left"), seen
    _wait_threads_gone("jobwatch-wait-")  # our loop was stopped, not left running


def test_the_alarm_is_never_swallowed_by_the_event_loop(sandbox, kubeconfig):
    """The alarm lands at a different moment of each run (watch start, create, wait) while the
    namespace is busy (other Jobs changing all the time keep the watch's callbacks running). Each run
    must end with Airflow's ``AirflowTaskTimeout`` and ``on_kill()``, never run on until its Job ends,
    and leave no Job behind. (With the loop in the main thread, an alarm that lands in an asyncio task
    is stored as that task's exception, and the task runs on.)"""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    api = k8s_client.BatchV1Api(k8s_config.new_client_from_config(config_file=str(kubeconfig)))
    stop = threading.Event()

    def churn() -> None:  # a busy namespace: 20 suspended Jobs relabelled continuously
        names = [f"busy-{i}" for i in range(20)]
        for name in names:
            api.create_namespaced_job(
                NS,
                {
                    "metadata": {"name": name},
                    "spec": {
                        "suspend": True,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}],
                            }
                        },
                    },
                },
            )
        n = 0
        while not stop.is_set():
            n += 1
            api.patch_namespaced_job(names[n % len(names)], NS, {"metadata": {"labels": {"n": str(n)}}})

    _warm_up(kubeconfig)
    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    outcomes = []
    try:
        for i in range(10):
            op = _operator(
                OURS,
                kubeconfig,
                cmds=["sleep", "20"],
                get_logs=i % 2 == 0,  # the log followers' loop too
                execution_timeout=datetime.timedelta(seconds=0.2 + 0.25 * i),
            )
            kills = _record_on_kill(op)
            ti = FakeTI()
            run_id = f"alarm-{i}"
            error = _run_under_airflow_timeout(op, {"ti": ti, "run_id": run_id, "dag": FakeDag()})
            jobs = _jobs_of_run(sandbox, run_id)
            outcomes.append((i, type(error).__name__, bool(kills), any(_completed(j) for j in jobs)))
            assert outcomes[-1] == (i, "AirflowTaskTimeout", True, False), (outcomes, error)
            wait_until_sync(
                lambda run_id=run_id: not _jobs_of_run(sandbox, run_id),
                f"run {i}'s Job to be deleted",
                limit=60,
            )
            _wait_threads_gone("jobwatch-wait-")
    finally:
        stop.set()
        churner.join(30)


def _warm_up(kubeconfig: Any) -> None:
    """One whole run: everything a worker has imported and initialised before its task starts is then
    in place, so that an alarm cannot land in a one-time import (which nothing recovers from)."""
    _operator(OURS, kubeconfig, cmds=["true"], get_logs=True).execute(
        {"ti": FakeTI(), "run_id": "warm-up", "dag": FakeDag()}
    )


def _alarm_in_a_finalizer() -> None:
    """Make execution_timeout's alarm land while the main thread runs a weakref callback, as the garbage
    collector runs them at any allocation (asyncio keeps its tasks and threading its threads in
    WeakSets, whose callbacks are Python code). Python drops what a signal handler raises there: it
    prints "Exception ignored in" and goes on."""

    class Garbage:
        pass

    def callback(_: Any) -> None:
        # Wait here for Airflow's timer to go off at its own deadline: the alarm lands in this callback,
        # and its AirflowTaskTimeout ends the callback and is dropped.
        deadline = time.monotonic() + 60
        while signal.getitimer(signal.ITIMER_REAL)[0] > 0 and time.monotonic() < deadline:
            time.sleep(0.01)

    garbage = Garbage()
    ref = weakref.ref(garbage, callback)
    del garbage  # the callback runs now, in this thread
    assert ref() is None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_alarm_that_lands_in_a_finalizer_still_ends_the_task(sandbox, kubeconfig):
    """The alarm lands while the main thread runs a garbage collector's callback, after the Job was
    built and before it is created (as once under a load average of 12, in asyncio's WeakSet of
    tasks): Python drops the handler's ``AirflowTaskTimeout`` there. The task must still end with
    ``AirflowTaskTimeout`` and ``on_kill()``, and not create a Job that nothing would stop."""
    _warm_up(kubeconfig)
    # Short enough to wait for in the callback; the Job is built well within it after the warm-up (were
    # it not, the alarm would land outside the callback and the test would pass without testing it).
    op = _operator(OURS, kubeconfig, cmds=["sleep", "20"], execution_timeout=datetime.timedelta(seconds=4))
    build = op.build_job_request_obj

    def build_then_collect(*args: Any, **kwargs: Any) -> Any:
        job_request = build(*args, **kwargs)
        _alarm_in_a_finalizer()
        return job_request

    op.build_job_request_obj = build_then_collect
    kills = _record_on_kill(op)
    error = _run_under_airflow_timeout(op, {"ti": FakeTI(), "run_id": "alarm-in-gc", "dag": FakeDag()})
    jobs = _jobs_of_run(sandbox, "alarm-in-gc")
    assert (type(error).__name__, bool(kills), jobs) == ("AirflowTaskTimeout", True, []), (error, jobs)


def _dropping_every_alarm(op: Any) -> Any:
    """``op.execute`` with Airflow's SIGALRM handler wrapped so that what it raises is dropped, wherever
    the alarm lands: what CPython does when the alarm lands in a finalizer or a garbage collector's
    callback, made certain at every moment of the run (build, create, wait)."""

    def execute(context: Any) -> Any:
        airflows = signal.getsignal(signal.SIGALRM)
        assert callable(airflows), airflows

        def dropped(signum: int, frame: Any) -> None:
            with contextlib.suppress(AirflowTaskTimeout):
                airflows(signum, frame)

        signal.signal(signal.SIGALRM, dropped)
        return op.execute(context)

    return execute


def test_an_alarm_whose_exception_is_dropped_still_ends_the_task_at_any_moment(sandbox, kubeconfig):
    """Whether the dropped alarm lands while the Job is built, created or waited for, the task ends
    with ``AirflowTaskTimeout`` and ``on_kill()``, and leaves no Job behind."""
    _warm_up(kubeconfig)
    for i in range(4):
        op = _operator(
            OURS,
            kubeconfig,
            cmds=["sleep", "20"],
            get_logs=i % 2 == 0,
            execution_timeout=datetime.timedelta(seconds=0.2 + 0.8 * i),
        )
        kills = _record_on_kill(op)
        run_id = f"dropped-{i}"
        error = _run_under_airflow_timeout(
            op, {"ti": FakeTI(), "run_id": run_id, "dag": FakeDag()}, _dropping_every_alarm(op)
        )
        completed = any(_completed(j) for j in _jobs_of_run(sandbox, run_id))
        assert (type(error).__name__, bool(kills), completed) == ("AirflowTaskTimeout", True, False), (
            i,
            error,
        )
        wait_until_sync(
            lambda run_id=run_id: not _jobs_of_run(sandbox, run_id), f"run {i}'s Job to be deleted", limit=60
        )
        _wait_threads_gone("jobwatch-wait-")


def test_deferred_timeout_deletes_the_job_and_raises_airflow_task_timeout(sandbox, kubeconfig):
    """Deferred, ``execution_timeout`` is the trigger's deadline. When it fires, the task resumes
    (through Airflow's resume path, under its timeout wrapper), fails with ``AirflowTaskTimeout`` as in
    the worker, and the Job is deleted as ``on_kill`` deletes it (here: Orphan, pods kept)."""
    task = functools.partial(
        _operator,
        OURS,
        kubeconfig,
        cmds=["sleep", "60"],
        deferrable=True,
        execution_timeout=datetime.timedelta(seconds=3),
        on_kill_propagation_policy="Orphan",
        on_kill_action="keep_pod",
    )
    op = task()
    ti = FakeTI()
    context = {"ti": ti, "run_id": "deferred-timeout", "dag": FakeDag()}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    name = ti.xcoms["job_name"]
    trigger = JobTrigger(**deferred.value.trigger.serialize()[1])  # what the triggerer runs
    import asyncio

    event = asyncio.run(asyncio.wait_for(trigger.wait(), 60))
    assert event["outcome"] == "timeout"
    assert sandbox.get_object("jobs", NS, name) is not None  # the trigger leaves the Job alone

    resumed = task()  # a fresh instance, as after a resume
    kills = _record_on_kill(resumed)
    error = _run_under_airflow_timeout(
        resumed,
        context,
        functools.partial(
            resumed.resume_execution, next_method="execute_complete", next_kwargs={"event": event}
        ),
    )
    assert isinstance(error, AirflowTaskTimeout), repr(error)
    assert "did not finish before its deadline" in str(error)
    assert kills  # execute_complete's stop, then Airflow's own on_kill (which finds it done)
    wait_until_sync(lambda: sandbox.get_object("jobs", NS, name) is None, "the Job's deletion")
    # Orphan + keep_pod: the Job went, its pod was left alone (on_kill's settings, not on_finish_action)
    [pod] = _live_pods_of(sandbox, name)
    resumed.client.delete_namespaced_pod(pod["metadata"]["name"], NS, grace_period_seconds=0)
    wait_until_sync(lambda: not _live_pods_of(sandbox, name), "the orphaned pod's deletion (test clean-up)")


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_fail_fast_deletes_the_job_that_would_run_for_ever(sandbox, kubeconfig, deferrable):
    """An unpullable image fails the task at once, but the Job itself never fails (its pod stays
    Pending, and a deleted pod is replaced): the Job is deleted as on_kill deletes it."""
    sandbox.set_image_pull_failure(r"^no-such-registry\.example/")
    op = _operator(
        OURS, kubeconfig, image="no-such-registry.example/app:1", cmds=["true"], deferrable=deferrable
    )
    ti = FakeTI()
    context = {"ti": ti, "run_id": f"fail-fast-{deferrable}", "dag": FakeDag()}
    with pytest.raises(AirflowException, match="ErrImagePull|ImagePullBackOff"):
        try:
            op.execute(context)
        except TaskDeferred as deferred:
            import asyncio

            trigger = JobTrigger(**deferred.trigger.serialize()[1])
            event = asyncio.run(asyncio.wait_for(trigger.wait(), 60))
            op.execute_complete(context, event)
    name = ti.xcoms["job_name"]
    wait_until_sync(
        lambda: sandbox.get_object("jobs", NS, name) is None and not _live_pods_of(sandbox, name),
        "the Job and its pods to be deleted",
        limit=60,
        state=lambda: (sandbox.get_object("jobs", NS, name), _live_pods_of(sandbox, name)),
    )


def test_api_unreachable_then_back_deletes_the_job(sandbox, kubeconfig):
    """Deferred: the API stays unreachable beyond ``api_failure_tolerance``, the trigger ends with
    ``error``; when the task resumes (the API back), the Job that still runs is deleted."""
    op = _operator(OURS, kubeconfig, cmds=["sleep", "60"], deferrable=True, api_failure_tolerance=1)
    ti = FakeTI()
    context = {"ti": ti, "run_id": "unreachable", "dag": FakeDag()}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    name = ti.xcoms["job_name"]
    trigger = JobTrigger(**deferred.value.trigger.serialize()[1])
    import asyncio

    async def wait_through_outage() -> dict[str, Any]:
        waiting = asyncio.create_task(trigger.wait())
        await asyncio.sleep(1.0)  # the trigger is watching; then the API goes away
        sandbox.start_outage()
        try:
            return await asyncio.wait_for(waiting, 60)
        finally:
            sandbox.end_outage()

    event = asyncio.run(wait_through_outage())
    assert (event["outcome"], event["reason"]) == ("error", "ApiUnreachable")
    assert sandbox.get_object("jobs", NS, name) is not None
    with pytest.raises(AirflowException, match="ApiUnreachable"):
        op.execute_complete(context, event)
    wait_until_sync(lambda: sandbox.get_object("jobs", NS, name) is None, "the Job's deletion", limit=60)


def test_a_job_that_failed_on_its_own_is_kept(sandbox, kubeconfig):
    """Only a Job that still runs is deleted: one that failed by itself stays (upstream's
    outcome: the Job is kept for ``ttl_seconds_after_finished``)."""
    op = _operator(OURS, kubeconfig, cmds=["sh", "-c", "exit 3"], backoff_limit=0)
    ti = FakeTI()
    with pytest.raises(AirflowException, match="BackoffLimitExceeded"):
        op.execute({"ti": ti, "run_id": "failed", "dag": FakeDag()})
    assert sandbox.get_object("jobs", NS, ti.xcoms["job_name"]) is not None

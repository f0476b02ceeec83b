"""A trigger handed to another triggerer must not kill the Job.

Driven through Airflow 3.3's own ``TriggerRunner.run_trigger`` / ``cancel_triggers``: triggerer A and
triggerer B each run an instance of the same serialized JobTrigger (as after an HA hand-over). When A
gives its instance up, Airflow cancels it with the *user action* message and calls ``on_kill``; the
task instance is still DEFERRED (B owns the trigger now), so the Job must survive and B must report its
success. A user's kill (the task instance left DEFERRED) still deletes the Job.

The one stand-in: ``SUPERVISOR_COMMS``, the triggerer subprocess's channel to its supervisor, answers
``GetTaskStates`` from a dict here (in a triggerer it is answered from the database, see
tests/e2e/test_ha_postgres.py for that end to end). The Kubernetes side is the sandbox over HTTP.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import BatchV1Api

from airflow_jobwatch.compat import AIRFLOW_V_3_3_PLUS
from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.registry import get_registry

from .conftest import NS, create_job, job_manifest, wait_until

pytestmark = pytest.mark.timeout(120)

#: A user's kill of a deferred task deletes the Job from ``JobTrigger.on_kill``, which only Airflow 3.3's
#: triggerer calls; the tests of that path skip on older releases with this reason.
needs_trigger_on_kill = pytest.mark.skipif(
    not AIRFLOW_V_3_3_PLUS,
    reason="Airflow 3.1/3.2's TriggerRunner.cancel_triggers() cancels a trigger without calling "
    "BaseTrigger.on_kill() (added in Airflow 3.3): there a user's kill leaves the Job to run",
)

DAG, RUN, TASK = "deferrable_jobs", "manual__2026-12-04", "wait_for_job"


class _Supervisor:
    """Answers the trigger runner's ``GetTaskStates`` like the triggerer's supervisor (from the DB)."""

    def __init__(self, state: str | None, *, delay: float = 0.0, gate: threading.Event | None = None) -> None:
        self.state = state
        self.delay = delay  # a busy supervisor: the answer takes this long
        self.gate = gate  # ... or until the test opens this gate
        self.asked: list[Any] = []

    def send(self, msg: Any) -> Any:
        import time

        from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult

        assert isinstance(msg, GetTaskStates), msg
        self.asked.append(msg)
        time.sleep(self.delay)  # called in a worker thread, as the trigger's sync SDK calls are
        if self.gate is not None:
            assert self.gate.wait(60), "the test never opened the supervisor's gate"
        if self.state == "unreachable":
            raise ConnectionError("supervisor socket closed")
        return TaskStatesResult(task_states={RUN: {TASK: self.state}})


def _task_instance() -> Any:
    from airflow_jobwatch.compat import TaskInstanceDTO

    return TaskInstanceDTO(
        id=uuid.uuid4(),
        task_id=TASK,
        dag_id=DAG,
        run_id=RUN,
        try_number=1,
        dag_version_id=uuid.uuid4(),
        map_index=-1,
        pool_slots=1,
        priority_weight=1,
        queue="default",  # required by Airflow 3.1/3.2's model
    )


def _start(
    runner: Any, trigger_id: int, classpath: str, kwargs: dict[str, Any], ti: Any
) -> asyncio.Task[Any]:
    """What ``TriggerRunner.create_triggers`` does with a RunTrigger workload, minus decryption."""
    assert classpath == "airflow_jobwatch.triggers.job.JobTrigger"
    trigger = JobTrigger(**kwargs)
    trigger.task_instance = ti
    trigger.trigger_id = trigger_id
    # Airflow 3.3's run_trigger takes (trigger_id, trigger, timeout_after, a persistence sequence), 3.1/3.2's
    # the first three; None is "none" for both.
    extra = (None, None) if AIRFLOW_V_3_3_PLUS else (None,)
    task = asyncio.create_task(runner.run_trigger(trigger_id, trigger, *extra))
    runner.triggers[trigger_id] = {
        "task": task,
        "is_watcher": False,
        "name": f"trigger {trigger_id}",
        "events": 0,
    }
    return task


async def _cancel_like_update_triggers(runner: Any, trigger_id: int, task: asyncio.Task[Any]) -> None:
    """``update_triggers()`` put the id in ``cancelling_triggers``; the runner receives it as to_cancel."""
    runner.to_cancel.append(trigger_id)
    await runner.cancel_triggers()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _job_deleted(api: Any, name: str) -> bool:
    jobs = await BatchV1Api(api).list_namespaced_job(NS)
    return all(j.metadata.name != name or j.metadata.deletion_timestamp for j in jobs.items)


@pytest.mark.parametrize("state", ["deferred", "unreachable"])
async def test_handover_keeps_the_job_and_the_new_owner_reports_success(
    sandbox: Any,
    k8s_async_client: Any,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    state: str,
) -> None:
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.sdk.execution_time import task_runner

    supervisor = _Supervisor(state)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)
    job = await create_job(k8s_async_client, job_manifest("handed-over", ["sh", "-c", "sleep 3"]))
    classpath, kwargs = JobTrigger(
        "handed-over",
        NS,
        config_file=str(kubeconfig),
        job_uid=job["metadata"]["uid"],
        delete_on_kill=True,  # as KubernetesJobOperator always sets it
        poll_interval=1.0,
    ).serialize()
    ti = _task_instance()
    a, b = TriggerRunner(), TriggerRunner()
    task_a = _start(a, 7, classpath, kwargs, ti)
    task_b = _start(b, 7, classpath, kwargs, ti)
    await wait_until(lambda: sum(get_registry().active().values()) == 2, what="both instances to subscribe")

    await _cancel_like_update_triggers(a, 7, task_a)  # A recovered and gives up what B owns now
    assert not await _job_deleted(k8s_async_client, "handed-over")
    if AIRFLOW_V_3_3_PLUS:  # Airflow 3.3 calls on_kill: it asks, and keeps the Job
        assert supervisor.asked, "on_kill must look at the task instance before deleting anything"
        log = capsys.readouterr().out  # the triggerer's structlog output
        assert "Not deleting Job default/handed-over on kill" in log
        assert ("handed over" if state == "deferred" else "could not be read") in log
    else:  # Airflow 3.1/3.2 only cancel the trigger: nothing of the cancel path may touch the Job
        assert not supervisor.asked

    await asyncio.wait_for(task_b, 60)
    [entry] = list(b.events)
    # Airflow 3.3 queues TriggerEventEntry objects, 3.1/3.2 (trigger_id, event) tuples
    trigger_id, event = (entry.trigger_id, entry.event) if AIRFLOW_V_3_3_PLUS else entry
    assert trigger_id == 7 and event.payload["status"] == "success", event.payload
    assert not a.events


@needs_trigger_on_kill
@pytest.mark.parametrize("state", ["failed", "success", None])
async def test_a_users_kill_still_deletes_the_job(
    sandbox: Any,
    k8s_async_client: Any,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    state: str | None,
) -> None:
    """Mark failed / mark success / clear (state None): the task left DEFERRED, the Job goes."""
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.sdk.execution_time import task_runner

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", _Supervisor(state), raising=False)
    job = await create_job(k8s_async_client, job_manifest("killed", ["sh", "-c", "sleep 600"]))
    classpath, kwargs = JobTrigger(
        "killed", NS, config_file=str(kubeconfig), job_uid=job["metadata"]["uid"], delete_on_kill=True
    ).serialize()
    runner = TriggerRunner()
    task = _start(runner, 8, classpath, kwargs, _task_instance())
    await wait_until(lambda: sum(get_registry().active().values()) == 1, what="the trigger to subscribe")
    await _cancel_like_update_triggers(runner, 8, task)
    await wait_until(lambda: _job_deleted(k8s_async_client, "killed"), what="the Job to be deleted")
    assert f"the task left DEFERRED (state {state!r}): a user's kill" in capsys.readouterr().out
    assert not runner.events


@needs_trigger_on_kill
async def test_a_users_kill_survives_the_runners_repeated_cancels(
    sandbox: Any, k8s_async_client: Any, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor re-sends its cancel list every loop until the trigger has finished, and each one
    cancels the trigger's task again, while on_kill is still reading the task's state (slow on a busy
    triggerer: 14-18 s were seen end to end). The Job is deleted all the same."""
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.sdk.execution_time import task_runner

    supervisor = _Supervisor("failed", delay=1.5)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)
    job = await create_job(k8s_async_client, job_manifest("killed-slowly", ["sh", "-c", "sleep 600"]))
    classpath, kwargs = JobTrigger(
        "killed-slowly", NS, config_file=str(kubeconfig), job_uid=job["metadata"]["uid"], delete_on_kill=True
    ).serialize()
    runner = TriggerRunner()
    task = _start(runner, 9, classpath, kwargs, _task_instance())
    await wait_until(lambda: sum(get_registry().active().values()) == 1, what="the trigger to subscribe")
    for _ in range(4):  # what the runner's loop does while the id stays in the supervisor's cancel list
        runner.to_cancel.append(9)
        await runner.cancel_triggers()
        await asyncio.sleep(0.3)
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: _job_deleted(k8s_async_client, "killed-slowly"), what="the Job to be deleted")


@needs_trigger_on_kill
async def test_on_kill_stops_absorbing_cancels_at_on_kill_timeout_and_the_kill_still_completes(
    sandbox: Any, k8s_async_client: Any, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repeated cancels are absorbed only within ``[triggerer] on_kill_timeout``: after it the trigger
    ends although the task's state has not been read yet, and the kill's work finishes on its own."""
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.sdk.execution_time import task_runner

    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", "1")
    gate = threading.Event()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", _Supervisor("failed", gate=gate), raising=False)
    job = await create_job(k8s_async_client, job_manifest("killed-late", ["sh", "-c", "sleep 600"]))
    classpath, kwargs = JobTrigger(
        "killed-late", NS, config_file=str(kubeconfig), job_uid=job["metadata"]["uid"], delete_on_kill=True
    ).serialize()
    runner = TriggerRunner()
    task = _start(runner, 10, classpath, kwargs, _task_instance())
    await wait_until(lambda: sum(get_registry().active().values()) == 1, what="the trigger to subscribe")

    async def cancel_every_loop() -> None:
        while not task.done():
            runner.to_cancel.append(10)
            await runner.cancel_triggers()
            await asyncio.sleep(0.3)

    canceller = asyncio.ensure_future(cancel_every_loop())
    with pytest.raises(asyncio.CancelledError):
        await task  # ends while the supervisor still has not answered: the runner is not held
    await canceller
    assert not await _job_deleted(k8s_async_client, "killed-late")
    gate.set()  # the supervisor answers "failed" at last
    await wait_until(lambda: _job_deleted(k8s_async_client, "killed-late"), what="the detached kill")


async def _job_ended(api: Any, name: str) -> bool:
    job = await BatchV1Api(api).read_namespaced_job(name, NS)
    return any(c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or [])


@pytest.mark.parametrize("command", ["true", "exit 3"], ids=["complete", "failed"])
async def test_a_kill_never_deletes_a_job_that_has_ended(
    sandbox: Any, k8s_async_client: Any, kubeconfig: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A cancellation that comes after the Job ended (a lagging triggerer's instance, cancelled after
    the new owner fired and the task left DEFERRED) keeps the Job and its pods: the resumed task reads
    its logs and result from them."""
    from kubernetes_asyncio.client import CoreV1Api

    name = f"ended-{'ok' if command == 'true' else 'fail'}"
    job = await create_job(k8s_async_client, job_manifest(name, ["sh", "-c", command], backoff_limit=0))
    await wait_until(lambda: _job_ended(k8s_async_client, name), what="the Job to end")
    uid = job["metadata"]["uid"]
    pods_before = await CoreV1Api(k8s_async_client).list_namespaced_pod(
        NS, label_selector=f"controller-uid={uid}"
    )
    assert pods_before.items
    trigger = JobTrigger(
        name, NS, config_file=str(kubeconfig), job_uid=uid, delete_on_kill=True, delete_pods_on_kill=True
    )
    await trigger.on_kill()  # no task instance: the caller's own request, which deletes a running Job
    kept = await BatchV1Api(k8s_async_client).read_namespaced_job(name, NS)
    assert kept.metadata.deletion_timestamp is None
    pods = await CoreV1Api(k8s_async_client).list_namespaced_pod(NS, label_selector=f"controller-uid={uid}")
    assert [p.metadata.name for p in pods.items] == [p.metadata.name for p in pods_before.items]
    assert all(p.metadata.deletion_timestamp is None for p in pods.items)
    assert f"Not deleting Job {NS}/{name} on kill: it has already ended" in capsys.readouterr().out

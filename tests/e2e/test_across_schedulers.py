"""A task's launch survives a change of scheduler: an HA flap, and a restart while a resumed task waits.

Real api-server, dag-processor, triggerer and schedulers on PostgreSQL (``tests/support/postgres.py``), all
on JobWatchExecutor, worker pods run by the sandbox. The tasks' pods run until the test releases them
(``tests/e2e/dags_flap``), so a task can only succeed through the scheduler that must take it over.
What is asserted is what a user sees in Airflow's database: task states, try numbers, which
scheduler holds each task, and no earlier try recorded in ``task_instance_history``.

* HA flap: scheduler A is stopped (SIGSTOP) for longer than ``scheduler_health_check_threshold``, so
  scheduler B adopts its four running tasks; A resumes (SIGCONT), then B is SIGKILLed while the pods
  still run, and A must adopt them back. Every task succeeds once, on try 1, held by A.
* Restart during resume: a task defers to a trigger that fires at once, so it is queued again on the
  same try while its first pod still runs; a namespace ResourceQuota (pods: 1) that this pod fills
  keeps the new pod from being created. The scheduler is restarted in that window (SIGTERM, then a
  new scheduler), the quota is lifted and the first pod released: the task succeeds once, on try 1.
* Kill during resume: the same deferral; the resumed launch's pod exists but waits in an init container
  while the first pod still runs. The scheduler is SIGKILLed, the resumed task runs, and a new scheduler
  adopts both pods: the resumed one as the task's current launch, the first as an earlier launch. The
  first pod then ends while the resumed task runs: its end is not reported (Airflow would fail the running
  task as killed externally), and the task succeeds once, on try 1, one pod per launch. On Airflow that does not
  pre-assign the launch id (3.1) the database names the resumed launch only because the executor reports
  each launch's id as it queues it (the killed scheduler never saw the resumed pod run).
* Stalled owner: A queues four tasks while a ResourceQuota refuses every pod, and is stopped (SIGSTOP) with
  its creates backing off; B adopts the queued tasks and launches them; A resumes as the quota is lifted.
  A's retries find, in the database, that the tasks are no longer its own: one pod per try, each task
  succeeds once on try 1.
"""

from __future__ import annotations

import datetime
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.stack import AirflowStack, wait_until

from airflow_jobwatch.executors.pods import LAUNCH_ANNOTATION

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

DAGS = Path(__file__).parent / "dags_flap"
# [scheduler] scheduler_health_check_threshold, seconds. On a loaded 2-core machine a scheduler's heartbeat
# lags up to ~16 s (at start-up above all); below that, a live scheduler is taken for dead by its peer, or
# by itself, and its tasks are adopted or reset behind the test's back.
HEALTH_CHECK_THRESHOLD = 20


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("release")


@pytest.fixture(scope="module")
def stack(postgres: Any, release_dir: Path) -> Iterator[AirflowStack]:
    # One scheduler ("scheduler", A) to begin with: the HA test starts B ("scheduler#2") once A holds
    # every task, so that which scheduler launched them is known.
    with AirflowStack(
        processes=("api-server", "dag-processor", "scheduler", "triggerer"),
        dags_folder=DAGS,
        dag_ids=["ha_flap", "restart_during_resume", "kill_during_resume"],
        database_url=postgres.url,
        config={
            # Pods are kept, so the test can show each task's pods afterwards.
            ("kubernetes_executor", "delete_worker_pods"): "False",
            ("kubernetes_executor", "delete_worker_pods_on_failure"): "False",
            ("scheduler", "scheduler_health_check_threshold"): str(HEALTH_CHECK_THRESHOLD),
            ("scheduler", "orphaned_tasks_check_interval"): "2",
            # A task instance adopted while queued, whose pod was never created, is requeued by Airflow
            # (same try) after this timeout, checked often. Not lower: on a loaded machine a worker pod
            # takes over 30 s to report its task running, and a task requeued meanwhile gets a new pod.
            ("scheduler", "task_queued_timeout"): "90",
            ("scheduler", "task_queued_timeout_check_interval"): "5",
        },
        env={"JOBWATCH_E2E_RELEASE_DIR": str(release_dir)},
        start_timeout=180,
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),  # keep AIRFLOW_HOME (logs) for debugging
    ) as s:
        yield s


def _signal_group(stack: AirflowStack, name: str, sig: int) -> None:
    """Send ``sig`` to the process group of ``name`` (the scheduler and its watcher), without waiting."""
    os.killpg(stack.procs[name].pid, sig)


def _tis(stack: AirflowStack, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    """``{task_id[map_index]: {state, try_number, queued_by_job_id, next_method}}`` from the database."""
    rows = stack.query(
        "SELECT task_id, map_index, state, try_number, queued_by_job_id, next_method FROM task_instance "
        "WHERE dag_id = ? AND run_id = ?",
        (dag_id, run_id),
    )
    return {
        f"{task_id}[{map_index}]" if map_index >= 0 else task_id: {
            "state": state,
            "try_number": try_number,
            "queued_by_job_id": queued_by,
            "next_method": next_method,
        }
        for task_id, map_index, state, try_number, queued_by, next_method in rows
    }


def _history(stack: AirflowStack, dag_id: str, run_id: str) -> list[tuple[Any, ...]]:
    """The earlier tries Airflow recorded for the run's task instances (a reset or a retry adds one)."""
    return stack.query(
        "SELECT task_id, map_index, try_number, state FROM task_instance_history WHERE dag_id = ? AND run_id = ?",
        (dag_id, run_id),
    )


def _pods(stack: AirflowStack, run_id: str) -> list[dict[str, Any]]:
    """The run's worker pods: name, task, try, phase and the scheduler job named by its worker label."""
    out = []
    for p in stack.admin.objects("pods", "default"):
        ann = p["metadata"].get("annotations") or {}
        if ann.get("run_id") != run_id:
            continue
        out.append(
            {
                "name": p["metadata"]["name"],
                "task": f"{ann.get('task_id')}[{ann.get('map_index')}]",
                "try": ann.get("try_number"),
                "phase": p["status"].get("phase"),
                "launch": ann.get(LAUNCH_ANNOTATION),
                "worker": (p["metadata"].get("labels") or {}).get("airflow-worker"),
                "done": (p["metadata"].get("labels") or {}).get("airflow_executor_done"),
                "ended": [
                    f"{cs['name']}: exit {t.get('exitCode')}: {(t.get('message') or '')[-500:]}"
                    for cs in p["status"].get("containerStatuses") or []
                    if (t := (cs.get("state") or {}).get("terminated"))
                ],
            }
        )
    return out


def _all_running(stack: AirflowStack, run_id: str, count: int) -> list[dict[str, Any]] | None:
    """The run's ``count`` pods once all run; fails at once (with their last words) if one failed."""
    pods = _pods(stack, run_id)
    failed = [p for p in pods if p["phase"] == "Failed"]
    assert not failed, f"a worker pod failed before the test released it: {failed}"
    return pods if len(pods) == count and all(p["phase"] == "Running" for p in pods) else None


def _heartbeat(stack: AirflowStack, job_id: int) -> datetime.datetime | None:
    rows = stack.query("SELECT latest_heartbeat FROM job WHERE id = ?", (job_id,))
    return rows[0][0] if rows else None


def _new_scheduler_job(stack: AirflowStack, name: str, after: int = 0) -> int:
    """The job id of ``name``'s latest start once it runs (its executor logs it at start)."""
    return int(
        wait_until(
            lambda: (job := stack.scheduler_job_id(name)) is not None and job > after and job,
            timeout=120,
            what=f"{name} to start its executor",
        )
    )


def test_tasks_adopted_away_in_an_ha_flap_are_adopted_back_and_succeed_on_try_1(
    stack: AirflowStack, release_dir: Path
) -> None:
    dag_id = "ha_flap"
    a = _new_scheduler_job(stack, "scheduler")
    run_id = stack.trigger_dag(dag_id)
    wait_until(
        lambda: (
            (tis := _tis(stack, dag_id, run_id)).keys() >= {f"held[{i}]" for i in range(4)}
            and all(t["queued_by_job_id"] == a for k, t in tis.items() if k.startswith("held"))
        ),
        timeout=120,
        what=f"scheduler A (job {a}) to queue the 4 held tasks",
    )
    stack.start("scheduler#2")
    b = _new_scheduler_job(stack, "scheduler#2", after=a)
    pods = wait_until(
        lambda: (
            (pods := _all_running(stack, run_id, 4))
            and all(t["state"] == "running" for t in _tis(stack, dag_id, run_id).values())
            and pods
        ),
        timeout=180,
        what="the 4 held tasks running in their pods",
    )
    launched = sorted(p["name"] for p in pods)  # the pods A launched: they must run through the flap
    try:
        _signal_group(stack, "scheduler", signal.SIGSTOP)
        try:
            # B finds A's heartbeat older than the threshold, and adopts A's running tasks.
            wait_until(
                lambda: all(t["queued_by_job_id"] == b for t in _tis(stack, dag_id, run_id).values()),
                timeout=HEALTH_CHECK_THRESHOLD + 60,
                what=f"scheduler B (job {b}) to adopt the tasks of the stopped A",
            )
        finally:
            resumed_at = datetime.datetime.now(datetime.UTC)
            _signal_group(stack, "scheduler", signal.SIGCONT)
        # A runs again: its loop heartbeats for a few seconds, time for its watcher to see the pods
        # relabelled to B before B goes away.
        wait_until(
            lambda: (
                (beat := _heartbeat(stack, a)) is not None
                and beat > resumed_at + datetime.timedelta(seconds=5)
            ),
            timeout=60,
            what="scheduler A to heartbeat again after SIGCONT",
        )
        still_running = _pods(stack, run_id)
        assert sorted(p["name"] for p in still_running) == launched, still_running
        assert all(p["phase"] == "Running" and p["worker"] == str(b) for p in still_running), still_running
    finally:
        stack.kill("scheduler#2", signal.SIGKILL)  # B and its watcher, while every pod still runs
    # A finds B's heartbeat older than the threshold and takes the tasks back: adopted (held by A,
    # still running on try 1) or, wrongly, reset for a new try.
    wait_until(
        lambda: all(
            (t["queued_by_job_id"] == a and t["state"] == "running") or t["try_number"] != 1
            for t in _tis(stack, dag_id, run_id).values()
        ),
        timeout=HEALTH_CHECK_THRESHOLD + 60,
        what=f"scheduler A (job {a}) to take the tasks back from the killed B",
    )
    (release_dir / dag_id).touch()
    state = stack.wait_for_run(dag_id, run_id, timeout=120)
    tis = _tis(stack, dag_id, run_id)
    pods = _pods(stack, run_id)
    assert state == "success", (tis, pods)
    assert len(tis) == 4
    assert all(t["state"] == "success" and t["try_number"] == 1 for t in tis.values()), (tis, pods)
    assert all(t["queued_by_job_id"] == a for t in tis.values()), (a, b, tis)
    assert _history(stack, dag_id, run_id) == [], "a task was reset or retried"
    # One pod per task: the one A launched, which ran through the flap.
    assert sorted(p["name"] for p in pods) == launched, pods
    # A task's state is written by its worker before the worker's process (the pod) exits.
    wait_until(
        lambda: all(p["phase"] == "Succeeded" for p in _pods(stack, run_id)),
        timeout=60,
        what="every pod to succeed",
    )


def test_a_task_resumed_while_a_quota_blocks_its_pod_survives_a_scheduler_restart(
    stack: AirflowStack, release_dir: Path
) -> None:
    dag_id, task_id = "restart_during_resume", "resumes_at_once"
    stack.kill("scheduler#2", signal.SIGKILL)  # one scheduler queues the task, and is the one restarted
    # The previous test leaves no pod running; the quota must count this task's first pod only.
    wait_until(
        lambda: all(
            p["status"].get("phase") in ("Succeeded", "Failed")
            for p in stack.admin.objects("pods", "default")
        ),
        timeout=60,
        what="no worker pod left running",
    )
    stack.admin.fault("set_pod_quota", namespace="default", pods=1)
    try:
        old = _new_scheduler_job(stack, "scheduler")
        run_id = stack.trigger_dag(dag_id)
        first = wait_until(
            lambda: _all_running(stack, run_id, 1),
            timeout=180,
            what="the first pod to run",
        )[0]
        creates = stack.admin.counters().get("create pods", 0)
        # The task defers, the trigger fires, the scheduler queues it again on try 1 and tries to
        # create its new pod, which the quota refuses while the first pod (its sidecar) still runs.
        wait_until(
            lambda: (
                (ti := _tis(stack, dag_id, run_id).get(task_id))
                and ti["state"] == "queued"
                and ti["next_method"] is not None
            ),
            timeout=120,
            what="the task to be queued again after its deferral",
        )
        assert _tis(stack, dag_id, run_id)[task_id]["queued_by_job_id"] == old
        wait_until(
            lambda: stack.admin.counters().get("create pods", 0) > creates,
            timeout=60,
            what="the resumed launch's pod create (refused by the quota)",
        )
        assert [p["name"] for p in _pods(stack, run_id)] == [first["name"]]
        assert stack.admin.fault("pod_quota_usage", namespace="default")["status"]["used"]["pods"] == "1"
        # The scheduler is restarted in that window: the new one must take the queued task over.
        stack.kill("scheduler", signal.SIGTERM, wait=60)
        stack.start("scheduler")
        new = _new_scheduler_job(stack, "scheduler", after=old)
        wait_until(
            lambda: (ti := _tis(stack, dag_id, run_id).get(task_id)) and ti["queued_by_job_id"] != old,
            timeout=HEALTH_CHECK_THRESHOLD + 90,
            what=f"the new scheduler (job {new}) to take the task over",
        )
    finally:
        stack.admin.fault("set_pod_quota", namespace="default", pods=None)
    (release_dir / dag_id).touch()  # the first pod ends now, after the new scheduler took over
    state = stack.wait_for_run(dag_id, run_id, timeout=150)
    ti = _tis(stack, dag_id, run_id)[task_id]
    pods = _pods(stack, run_id)
    assert state == "success", (ti, pods)
    assert ti["state"] == "success" and ti["try_number"] == 1, (ti, pods)
    assert _history(stack, dag_id, run_id) == [], "the task was reset or failed on the way"
    assert stack.audit_events(dag_id, run_id) == [], "the scheduler saw an end for a queued task"
    assert "resumed after deferral (try 1)" in stack.task_log(dag_id, run_id, task_id, 1)


def test_a_resumed_task_whose_scheduler_is_killed_before_its_pod_starts_succeeds_once(
    stack: AirflowStack, release_dir: Path
) -> None:
    dag_id, task_id = "kill_during_resume", "resumes_and_holds"
    if "scheduler#2" in stack.procs and stack.procs["scheduler#2"].poll() is None:
        stack.kill("scheduler#2", signal.SIGKILL)  # one scheduler launches both pods, and is the one killed
    old = _new_scheduler_job(stack, "scheduler")
    run_id = stack.trigger_dag(dag_id)

    # The task runs in its first pod and defers; the trigger fires at once and the task is queued again on
    # try 1. Its second pod waits in its init container (the gate) while the first pod's sidecar keeps that
    # pod running after its task container exited.
    def both_launches() -> tuple[dict[str, Any], dict[str, Any]] | None:
        ti = _tis(stack, dag_id, run_id).get(task_id)
        if not ti or ti["state"] != "queued" or ti["next_method"] is None:
            return None
        pods = _pods(stack, run_id)
        assert not [p for p in pods if p["phase"] == "Failed"], pods
        first = [
            p for p in pods if p["phase"] == "Running" and any(e.startswith("base:") for e in p["ended"])
        ]
        resumed = [p for p in pods if p["phase"] == "Pending"]
        return (first[0], resumed[0]) if len(pods) == 2 and first and resumed else None

    first, resumed = wait_until(
        both_launches, timeout=180, what="the resumed launch's pod waiting beside the first pod"
    )
    assert first["launch"] != resumed["launch"] and None not in (first["launch"], resumed["launch"]), (
        first,
        resumed,
    )
    try:
        stack.kill("scheduler", signal.SIGKILL)  # the scheduler and its watcher, before the second pod starts
        # The resumed pod starts at once and its task runs with no scheduler to see it, so that the task does not
        # wait queued through the restart and the adoption ([scheduler] task_queued_timeout would requeue it).
        (release_dir / f"{dag_id}.gate").touch()
        stack.start("scheduler")
        new = _new_scheduler_job(stack, "scheduler", after=old)
        wait_until(
            lambda: (ti := _tis(stack, dag_id, run_id).get(task_id)) and ti["state"] == "running",
            timeout=120,
            what="the resumed task to run in its pod",
        )
        wait_until(
            lambda: (
                (ti := _tis(stack, dag_id, run_id).get(task_id))
                and ti["queued_by_job_id"] == new
                and all(p["worker"] == str(new) for p in _pods(stack, run_id))
            ),
            timeout=HEALTH_CHECK_THRESHOLD + 90,
            what=f"the new scheduler (job {new}) to adopt the task and both its pods",
        )
        # The first pod ends while the resumed task runs: the adopter sees its end (labels it done) and must
        # not report it as the task's.
        (release_dir / f"{dag_id}.sidecar").touch()
        wait_until(
            lambda: any(p["name"] == first["name"] and p["done"] == "True" for p in _pods(stack, run_id)),
            timeout=60,
            what=f"the adopter to see the end of the first pod {first['name']}",
        )
        ti = _tis(stack, dag_id, run_id)[task_id]
        assert ti["state"] == "running", (ti, _pods(stack, run_id), stack.audit_events(dag_id, run_id))
        (release_dir / dag_id).touch()
        state = stack.wait_for_run(dag_id, run_id, timeout=150)
        ti = _tis(stack, dag_id, run_id)[task_id]
        pods = _pods(stack, run_id)
        assert state == "success", (ti, pods)
        assert ti["state"] == "success" and ti["try_number"] == 1, (ti, pods)
        assert ti["queued_by_job_id"] == new, (old, new, ti)
        assert _history(stack, dag_id, run_id) == [], "the task was reset or failed on the way"
        assert stack.audit_events(dag_id, run_id) == [], "the scheduler saw an end for a running task"
        # One pod per launch: the two that ran through the kill.
        assert sorted(p["name"] for p in pods) == sorted([first["name"], resumed["name"]]), pods
        # The database names the resumed launch (pre-assigned by the scheduler, or reported by the executor).
        assert _launch_in_database(stack, dag_id, run_id, task_id) == resumed["launch"], (first, resumed)
        assert "resumed after deferral (try 1)" in stack.task_log(dag_id, run_id, task_id, 1)
    finally:
        # Whatever failed, no pod of this run stays held for the next test on this stack.
        for hold in (".gate", ".sidecar", ""):
            (release_dir / f"{dag_id}{hold}").touch()


def _launch_in_database(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> str | None:
    rows = stack.query(
        "SELECT external_executor_id FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
        (dag_id, run_id, task_id),
    )
    return rows[0][0] if rows else None


def test_a_stopped_scheduler_whose_creates_a_quota_held_creates_nothing_once_its_tasks_are_adopted(
    stack: AirflowStack, release_dir: Path
) -> None:
    """A queues four tasks while a ResourceQuota refuses every pod; A is stopped (SIGSTOP) with its creates
    backing off, B adopts the queued tasks and launches them itself; A resumes while the quota is lifted.
    Each task runs in one pod and succeeds once, on try 1: A's retries find the tasks no longer its own."""
    dag_id = "ha_flap"
    if "scheduler#2" in stack.procs and stack.procs["scheduler#2"].poll() is None:
        stack.kill("scheduler#2", signal.SIGKILL)
    wait_until(
        lambda: all(
            p["status"].get("phase") in ("Succeeded", "Failed")
            for p in stack.admin.objects("pods", "default")
        ),
        timeout=60,
        what="no worker pod left running",
    )
    stack.admin.fault("set_pod_quota", namespace="default", pods=0)
    try:
        a = _new_scheduler_job(stack, "scheduler")
        creates = stack.admin.counters().get("create pods", 0)
        run_id = stack.trigger_dag(dag_id)
        wait_until(
            lambda: (
                (tis := _tis(stack, dag_id, run_id)).keys() >= {f"held[{i}]" for i in range(4)}
                and all(t["queued_by_job_id"] == a and t["state"] == "queued" for t in tis.values())
                and stack.admin.counters().get("create pods", 0) >= creates + 4
            ),
            timeout=120,
            what=f"scheduler A (job {a}) to queue the 4 tasks and have their creates refused",
        )
        _signal_group(stack, "scheduler", signal.SIGSTOP)
        try:
            stack.start("scheduler#2")
            b = _new_scheduler_job(stack, "scheduler#2", after=a)
            wait_until(
                lambda: all(t["queued_by_job_id"] == b for t in _tis(stack, dag_id, run_id).values()),
                timeout=HEALTH_CHECK_THRESHOLD + 90,
                what=f"scheduler B (job {b}) to adopt the queued tasks of the stopped A",
            )
        finally:
            _signal_group(stack, "scheduler", signal.SIGCONT)
    finally:
        stack.admin.fault("set_pod_quota", namespace="default", pods=None)
    (release_dir / dag_id).touch()
    state = stack.wait_for_run(dag_id, run_id, timeout=240)
    tis = _tis(stack, dag_id, run_id)
    pods = _pods(stack, run_id)
    assert state == "success", (tis, pods)
    assert all(t["state"] == "success" and t["try_number"] == 1 for t in tis.values()), (tis, pods)
    by_task: dict[str, list[str]] = {}
    for p in pods:
        by_task.setdefault(p["task"], []).append(p["name"])
    assert sorted(by_task) == [f"held[{i}]" for i in range(4)] and all(
        len(n) == 1 for n in by_task.values()
    ), (
        "a try ran in more than one pod",
        pods,
    )
    assert _history(stack, dag_id, run_id) == [], "a task was reset or failed on the way"

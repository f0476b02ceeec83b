"""HA on PostgreSQL: two schedulers and two triggerers share one metadata database, as in production.

A PostgreSQL server is started from Debian's ``postgresql`` package (``tests/support/postgres.py``;
``.ci/run`` installs it). One stack runs api-server, dag-processor, two schedulers and two triggerers,
all on JobWatchExecutor, against the sandbox. Worker pods are kept (``delete_worker_pods = False``) so
the test can count them afterwards.

* SIGKILL the scheduler (and its watcher) whose pods run, early in their 30 s sleep: the other adopts
  them (Airflow's orphan detection, then ``try_adopt_task_instances``) and relabels them its own; every
  task ends ``success``, each task whose pod existed at the kill on its first try, and each task got
  one pod, for the try it ran.
* SIGKILL one triggerer while 30 JobTriggers wait: the other takes them over; every deferred task
  ends ``success`` exactly once, on its first try.
* Both at once, in a 410 storm (a one-change watch history and every watch dropped every 2 s): SIGKILL a
  scheduler and a triggerer while 10 deferred Jobs and then 10 worker pods run; the survivors adopt and take
  over, every task ends ``success`` exactly once, and the watches really met 410 Expired.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.stack import AirflowStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

DAGS = Path(__file__).parent / "dags_ha"


@pytest.fixture(scope="module")
def stack(postgres: Any) -> Iterator[AirflowStack]:
    with AirflowStack(
        processes=("api-server", "dag-processor", "scheduler", "scheduler#2", "triggerer", "triggerer#2"),
        dags_folder=DAGS,
        dag_ids=["ha_sleepers", "ha_deferred"],
        database_url=postgres.url,
        parallelism=32,
        config={
            ("kubernetes_executor", "delete_worker_pods"): "False",
            ("kubernetes_executor", "delete_worker_pods_on_failure"): "False",
            ("triggerer", "job_heartbeat_sec"): "1",
            ("triggerer", "triggerer_health_check_threshold"): "6",
        },
        start_timeout=180,
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),  # keep AIRFLOW_HOME (logs) for debugging
    ) as s:
        yield s


def _pods(stack: AirflowStack, run_id: str) -> list[dict[str, Any]]:
    return [
        p
        for p in stack.admin.objects("pods", "default")
        if (p["metadata"].get("annotations") or {}).get("run_id") == run_id
    ]


def _map_index(task_key: str) -> str:
    """The map index of a ``task_states`` key such as ``sleeper[7]``, as pod annotations spell it."""
    return task_key.split("[")[1].rstrip("]")


def _pod_summaries(pods: list[dict[str, Any]], tasks: dict[str, Any]) -> list[dict[str, Any]]:
    """What a failure message needs of the pods of these tasks (``sleeper[3]``): owner, try, phase."""
    out = []
    for p in pods:
        ann, labels = p["metadata"]["annotations"], p["metadata"].get("labels") or {}
        if f"{ann.get('task_id')}[{ann.get('map_index')}]" in tasks:
            out.append(
                {
                    "name": p["metadata"]["name"],
                    "try": ann.get("try_number"),
                    "worker": labels.get("airflow-worker"),
                    "done": labels.get("airflow_executor_done"),
                    "phase": p["status"].get("phase"),
                    "created": p["metadata"].get("creationTimestamp"),
                }
            )
    return out


def test_scheduler_sigkilled_while_30_tasks_run(stack: AirflowStack) -> None:
    run_id = stack.trigger_dag("ha_sleepers", conf={"tasks": 30, "seconds": 30})

    def sleeper_pods() -> list[dict[str, Any]]:
        return [p for p in _pods(stack, run_id) if p["metadata"]["annotations"].get("task_id") == "sleeper"]

    def running_by_owner() -> Counter[str] | None:
        owners = Counter(
            str(p["metadata"]["labels"].get("airflow-worker"))
            for p in sleeper_pods()
            if p["status"].get("phase") == "Running"
        )
        return owners if sum(owners.values()) >= 10 else None

    # The DAG runs at most 16 of its 30 tasks at once, and one scheduler usually queues them all in one
    # loop. Kill the scheduler whose pods are running, early in their sleep, so that its peer must adopt
    # them (after [scheduler] scheduler_health_check_threshold = 6 s), not find them finished.
    owners = wait_until(running_by_owner, timeout=180, what="10 sleeper pods running")
    victim_job = owners.most_common(1)[0][0]
    ids = {name: stack.scheduler_job_id(name) for name in ("scheduler", "scheduler#2")}
    victim = next((name for name, job in ids.items() if str(job) == victim_job), None)
    assert victim is not None, (owners, ids)
    (survivor,) = {"scheduler", "scheduler#2"} - {victim}
    orphaned = {
        p["metadata"]["name"]
        for p in sleeper_pods()
        if p["metadata"]["labels"]["airflow-worker"] == victim_job
    }
    # A task instance the victim queued but whose pod it had not yet created cannot be adopted: Airflow
    # resets it and it runs a second try, rightly. Every task whose pod existed at the kill must be
    # adopted instead: it runs once, on its first try.
    had_pod = {p["metadata"]["annotations"].get("map_index") for p in sleeper_pods()}
    stack.kill(victim, signal.SIGKILL)  # the process group: scheduler and its watcher child
    state = stack.wait_for_run("ha_sleepers", run_id, timeout=300)
    states = stack.task_states("ha_sleepers", run_id)
    sleepers = {k: v for k, v in states.items() if k.startswith("sleeper")}
    assert state == "success", states
    assert len(sleepers) == 30
    assert all(v["state"] == "success" for v in sleepers.values()), sleepers
    pods = sleeper_pods()
    not_once = {k: v for k, v in sleepers.items() if _map_index(k) in had_pod and v["try_number"] != 1}
    assert not not_once, (not_once, _pod_summaries(pods, not_once))
    # Each task got one pod, for the try it ran (a reset task's first try never had one), never two.
    per_try = Counter(
        (p["metadata"]["annotations"].get("map_index"), p["metadata"]["annotations"].get("try_number"))
        for p in pods
    )
    tries = {(_map_index(k), str(v["try_number"])) for k, v in sleepers.items()}
    assert set(per_try) == tries and set(per_try.values()) == {1}, (per_try, tries)
    # The survivor adopted the victim's pods: relabelled to its own job (a pod that ended before the
    # adoption is only cleaned up, its task having reported its own end).
    survivor_job = str(stack.scheduler_job_id(survivor))
    adopted = [
        p["metadata"]["name"]
        for p in pods
        if p["metadata"]["name"] in orphaned and p["metadata"]["labels"].get("airflow-worker") == survivor_job
    ]
    assert adopted, (orphaned, victim_job, survivor_job, _pod_summaries(pods, sleepers))
    # Every pod was marked done, by whichever scheduler launched or adopted it.
    wait_until(
        lambda: all(p["metadata"]["labels"].get("airflow_executor_done") == "True" for p in sleeper_pods()),
        timeout=60,
        what="every sleeper pod labelled done",
    )
    stack.start(victim)  # back to two schedulers for the next test


def test_triggerer_sigkilled_while_30_job_triggers_wait(stack: AirflowStack) -> None:
    # The Jobs outlast the start of all 30 tasks (each a Python worker process) on a loaded machine.
    run_id = stack.trigger_dag("ha_deferred", conf={"jobs": 30, "seconds": 75})

    def deferred() -> int | None:
        n = sum(1 for v in stack.task_states("ha_deferred", run_id).values() if v["state"] == "deferred")
        return n if n >= 15 else None

    wait_until(deferred, timeout=300, what="15 of the 30 job tasks deferred")
    stack.kill("triggerer", signal.SIGKILL)
    state = stack.wait_for_run("ha_deferred", run_id, timeout=420)
    states = stack.task_states("ha_deferred", run_id)
    jobs = {k: v for k, v in states.items() if k.startswith("job")}
    assert state == "success", states
    assert len(jobs) == 30
    assert all(v["state"] == "success" and v["try_number"] == 1 for v in jobs.values()), jobs
    # Each deferred task resumed exactly once: one Job per task, and the triggers all ended.
    # (the module's stack runs no other Jobs, and a second try would have created a second Job)
    assert len(stack.admin.objects("jobs", "default")) == 30
    leftover = stack.query("SELECT count(*) FROM trigger")
    assert leftover and leftover[0][0] == 0, f"triggers left in the database: {leftover}"


def test_scheduler_and_triggerer_sigkilled_together_in_a_410_storm(stack: AirflowStack) -> None:
    if stack.procs["triggerer"].poll() is not None:  # the previous test left one triggerer
        newest = stack.query("SELECT coalesce(max(id), 0) FROM job WHERE job_type = 'TriggererJob'")[0][0]
        stack.start("triggerer")
        wait_until(
            lambda: (
                stack.query(
                    "SELECT id FROM job WHERE job_type = 'TriggererJob' AND state = 'running' AND id > ?",
                    (newest,),
                )
                or None
            ),
            timeout=120,
            what="the restarted triggerer running",
        )
    jobs_before = len(stack.admin.objects("jobs", "default"))
    counters = stack.admin.counters()
    expired_before = counters.get("expired watch pods", 0) + counters.get("expired watch jobs", 0)
    stop = threading.Event()

    def storm() -> None:
        while not stop.wait(2.0):
            try:
                stack.admin.fault("drop_watches")
            except Exception:  # the sandbox is busy; the next round drops them
                pass

    stack.admin.fault("set_history_window", n=1)
    storming = threading.Thread(target=storm, name="410-storm", daemon=True)
    storming.start()
    try:
        # The Jobs start first and outlast the sleepers' start, so that both kinds of work are in flight
        # at the kill however slowly the machine starts the tasks' worker processes.
        deferred_run = stack.trigger_dag("ha_deferred", conf={"jobs": 10, "seconds": 150})

        def deferred() -> int | None:
            n = sum(
                1 for v in stack.task_states("ha_deferred", deferred_run).values() if v["state"] == "deferred"
            )
            return n if n >= 5 else None

        wait_until(deferred, timeout=300, what="5 job tasks deferred")
        sleepers_run = stack.trigger_dag("ha_sleepers", conf={"tasks": 10, "seconds": 60})

        def sleepers_running() -> int | None:
            n = sum(
                1
                for p in _pods(stack, sleepers_run)
                if p["metadata"]["annotations"].get("task_id") == "sleeper"
                and p["status"].get("phase") == "Running"
            )
            return n if n >= 5 else None

        wait_until(sleepers_running, timeout=300, what="5 sleeper pods running")
        still_deferred = deferred()
        assert still_deferred, "the Jobs ended before the sleepers ran; the kill would test no hand-over"
        stack.kill("scheduler", signal.SIGKILL)
        stack.kill("triggerer", signal.SIGKILL)
        assert stack.wait_for_run("ha_sleepers", sleepers_run, timeout=420) == "success", stack.task_states(
            "ha_sleepers", sleepers_run
        )
        assert stack.wait_for_run("ha_deferred", deferred_run, timeout=420) == "success", stack.task_states(
            "ha_deferred", deferred_run
        )
    finally:
        stop.set()
        storming.join(timeout=10)
        stack.admin.fault("set_history_window", n=10000)
    sleepers = {
        k: v for k, v in stack.task_states("ha_sleepers", sleepers_run).items() if k.startswith("sleeper")
    }
    jobs = {k: v for k, v in stack.task_states("ha_deferred", deferred_run).items() if k.startswith("job")}
    assert len(sleepers) == 10 and len(jobs) == 10
    assert all(v["state"] == "success" and v["try_number"] == 1 for v in sleepers.values()), sleepers
    assert all(v["state"] == "success" and v["try_number"] == 1 for v in jobs.values()), jobs
    pods = [p for p in _pods(stack, sleepers_run) if p["metadata"]["annotations"].get("task_id") == "sleeper"]
    per_try = Counter(
        (p["metadata"]["annotations"].get("map_index"), p["metadata"]["annotations"].get("try_number"))
        for p in pods
    )
    assert len(per_try) == 10 and set(per_try.values()) == {1}, per_try
    # One Job per deferred task: none resumed twice (a second try would have created a second Job).
    assert len(stack.admin.objects("jobs", "default")) - jobs_before == 10
    counters = stack.admin.counters()
    expired = counters.get("expired watch pods", 0) + counters.get("expired watch jobs", 0)
    assert expired > expired_before, "the storm produced no 410 Expired; it tested nothing"
    leftover = stack.query("SELECT count(*) FROM trigger")
    assert leftover and leftover[0][0] == 0, f"triggers left in the database: {leftover}"

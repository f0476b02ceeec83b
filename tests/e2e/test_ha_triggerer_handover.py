"""End to end: a trigger handed over to another triggerer does not kill its Job.

Two real triggerers on PostgreSQL. Triggerer A holds the JobTriggers of two deferred
KubernetesJobOperator tasks; triggerer B starts; A is stopped (SIGSTOP, the whole process group)
past ``[triggerer] triggerer_health_check_threshold``, so B takes A's triggers; then A is resumed
(SIGCONT). Airflow 3.3's A then finds it no longer owns them and cancels them with the "user action"
message, which calls ``JobTrigger.on_kill``. The task instances are still DEFERRED, so the Jobs stay:
B reports ``job[0]``'s success, once, on its first try. A user's kill still deletes a Job: ``job[1]``
is marked failed through the REST API while deferred, and its Job is deleted.

Before the fix A's on_kill deleted both Jobs on SIGCONT, and ``job[0]`` ended ``failed`` (its trigger
on B saw the Job deleted).
"""

from __future__ import annotations

import json
import os
import signal
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.stack import AirflowStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

DAGS = Path(__file__).parent / "dags_handover"
DAG = "handover_deferred"


@pytest.fixture(scope="module")
def stack(postgres: Any) -> Iterator[AirflowStack]:
    with AirflowStack(
        # triggerer#2 is started by the test, once triggerer A holds every trigger
        processes=("api-server", "dag-processor", "scheduler", "triggerer"),
        dags_folder=DAGS,
        dag_ids=[DAG],
        database_url=postgres.url,
        config={
            ("triggerer", "job_heartbeat_sec"): "1",
            # a stopped triggerer counts as dead after 5 s: the hand-over happens in seconds
            ("triggerer", "triggerer_health_check_threshold"): "5",
        },
        start_timeout=180,
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),
    ) as s:
        yield s


def _running_triggerers(stack: AirflowStack) -> list[int]:
    rows = stack.query("SELECT id FROM job WHERE job_type = 'TriggererJob' AND state = 'running' ORDER BY id")
    return [r[0] for r in rows]


def _owners(stack: AirflowStack, run_id: str) -> dict[int, int | None]:
    """{map_index: triggerer job id} of the run's deferred tasks' triggers."""
    rows = stack.query(
        "SELECT ti.map_index, t.triggerer_id FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id "
        "WHERE ti.dag_id = ? AND ti.run_id = ?",
        (DAG, run_id),
    )
    return {int(m): owner for m, owner in rows}


def _jobs_by_map_index(stack: AirflowStack, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """The run's Jobs by the map index their pod template's try labels carry."""
    out: dict[str, list[dict[str, Any]]] = {}
    for job in stack.admin.objects("jobs", "default"):
        labels = ((job["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        if labels.get("dag_id") == DAG:  # the module's stack runs this one DAG run
            out.setdefault(str(labels.get("map_index")), []).append(job)
    return out


def _mark_failed(stack: AirflowStack, run_id: str, task_id: str, map_index: int) -> None:
    """What a user does in the UI: PATCH the task instance's state through the public REST API."""
    base = f"http://127.0.0.1:{stack.api_port}"
    with urllib.request.urlopen(f"{base}/auth/token", timeout=30) as r:  # all-admins mode: no credentials
        token = json.load(r)["access_token"]
    url = (
        f"{base}/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/"
        f"{task_id}/{map_index}"
    )
    request = urllib.request.Request(
        url,
        method="PATCH",
        data=json.dumps({"new_state": "failed"}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.status == 200, r.read()


def _trigger_log(stack: AirflowStack, run_id: str, map_index: int, triggerer_id: int) -> str:
    """What triggerer ``triggerer_id`` logged for the trigger of ``job[map_index]`` (Airflow writes each
    triggerer's part of a deferred task's log next to the task's log)."""
    path = (
        stack.home
        / "logs"
        / f"dag_id={DAG}"
        / f"run_id={run_id}"
        / "task_id=job"
        / f"map_index={map_index}"
        / f"attempt=1.log.trigger.{triggerer_id}.log"
    )
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _on_kill_finished(log: str) -> bool:
    """Airflow's own lines: the cancel with the user-action message, then the trigger's end."""
    cancelled = log.find("invoking on_kill")
    return cancelled >= 0 and log.find("trigger completed", cancelled) >= 0


def _job(stack: AirflowStack, name: str) -> dict[str, Any] | None:
    return next((j for j in stack.admin.objects("jobs", "default") if j["metadata"]["name"] == name), None)


def _deleted(job: dict[str, Any] | None) -> bool:
    return job is None or bool(job["metadata"].get("deletionTimestamp"))


def test_handover_keeps_the_job_and_a_users_kill_deletes_it(stack: AirflowStack) -> None:
    [triggerer_a] = wait_until(lambda: _running_triggerers(stack) or None, timeout=120, what="triggerer A")
    # job[0]'s Job outlasts the hand-over on a loaded machine and then succeeds; job[1]'s runs until the
    # user kills its task (it must still be deferred then, whatever the load).
    run_id = stack.trigger_dag(DAG, conf={"seconds": [75, 1200]})
    wait_until(
        lambda: (
            (owners := _owners(stack, run_id)) and len(owners) == 2 and set(owners.values()) == {triggerer_a}
        ),
        timeout=300,
        what="both job tasks deferred, their triggers on triggerer A",
    )
    jobs = _jobs_by_map_index(stack, run_id)
    assert sorted(jobs) == ["0", "1"] and all(len(v) == 1 for v in jobs.values()), jobs
    uid = {m: v[0]["metadata"]["uid"] for m, v in jobs.items()}

    stack.start("triggerer#2")
    triggerer_b = wait_until(
        lambda: next((j for j in _running_triggerers(stack) if j > triggerer_a), None),
        timeout=120,
        what="triggerer B running",
    )
    a = stack.procs["triggerer"]
    os.killpg(a.pid, signal.SIGSTOP)  # A and its trigger-runner child: a stale heartbeat, not a death
    try:
        wait_until(
            lambda: set(_owners(stack, run_id).values()) == {triggerer_b} or None,
            timeout=120,
            what="triggerer B to take over A's triggers",
        )
    finally:
        os.killpg(a.pid, signal.SIGCONT)
    # A recovers, finds it no longer owns the triggers and cancels them with the user-action message:
    # on_kill runs (Airflow's log says so), sees the tasks still deferred, and leaves the Jobs.
    wait_until(
        lambda: all(_on_kill_finished(_trigger_log(stack, run_id, m, triggerer_a)) for m in (0, 1)) or None,
        timeout=120,
        what="triggerer A to give up its triggers (on_kill ran and the triggers ended)",
    )
    for m in ("0", "1"):
        job = _job(stack, jobs[m][0]["metadata"]["name"])
        assert not _deleted(job) and job["metadata"]["uid"] == uid[m], (m, job and job["metadata"])
        log = _trigger_log(stack, run_id, int(m), triggerer_a)
        assert "the trigger was handed over to another triggerer" in log, log[-3000:]

    # A user's kill: job[1] is marked failed while deferred. Its trigger's owner (B) runs on_kill,
    # which sees the task left DEFERRED and deletes the Job.
    assert stack.task_states(DAG, run_id)["job[1]"]["state"] == "deferred"
    _mark_failed(stack, run_id, "job", 1)
    wait_until(
        lambda: _deleted(_job(stack, jobs["1"][0]["metadata"]["name"])) or None,
        timeout=120,
        what="job[1]'s Job deleted after the user marked the task failed",
    )

    stack.wait_for_run(DAG, run_id, timeout=300)
    states = stack.task_states(DAG, run_id)
    assert states["job[0]"]["state"] == "success" and states["job[0]"]["try_number"] == 1, states
    assert states["job[1]"]["state"] == "failed", states
    again = _jobs_by_map_index(stack, run_id)
    assert len(again.get("0", [])) == 1 and again["0"][0]["metadata"]["uid"] == uid["0"], (
        again
    )  # one Job, one try
    leftover = stack.query("SELECT count(*) FROM trigger")
    assert leftover and leftover[0][0] == 0, f"triggers left in the database: {leftover}"

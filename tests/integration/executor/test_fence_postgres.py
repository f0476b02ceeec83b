"""A late scheduler creates no pod for a launch that another scheduler is adopting, on PostgreSQL.

Scheduler A queued a task instance and is only late: its heartbeat went stale, so scheduler B adopts its
task instances. B runs Airflow's own adoption (``SchedulerJobRunner.adopt_or_reset_orphaned_tasks``, which
holds the rows ``FOR UPDATE`` from its read to its commit, across B's pod list). A's heartbeat runs after
B's list has returned and before B commits, and A's pod would land after that list: B then finds no pod
and launches the task itself. Exactly one pod must exist for the launch, whichever scheduler creates it.

Airflow's schema is made by ``airflow db migrate`` on a throwaway PostgreSQL server; only the rows the
adoption reads are written. Pods run on the sandbox over HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from exec_helpers import pods_of, poll
from support.airflow_rows import write_queued
from support.workloads import make_workload

from airflow_jobwatch.executors import results
from airflow_jobwatch.executors.pods import LAUNCH_ANNOTATION

pytestmark = pytest.mark.timeout(400)

# The real check, kept before this directory's conftest answers it for harnesses without rows.
REAL_LAUNCHES_HELD = results.launches_held
LATE, ADOPTER = 101, 102


@pytest.fixture(scope="module")
def airflow_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a PostgreSQL database holding Airflow's schema (skipped where PostgreSQL is missing)."""
    from support.postgres import PostgresServer, PostgresUnavailable

    try:
        server = PostgresServer()
    except PostgresUnavailable as err:
        pytest.skip(str(err))
    home = tmp_path_factory.mktemp("airflow-home")
    with server:
        env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": server.url}
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True
        )
        yield server.url


@pytest.fixture
def orm(airflow_database: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Airflow's sessions (scoped or not) bound to the PostgreSQL database for this test."""
    from airflow import settings
    from support.airflow_rows import bind_airflow_sessions

    for name in ("engine", "Session", "NonScopedSession"):
        monkeypatch.setattr(settings, name, getattr(settings, name, None), raising=False)  # restored after
    engine = bind_airflow_sessions(airflow_database)
    yield engine
    settings.Session.remove()
    engine.dispose()


def test_a_late_scheduler_creates_no_second_pod_while_another_adopts_its_task(
    executor_factory: Any, kube_sandbox: Any, orm: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.utils.session import create_session

    sandbox, _ = kube_sandbox
    fence_reads: list[str] = []

    def counted(launches: Any, job_id: str) -> Any:
        fence_reads.append(job_id)
        return REAL_LAUNCHES_HELD(launches, job_id)

    monkeypatch.setattr(results, "launches_held", counted)
    monkeypatch.setenv("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", "30")
    w = make_workload(dag_id="fence_dag", task_id="contested", run_id="fence_run", command="sleep 60")
    w.ti.external_executor_id = "launch-late"
    now = datetime.now(UTC)
    write_queued(
        orm, [(w.ti.key, "launch-late")], queued_by=LATE, jobs={LATE: now - timedelta(hours=1), ADOPTER: now}
    )
    late = executor_factory(job_id=str(LATE))
    adopter = executor_factory(job_id=str(ADOPTER))
    late_events: list[Any] = []
    # Handed to the late scheduler, whose loop has not yet run its heartbeat: no pod so far.
    late.queued_tasks[w.ti.key] = w
    late._process_workloads([w])

    real_list = adopter._list_everywhere
    during: list[int] = []

    def list_then_late_heartbeats(*args: Any, **kwargs: Any) -> Any:
        pods = real_list(*args, **kwargs)
        if not during:
            # B's list has returned and B's transaction is open: A heartbeats (its fence read runs now),
            # and any create it sends lands after B's list.
            deadline = time.monotonic() + 60
            # Its pod built, its fence read again, and any create it then sent answered.
            while fence_reads.count(str(LATE)) < 2 or late._building or late._inflight:
                assert time.monotonic() < deadline, "the late scheduler never read its fence"
                late.heartbeat()
                late_events.extend(late.get_event_buffer().items())
                time.sleep(0.05)
            during.append(len(pods_of(sandbox, "contested")))
        return pods

    monkeypatch.setattr(adopter, "_list_everywhere", list_then_late_heartbeats)
    job = Job()
    job.id = ADOPTER
    runner = SchedulerJobRunner(job=job, executors=[adopter])
    with create_session() as session:
        runner.adopt_or_reset_orphaned_tasks(session=session)
    assert during, "the adopter never listed pods"
    adopter_events: list[Any] = []

    def adopter_created() -> bool:
        record = adopter.records.get(w.ti.key)
        return record is None or record.pod is not None

    poll(adopter, adopter_created, timeout=60, what="the adopter's create", events=adopter_events)
    for _ in range(10):
        for ex, events in ((late, late_events), (adopter, adopter_events)):
            ex.heartbeat()
            events.extend(ex.get_event_buffer().items())
    pods = pods_of(sandbox, "contested")
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    assert pods[0]["metadata"]["annotations"][LAUNCH_ANNOTATION] == "launch-late"
    assert pods[0]["metadata"]["labels"]["airflow-worker"] == str(ADOPTER)
    assert w.ti.key in adopter.running and w.ti.key not in late.running

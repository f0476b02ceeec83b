"""The rows of Airflow's metadata database that a scheduler's adoption and the executor's fence read.

Written with SQLAlchemy Core into a database that ``airflow db migrate`` made (no DAG file is parsed): a DAG
bundle, the DAG and its version, one running DAG run, scheduler jobs, and QUEUED task instances, each
queued by a scheduler job under a launch id (``external_executor_id``), as Airflow 3.2.2+ pre-assigns it.

    bind_airflow_sessions(url)          # Airflow's sessions, scoped or not, on that database
    write_queued(engine, "run", [(key, "launch-1")], queued_by=101, jobs={101: stale, 102: now})
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any


def bind_airflow_sessions(url: str) -> Any:
    """Point Airflow's ``settings.Session`` / ``NonScopedSession`` at ``url``; returns the engine."""
    from airflow import settings
    from sqlalchemy import create_engine
    from sqlalchemy.orm import scoped_session, sessionmaker

    engine = create_engine(url)
    settings.engine = engine
    settings.Session = scoped_session(sessionmaker(bind=engine))
    settings.NonScopedSession = sessionmaker(bind=engine)
    return engine


def write_queued(
    engine: Any,
    tasks: Iterable[tuple[Any, str]],
    *,
    queued_by: int,
    jobs: dict[int, datetime] | None = None,
    ids: dict[Any, Any] | None = None,
) -> None:
    """``tasks``: (task instance key, launch id) pairs of one DAG run, each written QUEUED on its try by
    scheduler job ``queued_by``. ``jobs``: scheduler job id -> its latest heartbeat (running jobs). ``ids``:
    key -> the task instance's id (its workload's ``ti.id``), else a new one."""
    from airflow.jobs.job import Job
    from airflow.models import DagModel, DagRun, TaskInstance
    from airflow.models.dag_version import DagVersion
    from airflow.models.dagbundle import DagBundleModel
    from sqlalchemy import insert, select

    tasks = list(tasks)
    if not tasks:
        return
    dag_id, run_id = tasks[0][0].dag_id, tasks[0][0].run_id
    now = datetime.now(UTC)
    with engine.begin() as conn:
        if conn.execute(select(DagBundleModel.name).where(DagBundleModel.name == "rows")).first() is None:
            conn.execute(insert(DagBundleModel.__table__).values(name="rows", active=True))
        version = conn.execute(select(DagVersion.id).where(DagVersion.dag_id == dag_id)).scalar()
        if version is None:
            conn.execute(
                insert(DagModel.__table__).values(
                    dag_id=dag_id,
                    bundle_name="rows",
                    is_paused=False,
                    fileloc=f"/dags/{dag_id}.py",
                    relative_fileloc=f"{dag_id}.py",
                    max_active_tasks=16,
                    max_consecutive_failed_dag_runs=0,
                    has_task_concurrency_limits=False,
                    has_import_errors=False,
                )
            )
            version = uuid.uuid4()
            conn.execute(
                insert(DagVersion.__table__).values(
                    id=version, version_number=1, dag_id=dag_id, bundle_name="rows", created_at=now
                )
            )
        conn.execute(
            insert(DagRun.__table__).values(
                dag_id=dag_id,
                run_id=run_id,
                state="running",
                run_type="manual",
                run_after=now,
                start_date=now,
                clear_number=0,
            )
        )
        for job_id, beat in (jobs or {}).items():
            conn.execute(
                insert(Job.__table__).values(
                    id=job_id,
                    job_type="SchedulerJob",
                    state="running",
                    start_date=now - timedelta(hours=2),
                    latest_heartbeat=beat,
                    hostname="rows",
                    unixname="rows",
                )
            )
        conn.execute(
            insert(TaskInstance.__table__),
            [
                {
                    "id": (ids or {}).get(key) or uuid.uuid4(),
                    "dag_id": key.dag_id,
                    "task_id": key.task_id,
                    "run_id": key.run_id,
                    "map_index": key.map_index,
                    "try_number": key.try_number,
                    "state": "queued",
                    "pool": "default_pool",
                    "pool_slots": 1,
                    "priority_weight": 1,
                    "queue": "default",
                    "queued_by_job_id": queued_by,
                    "external_executor_id": launch,
                    "queued_dttm": now,
                    "max_tries": 0,
                    "hostname": "",
                    "unixname": "",
                    "operator": "BashOperator",
                    "custom_operator_name": "BashOperator",
                    "executor_config": {},
                    "dag_version_id": version,
                }
                for key, launch in tasks
            ],
        )

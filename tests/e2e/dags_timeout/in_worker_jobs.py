"""KubernetesJobOperator tasks that wait in the worker.

``times_out``: the Job runs longer than ``execution_timeout``; Airflow's timer must end the task
(``AirflowTaskTimeout``) and ``on_kill()`` must delete the Job, which would otherwise be retried by the
Job controller (``backoff_limit=2``). ``fails``: the task's error names the container's exit code.
``quiet``: a plain success, whose task log must carry no watch internals at INFO.
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None

common = dict(
    namespace="default",
    image="busybox:1.36",
    kubernetes_conn_id=None,
    config_file=KUBECONFIG,
    in_cluster=False,
    deferrable=False,
    wait_until_job_complete=True,
    get_logs=True,
    job_poll_interval=30,
    retries=0,
)

with DAG(
    dag_id="in_worker_jobs",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    tags=["jobwatch"],
) as dag:
    KubernetesJobOperator(
        task_id="times_out",
        cmds=["sh", "-c", "echo started; sleep 120"],
        backoff_limit=2,
        execution_timeout=datetime.timedelta(seconds=20),
        **{**common, "get_logs": False},  # nothing else keeps the task running past a deadline of its own
    )
    KubernetesJobOperator(
        task_id="fails", cmds=["sh", "-c", "echo about to fail; exit 3"], backoff_limit=0, **common
    )
    KubernetesJobOperator(task_id="quiet", cmds=["sh", "-c", "echo hello"], backoff_limit=0, **common)

"""Deferrable Jobs that end within a second of their task's deferral: half succeed, half fail
(``JOBWATCH_FAST_END_COUNT`` of each kind, 25 by default).

Half of each kind read no pod logs (``get_logs=False``), the other half do (``get_logs=True``, the
trigger writes them); either way the trigger ends the task itself, with no worker resume.
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None
COUNT = int(os.environ.get("JOBWATCH_FAST_END_COUNT", "25"))

with DAG(
    dag_id="fast_end_jobs",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_tasks=64,
) as dag:
    for i in range(COUNT):
        for kind, command in (
            ("ok", "echo done"),
            ("fail", "echo about to fail; exit 3"),
        ):
            KubernetesJobOperator(
                task_id=f"{kind}_{i:02d}",
                namespace="default",
                image="busybox:1.36",
                cmds=["sh", "-c", command],
                kubernetes_conn_id=None,
                config_file=KUBECONFIG,
                in_cluster=False,
                deferrable=True,
                wait_until_job_complete=True,
                backoff_limit=0,
                get_logs=i % 2 == 1,
                do_xcom_push=False,
                job_poll_interval=30,
                retries=0,
            )

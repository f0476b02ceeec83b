"""A log storm in the triggerer: a deferrable get_logs=True task whose pod prints 200,000 empty lines,
beside a get_logs=False task whose Job ends a few seconds later, while the first one's logs are written.
The second must end within seconds of its Job, and the triggerer's loop must never stall."""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None
COMMON = dict(
    namespace="default",
    image="busybox:1.36",
    kubernetes_conn_id=None,
    config_file=KUBECONFIG,
    in_cluster=False,
    deferrable=True,
    wait_until_job_complete=True,
    backoff_limit=0,
    do_xcom_push=False,
    job_poll_interval=30,
    retries=0,
)

with DAG(
    dag_id="trigger_log_storm",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
) as dag:
    KubernetesJobOperator(
        task_id="storm", cmds=["sh", "-c", "yes '' | head -n 200000"], get_logs=True, **COMMON
    )
    KubernetesJobOperator(task_id="quiet", cmds=["sh", "-c", "sleep 6"], get_logs=False, **COMMON)

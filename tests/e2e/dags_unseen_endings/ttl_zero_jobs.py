"""Deferrable Jobs removed as soon as they end (``ttlSecondsAfterFinished: 0``): ``ok_<i>`` succeed,
``fail_<i>`` fail with exit code 3. Each pod waits for the file ``<JOBWATCH_E2E_GATE>.<i>`` before it
ends, so the test decides when each pair of Jobs ends (while it disrupts the triggerer's watches).
"""

from __future__ import annotations

import datetime
import os
import shlex

from airflow.sdk import DAG

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None
GATE = os.environ.get("JOBWATCH_E2E_GATE", "/nonexistent")


def wait_for(gate: str) -> str:
    return f"while [ ! -e {shlex.quote(gate)} ]; do sleep 0.1; done"


with DAG(
    dag_id="ttl_zero_jobs",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_tasks=16,
) as dag:
    for i in range(3):
        for kind, end in (("ok", "echo done"), ("fail", "echo about to fail; exit 3")):
            KubernetesJobOperator(
                task_id=f"{kind}_{i}",
                namespace="default",
                image="busybox:1.36",
                cmds=["sh", "-c", f"{wait_for(f'{GATE}.{i}')}; {end}"],
                kubernetes_conn_id=None,
                config_file=KUBECONFIG,
                in_cluster=False,
                deferrable=True,
                wait_until_job_complete=True,
                ttl_seconds_after_finished=0,
                backoff_limit=0,
                get_logs=False,
                do_xcom_push=False,
                job_poll_interval=30,
                retries=0,
            )

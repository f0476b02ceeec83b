"""DAG of tests/e2e/test_ha_triggerer_handover.py: mapped KubernetesJobOperator tasks that defer to
JobTrigger while their Job sleeps; each Job sleeps its own number of seconds (``params.seconds``), so
the test can keep one Job running until a user kills its task, whatever the machine's load."""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG, task

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None

with DAG(
    dag_id="handover_deferred",
    schedule=None,
    catchup=False,
    params={"seconds": [60, 900]},
    default_args={"retries": 0},
):

    @task
    def commands(params=None) -> list[list[str]]:
        return [["sh", "-c", f"sleep {int(s)}; echo job {i} done"] for i, s in enumerate(params["seconds"])]

    KubernetesJobOperator.partial(
        task_id="job",
        namespace="default",
        image="busybox:1.36",
        kubernetes_conn_id=None,
        config_file=KUBECONFIG,
        in_cluster=False,
        deferrable=True,
        wait_until_job_complete=True,
        backoff_limit=0,
        get_logs=False,
        execution_timeout=datetime.timedelta(minutes=30),
    ).expand(cmds=commands())

"""DAGs of the HA end-to-end tests (tests/e2e/test_ha_postgres.py): two schedulers, two triggerers.

``ha_sleepers``: N mapped tasks on JobWatchExecutor, each sleeping S seconds in its worker pod.
``ha_deferred``: N mapped KubernetesJobOperator tasks that defer to JobTrigger while their Job sleeps.
"""

from __future__ import annotations

import datetime
import os
import time

from airflow.sdk import DAG, task

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None

with DAG(
    dag_id="ha_sleepers",
    schedule=None,
    catchup=False,
    params={"tasks": 30, "seconds": 20},
    default_args={"retries": 0},
):

    @task
    def items(params=None) -> list[int]:
        return list(range(int(params["tasks"])))

    @task
    def sleeper(i: int, params=None) -> int:
        time.sleep(float(params["seconds"]))
        return i

    sleeper.expand(i=items())

with DAG(
    dag_id="ha_deferred",
    schedule=None,
    catchup=False,
    params={"jobs": 50, "seconds": 25},
    default_args={"retries": 0},
):

    @task
    def commands(params=None) -> list[list[str]]:
        seconds = int(params["seconds"])
        return [["sh", "-c", f"sleep {seconds}; echo job {i} done"] for i in range(int(params["jobs"]))]

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
        execution_timeout=datetime.timedelta(minutes=10),
    ).expand(cmds=commands())

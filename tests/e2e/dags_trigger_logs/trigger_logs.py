"""A deferrable get_logs=True task whose trigger ends it with its pods' logs (no worker resume): an init
container's lines and a burst of 3,000 lines from the main container, all written at the Job's end.

And a log storm in the triggerer (``trigger_log_storm``): a get_logs=True task whose pod prints 200,000
empty lines, beside a get_logs=False task whose Job ends a few seconds later, while the first one's logs
are written. ``JOBWATCH_STORM_COUNT`` pairs of them (1; the log-storm benchmark runs 8)."""

from __future__ import annotations

import datetime
import os
from typing import Any

from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None
STORM_COUNT = int(os.environ.get("JOBWATCH_STORM_COUNT", "1"))


def job_task(task_id: str, script: str, **kwargs: Any) -> KubernetesJobOperator:
    """A deferrable Job that runs ``sh -c script`` on the sandbox, ended from the triggerer."""
    return KubernetesJobOperator(
        task_id=task_id,
        namespace="default",
        image="busybox:1.36",
        cmds=["sh", "-c", script],
        kubernetes_conn_id=None,
        config_file=KUBECONFIG,
        in_cluster=False,
        deferrable=True,
        wait_until_job_complete=True,
        backoff_limit=0,
        do_xcom_push=False,
        job_poll_interval=30,
        retries=0,
        **kwargs,
    )


def manual_dag(dag_id: str, **kwargs: Any) -> DAG:
    """A DAG that runs only when triggered."""
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False, **kwargs)


with manual_dag("trigger_logs") as dag:
    job_task(
        "burst",
        "for i in $(seq 1 3000); do printf 'burst line %05d of the main container\\n' $i; done",
        init_containers=[
            k8s.V1Container(name="prepare", image="busybox:1.36", command=["echo", "init says hi"])
        ],
        init_container_logs=True,
        get_logs=True,
    )

with manual_dag("trigger_log_storm", max_active_tasks=64) as storm_dag:
    for i in range(STORM_COUNT):
        suffix = f"_{i:02d}" if i else ""
        job_task(f"storm{suffix}", "yes '' | head -n 200000", get_logs=True)
        job_task(f"quiet{suffix}", "sleep 6", get_logs=False)

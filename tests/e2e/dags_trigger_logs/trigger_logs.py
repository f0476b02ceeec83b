"""A deferrable get_logs=True task whose trigger ends it with its pods' logs (no worker resume): an init
container's lines and a burst of 3,000 lines from the main container, all written at the Job's end."""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None

with DAG(
    dag_id="trigger_logs",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
) as dag:
    KubernetesJobOperator(
        task_id="burst",
        namespace="default",
        image="busybox:1.36",
        cmds=[
            "sh",
            "-c",
            "for i in $(seq 1 3000); do printf 'burst line %05d of the main container\\n' $i; done",
        ],
        init_containers=[
            k8s.V1Container(name="prepare", image="busybox:1.36", command=["echo", "init says hi"])
        ],
        init_container_logs=True,
        kubernetes_conn_id=None,
        config_file=KUBECONFIG,
        in_cluster=False,
        deferrable=True,
        wait_until_job_complete=True,
        backoff_limit=0,
        get_logs=True,
        do_xcom_push=False,
        job_poll_interval=30,
        retries=0,
    )

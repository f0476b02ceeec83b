"""Disruptions and Kueue end to end (tests/e2e/test_disruptions.py drives the faults).

* ``evicted``: a deferrable Job with ``disruption_retries=1`` and ``backoff_limit=0``; its first pod is
  evicted mid-run (the Eviction API), the replacement succeeds.
* ``kueue_wait``: a Kueue Job that waits to be admitted.
* ``kueue_preempted``: a Kueue Job preempted by Kueue while it runs, re-admitted, then successful.

Each command runs twice at most: the first run leaves a marker (``$JOBWATCH_E2E_MARKERS``) and waits
to be disrupted; the second finds it and succeeds.
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG

from airflow_jobwatch.operators.job import KubernetesJobOperator
from airflow_jobwatch.operators.kueue import KubernetesStartKueueJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None
MARKERS = os.environ.get("JOBWATCH_E2E_MARKERS", "/tmp")


def once_then_succeed(name: str) -> list[str]:
    marker = f"{MARKERS}/{name}"
    return ["sh", "-c", f"if [ -e {marker} ]; then echo second run; exit 0; fi; touch {marker}; sleep 120"]


common = dict(
    namespace="default",
    image="busybox:1.36",
    kubernetes_conn_id=None,
    config_file=KUBECONFIG,
    in_cluster=False,
    deferrable=True,
    wait_until_job_complete=True,
    backoff_limit=0,
    get_logs=True,
    job_poll_interval=5,
    execution_timeout=datetime.timedelta(minutes=5),
)

with DAG(
    dag_id="disruptions",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    tags=["jobwatch", "disruptions"],
) as dag:
    KubernetesJobOperator(
        task_id="evicted", cmds=once_then_succeed("evicted"), disruption_retries=1, **common
    )
    KubernetesStartKueueJobOperator(
        task_id="kueue_wait", queue_name="local-queue", cmds=["sh", "-c", "echo admitted at last"], **common
    )
    KubernetesStartKueueJobOperator(
        task_id="kueue_preempted",
        queue_name="local-queue",
        cmds=once_then_succeed("kueue_preempted"),
        **common,
    )

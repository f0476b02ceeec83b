"""The DAG of ``bench/bench_e2e_trigger.py``: deferrable Jobs that end about a second after they are
created, ``JOBWATCH_BENCH_COUNT`` tasks of each kind (20 by default), every fifth Job exiting 1.

Kinds (the task id's prefix):

* ``logs_off``: ``get_logs=False``; the trigger ends the task (no worker resume).
* ``logs_on``: ``get_logs=True``, the default; the trigger writes the pods' logs and ends the task.
* ``resume``: ``get_logs=True`` with task callbacks, which must run on a worker: the task resumes there,
  held by ``[jobwatch] resume_hold_seconds`` when the Job ended within it of the deferral.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from airflow.sdk import DAG

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None
COUNT = int(os.environ.get("JOBWATCH_BENCH_COUNT", "20"))
KINDS = ("logs_off", "logs_on", "resume")


def noted(context: Any) -> None:
    """A task callback: its presence alone makes the task resume on a worker."""
    print(f"callback ran for {context['ti'].task_id}")


with DAG(
    dag_id="e2e_trigger_bench",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_tasks=1024,
) as dag:
    for i in range(COUNT):
        fails = i % 5 == 4
        command = "sleep 1; echo about to fail; exit 1" if fails else "sleep 1; echo done"
        for kind in KINDS:
            callbacks: dict[str, Any] = (
                {"on_success_callback": noted, "on_failure_callback": noted} if kind == "resume" else {}
            )
            KubernetesJobOperator(
                task_id=f"{kind}_{i:03d}",
                namespace="default",
                image="busybox:1.36",
                cmds=["sh", "-c", command],
                kubernetes_conn_id=None,
                config_file=KUBECONFIG,
                in_cluster=False,
                deferrable=True,
                wait_until_job_complete=True,
                backoff_limit=0,
                get_logs=kind != "logs_off",
                do_xcom_push=False,
                job_poll_interval=30,
                retries=0,
                # The scheduler queues by priority: index i of every kind before index i + 1 of any, so
                # that each wave that [core] parallelism lets start holds the same share of each kind.
                priority_weight=COUNT - i,
                weight_rule="absolute",
                **callbacks,
            )

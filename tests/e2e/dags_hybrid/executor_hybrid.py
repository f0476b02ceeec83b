"""Two executors in one scheduler: each task names its own (Airflow 3 multiple executors).

``[core] executor = KubernetesExecutor,airflow_jobwatch.executors.JobWatchExecutor`` with
``[jobwatch] worker_pod_labels = jobwatch``; tests/e2e/test_executor_hybrid.py checks that each
executor runs, reports and cleans up its own pods only.
"""

from __future__ import annotations

import time

from airflow.sdk import DAG, task

with DAG(
    dag_id="executor_hybrid",
    schedule=None,
    catchup=False,
    tags=["jobwatch", "executor"],
    default_args={"retries": 0},
) as dag:

    @task(executor="KubernetesExecutor")
    def by_upstream(i: int) -> int:
        time.sleep(2)
        return i

    @task(executor="JobWatchExecutor")
    def by_jobwatch(i: int) -> int:
        time.sleep(2)
        return i

    @task(executor="KubernetesExecutor")
    def upstream_fails() -> None:
        raise RuntimeError("fails on purpose (upstream KubernetesExecutor)")

    @task(executor="JobWatchExecutor")
    def jobwatch_fails() -> None:
        raise RuntimeError("fails on purpose (JobWatchExecutor)")

    by_upstream.expand(i=[0, 1, 2])
    by_jobwatch.expand(i=[0, 1, 2])
    upstream_fails()
    jobwatch_fails()

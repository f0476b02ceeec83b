"""The DAG of ``bench/bench_launch_scheduler.py``: ``JOBWATCH_BENCH_TASKS`` independent tasks (200 by
default), all ready at once when a run starts, so that the scheduler queues them together and the executor
is what paces their pods. The bench runs their pods simulated (the sandbox's ``--simulate-pods``): what a
task does is never run, so its body is a placeholder.
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG, task

TASKS = int(os.environ.get("JOBWATCH_BENCH_TASKS", "200"))

with DAG(
    dag_id="launch_bench",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_tasks=4096,
    default_args={"retries": 0},
) as dag:

    @task
    def noop() -> None:
        """Never runs: its pod is simulated."""

    for i in range(TASKS):
        noop.override(task_id=f"noop_{i:04d}")()

"""JobWatchExecutor scenarios in one DAG run: success, failure, non-zero exit, retry, timeout, bad image.

Each task runs in its own worker pod. Every task but ``succeed`` and ``retry_then_succeed`` ends
failed, each for its own reason, which the task's log names.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from airflow.sdk import DAG, task
from kubernetes.client import models as k8s

# An image that cannot be pulled: the pod stays Pending with ErrImagePull, which the executor reports
# as a failure at once (not after [scheduler] task_queued_timeout).
UNPULLABLE_IMAGE = "registry.invalid/jobwatch/no-such-image:1"

with DAG(
    dag_id="executor_basics",
    schedule=None,
    catchup=False,
    tags=["jobwatch", "executor"],
    default_args={"retries": 0},
) as dag:

    @task
    def succeed() -> str:
        print("hello from a JobWatchExecutor worker pod")
        return "ok"

    @task
    def fail() -> None:
        raise RuntimeError("this task fails on purpose")

    @task
    def exit_nonzero() -> None:
        # The task process dies without raising: its supervisor records the failure.
        os._exit(3)

    @task(retries=1, retry_delay=timedelta(seconds=1))
    def retry_then_succeed(ti=None) -> str:
        if ti.try_number < 2:
            raise RuntimeError(f"failing try {ti.try_number} on purpose")
        return "second try"

    @task(execution_timeout=timedelta(seconds=3))
    def time_out() -> None:
        time.sleep(60)

    @task(
        executor_config={
            "pod_override": k8s.V1Pod(
                spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base", image=UNPULLABLE_IMAGE)])
            )
        }
    )
    def unpullable_image() -> None:
        print("never runs")

    succeed()
    fail()
    exit_nonzero()
    retry_then_succeed()
    time_out()
    unpullable_image()

"""DAG of tests/e2e/test_resume_under_executor.py: a deferrable task that resumes at once.

``resumes_at_once`` defers to a trigger whose moment has already passed, so the triggerer fires it as
soon as it loads it and the scheduler queues the task again with the same try number. Its worker pod
has a second container that outlives the task's container until the test creates the file named by
``$JOBWATCH_E2E_RELEASE_FILE`` (as a log shipper or service-mesh sidecar keeps a pod running for a
while after the task exited): the test decides when the first launch's pod ends, and makes it end
while the second launch's pod is still being created.
"""

from __future__ import annotations

import datetime
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import DAG, BaseOperator, task
from kubernetes.client import models as k8s

LINGER = k8s.V1Container(
    name="linger",
    image="busybox:1.36",
    command=["sh", "-c", 'until [ -f "$JOBWATCH_E2E_RELEASE_FILE" ]; do sleep 0.2; done'],
)


class ResumeAtOnce(BaseOperator):
    """Defers to a trigger that fires at once, then finishes in ``resume``."""

    def execute(self, context: Any) -> None:
        self.defer(
            trigger=DateTimeTrigger(moment=datetime.datetime.now(datetime.UTC)),
            method_name="resume",
        )

    def resume(self, context: Any, event: Any = None) -> str:
        print(f"resumed after deferral (try {context['ti'].try_number})")
        return "resumed"


with DAG(
    dag_id="launch_identity",
    schedule=None,
    catchup=False,
    default_args={"retries": 0},
):
    ResumeAtOnce(
        task_id="resumes_at_once",
        executor_config={
            "pod_override": k8s.V1Pod(spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base"), LINGER]))
        },
    )


with DAG(
    dag_id="disrupted_before_start",
    schedule=None,
    catchup=False,
    default_args={"retries": 0},
):
    # Its first worker pod is evicted while its containers are being created (the test does
    # it); the executor launches it again for the same try.
    @task
    def never_started_first(ti: Any = None) -> str:
        print(f"running on try {ti.try_number}")
        return "ok"

    never_started_first()

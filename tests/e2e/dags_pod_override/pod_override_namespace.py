"""DAG of tests/e2e/test_pod_override_restart.py: two tasks whose worker pods a ``pod_override`` puts in
another namespace than ``[kubernetes_executor] namespace``, each held until the test releases it.

``pending_away``: an init container waits for ``$JOBWATCH_E2E_RELEASE_DIR/pending_away``, so the pod stays
Pending (and its task instance QUEUED: the worker has not started) until the file exists.
``running_away``: the task itself runs until ``$JOBWATCH_E2E_RELEASE_DIR/running_away`` exists.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task
from kubernetes.client import models as k8s

NAMESPACE = "jobwatch-away"
# A pod that the test never releases (it failed before) still ends, well after the test's own deadline.
HOLD_AT_MOST_SECONDS = 600


def _override(*, hold_pending: bool) -> dict[str, Any]:
    init = [
        k8s.V1Container(
            name="hold-pending",
            image="busybox:1.36",
            command=[
                "sh",
                "-c",
                f'i=0; until [ -f "$JOBWATCH_E2E_RELEASE_DIR/pending_away" ] '
                f"|| [ $i -ge {HOLD_AT_MOST_SECONDS * 5} ]; do sleep 0.2; i=$((i+1)); done",
            ],
        )
    ]
    return {
        "pod_override": k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(namespace=NAMESPACE),
            spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base")], init_containers=init)
            if hold_pending
            else None,
        )
    }


with DAG(
    dag_id="pod_override_namespace",
    schedule=None,
    catchup=False,
    default_args={"retries": 0},
):

    @task(executor_config=_override(hold_pending=True))
    def pending_away(ti: Any = None) -> str:
        print(f"pending_away runs on try {ti.try_number}")
        return "ran"

    @task(executor_config=_override(hold_pending=False))
    def running_away(ti: Any = None) -> str:
        release = Path(os.environ["JOBWATCH_E2E_RELEASE_DIR"]) / "running_away"
        deadline = time.monotonic() + HOLD_AT_MOST_SECONDS
        while not release.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{release} was not created within {HOLD_AT_MOST_SECONDS} s")
            time.sleep(0.2)
        print(f"running_away released on try {ti.try_number}")
        return "ran"

    pending_away()
    running_away()

"""DAGs of tests/e2e/test_across_schedulers.py: tasks whose worker pods run until the test releases them.

Both wait for a file in ``$JOBWATCH_E2E_RELEASE_DIR`` named after their DAG, so the test decides when
their pods end: only after the scheduler that must report them has taken them over.

``ha_flap``: N mapped tasks on JobWatchExecutor, each holding its pod until ``<dir>/ha_flap`` exists.
``restart_during_resume``: one task that defers to a trigger that fires at once, so the scheduler queues
it again (same try) while its first pod still runs: a second container keeps that pod up until
``<dir>/restart_during_resume`` exists, as a log shipper or service-mesh sidecar keeps a pod running
after the task exited.
``kill_during_resume``: the same, but the second container waits for ``<dir>/kill_during_resume.sidecar``,
the resumed task holds its pod until ``<dir>/kill_during_resume`` exists, and every pod but the first waits
in an init container (Pending, as while a slow init container runs) until ``<dir>/kill_during_resume.gate``
exists: the test kills the scheduler while the resumed pod exists but has not started, and ends the first
pod while the resumed task still runs.
"""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import DAG, BaseOperator, task
from kubernetes.client import models as k8s

# A pod that the test never releases (it failed before) still ends, well after the test's own deadline.
HOLD_AT_MOST_SECONDS = 600


def _release_file(dag_id: str) -> Path:
    return Path(os.environ["JOBWATCH_E2E_RELEASE_DIR"]) / dag_id


with DAG(
    dag_id="ha_flap",
    schedule=None,
    catchup=False,
    default_args={"retries": 0},
):

    @task
    def held(i: int, ti: Any = None) -> int:
        release = _release_file("ha_flap")
        deadline = time.monotonic() + HOLD_AT_MOST_SECONDS
        while not release.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{release} was not created within {HOLD_AT_MOST_SECONDS} s")
            time.sleep(0.2)
        print(f"held task {i} released on try {ti.try_number}")
        return i

    held.expand(i=[0, 1, 2, 3])


def _linger(release: str) -> k8s.V1Container:
    """A second container that keeps the pod running until ``<dir>/<release>`` exists."""
    return k8s.V1Container(
        name="linger",
        image="busybox:1.36",
        command=[
            "sh",
            "-c",
            f'i=0; until [ -f "$JOBWATCH_E2E_RELEASE_DIR/{release}" ] '
            f"|| [ $i -ge {HOLD_AT_MOST_SECONDS * 5} ]; do sleep 0.2; i=$((i+1)); done",
        ],
    )


def _with_linger(release: str, *, gate: str | None = None) -> dict[str, Any]:
    """A pod_override with a second container that waits for ``<dir>/<release>``; with ``gate``, an init
    container that lets the first pod start at once and holds every later one until ``<dir>/<gate>``
    exists (``<dir>/<gate>.first`` marks that the first pod started)."""
    init = []
    if gate is not None:
        init.append(
            k8s.V1Container(
                name="gate",
                image="busybox:1.36",
                command=[
                    "sh",
                    "-c",
                    f'd="$JOBWATCH_E2E_RELEASE_DIR"; '
                    f'if [ ! -e "$d/{gate}.first" ]; then touch "$d/{gate}.first"; '
                    f'else i=0; until [ -f "$d/{gate}" ] || [ $i -ge {HOLD_AT_MOST_SECONDS * 5} ]; '
                    "do sleep 0.2; i=$((i+1)); done; fi",
                ],
            )
        )
    return {
        "pod_override": k8s.V1Pod(
            spec=k8s.V1PodSpec(
                init_containers=init or None,
                containers=[k8s.V1Container(name="base"), _linger(release)],
            )
        )
    }


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


class ResumeAtOnceAndHold(ResumeAtOnce):
    """Defers to a trigger that fires at once, then holds its resumed task until its DAG's release file
    exists."""

    def resume(self, context: Any, event: Any = None) -> str:
        release = _release_file(context["dag"].dag_id)
        deadline = time.monotonic() + HOLD_AT_MOST_SECONDS
        while not release.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{release} was not created within {HOLD_AT_MOST_SECONDS} s")
            time.sleep(0.2)
        return super().resume(context, event)


with DAG(
    dag_id="restart_during_resume",
    schedule=None,
    catchup=False,
    default_args={"retries": 0},
):
    ResumeAtOnce(task_id="resumes_at_once", executor_config=_with_linger("restart_during_resume"))


with DAG(
    dag_id="kill_during_resume",
    schedule=None,
    catchup=False,
    default_args={"retries": 0},
):
    ResumeAtOnceAndHold(
        task_id="resumes_and_holds",
        executor_config=_with_linger("kill_during_resume.sidecar", gate="kill_during_resume.gate"),
    )

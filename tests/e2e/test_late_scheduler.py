"""A late scheduler on PostgreSQL: one pod per launch, one success per try, whatever the schedulers believe.

Two real ``airflow scheduler`` processes (with api-server and dag-processor) share a PostgreSQL metadata
database, both on JobWatchExecutor, worker pods run by the sandbox. One of them ("scheduler#2") is made
*late*: from a moment the test chooses, every write of its job heartbeat fails with SQLAlchemy's
``OperationalError`` (``tests/e2e/late_scheduler/sitecustomize.py``, loaded by that process only). That is
what a real deployment sees when a statement or lock timeout hits the job row: Airflow's ``Job.heartbeat``
swallows the error, the scheduler loop goes on queueing tasks and creating pods, and its heartbeat stays
stale. Its peer takes it for dead after ``[scheduler] scheduler_health_check_threshold``, marks its job
failed, and from then on adopts, every ``orphaned_tasks_check_interval`` (1 s here), each task instance the
late scheduler queues; the late scheduler's own orphan check, with the same threshold, takes its own job
for dead too and adopts its own tasks back when its peer has not yet.

The late scheduler loops five times as often as its peer (``scheduler_idle_sleep_time`` 0.2 s against
Airflow's default 1 s), so that it queues most of the tasks. Its database is also slow: its locked reads of task instances (the executor's check before
a create) answer after a random delay of up to 0.8 s, and several DAG runs are triggered one after another.
So its launches meet every moment of its peer's adoption rounds: an adoption committed before its check
(the late scheduler drops the launch), one open during its check (the locked row is skipped, and dropped
at the next check), one that begins between its check and its create (the adopter's list misses the pod,
and whichever create of the launch's one name comes second is answered 409), and one after its create (the
pod is adopted and relabelled). Which of these a run met is printed (the counts vary from run to run); what
is asserted holds in all of them:

* every task succeeds once, on try 1, and no earlier try is recorded (no reset, no retry);
* exactly one pod per launch over the whole run, counted from a watch on the namespace (pods the
  executors deleted after their end included);
* the late scheduler really was late and really lost tasks to its peer (its job marked failed while its
  process ran, and pods it created were adopted by the peer or tasks it queued were launched by the peer),
  so that the test tested something.
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.stack import AirflowStack, wait_until

from airflow_jobwatch.executors.pods import LAUNCH_ANNOTATION

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

DAGS = Path(__file__).parent / "dags_ha"
LATE_SITE = Path(__file__).parent / "late_scheduler"
RUNS, TASKS_PER_RUN = 3, 4


@pytest.fixture(scope="module")
def late_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("late") / "heartbeat-fails"


@pytest.fixture(scope="module")
def stack(postgres: Any, late_file: Path) -> Iterator[AirflowStack]:
    python_path = os.pathsep.join(p for p in (str(LATE_SITE), os.environ.get("PYTHONPATH", "")) if p)
    with AirflowStack(
        processes=("api-server", "dag-processor", "scheduler", "scheduler#2"),
        dags_folder=DAGS,
        dag_ids=["ha_sleepers"],
        database_url=postgres.url,
        parallelism=32,
        config={
            ("scheduler", "orphaned_tasks_check_interval"): "1",
        },
        process_env={
            # The peer loops at Airflow's default pace, the late scheduler five times as often: it queues
            # most of the tasks, which its peer then adopts.
            "scheduler": {"AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1"},
            "scheduler#2": {"PYTHONPATH": python_path, "JOBWATCH_E2E_LATE_FILE": str(late_file)},
        },
        start_timeout=180,
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),  # keep AIRFLOW_HOME (logs) for debugging
    ) as s:
        yield s


class PodRecord(threading.Thread):
    """Every pod that exists in ``default`` while the record runs, with its labels at creation and its
    annotations: a list, then a watch resumed from the last resourceVersion after every drop. A watch that
    lost history (410) fails the test rather than leave a gap in the record."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__(name="pod-record", daemon=True)
        self.kubeconfig = kubeconfig
        self.created: dict[str, dict[str, Any]] = {}
        self.error: str | None = None
        self.stop = threading.Event()
        self.ready = threading.Event()

    def _add(self, pod: Any) -> None:
        meta = pod.metadata
        self.created.setdefault(
            meta.name, {"labels": dict(meta.labels or {}), "annotations": dict(meta.annotations or {})}
        )

    def run(self) -> None:
        from kubernetes import client, config, watch
        from kubernetes.client.exceptions import ApiException

        api = client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))
        try:
            listed = api.list_namespaced_pod("default")
            for pod in listed.items:
                self._add(pod)
            version = listed.metadata.resource_version
            self.ready.set()
            while not self.stop.is_set():
                for event in watch.Watch().stream(
                    api.list_namespaced_pod, "default", resource_version=version, timeout_seconds=5
                ):
                    version = event["object"].metadata.resource_version
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._add(event["object"])
                    if self.stop.is_set():
                        break
        except ApiException as err:
            self.error = f"the pod record's watch failed: {err.status} {err.reason}"
        except Exception as err:  # reported by the test, which fails on it
            self.error = f"the pod record's watch failed: {type(err).__name__}: {err}"
        finally:
            self.ready.set()


def _job_state(stack: AirflowStack, job_id: int) -> str | None:
    rows = stack.query("SELECT state FROM job WHERE id = ?", (job_id,))
    return rows[0][0] if rows else None


def _count(stack: AirflowStack, name: str, pattern: str) -> int:
    path = stack.home / "proc-logs" / f"{name}.log"
    return len(re.findall(pattern, path.read_text(errors="replace"))) if path.exists() else 0


def test_a_late_scheduler_and_its_adopter_make_one_pod_per_launch(
    stack: AirflowStack, late_file: Path
) -> None:
    adopter_job = wait_until(
        lambda: stack.scheduler_job_id("scheduler"), timeout=120, what="the first scheduler's executor"
    )
    late_job = wait_until(
        lambda: stack.scheduler_job_id("scheduler#2"), timeout=120, what="the late scheduler's executor"
    )
    record = PodRecord(stack.kubeconfig)
    record.start()
    assert record.ready.wait(30) and record.error is None, record.error
    try:
        late_file.touch()  # from now on the late scheduler's heartbeat writes fail
        wait_until(
            lambda: _job_state(stack, late_job) == "failed",
            timeout=120,
            what=f"the late scheduler (job {late_job}) to be taken for dead",
        )
        run_ids = []
        for _ in range(RUNS):
            run_ids.append(stack.trigger_dag("ha_sleepers", conf={"tasks": TASKS_PER_RUN, "seconds": 1}))
        for run_id in run_ids:
            assert stack.wait_for_run("ha_sleepers", run_id, timeout=240) == "success", stack.task_states(
                "ha_sleepers", run_id
            )
        # The late scheduler ran all along, its heartbeat stale.
        assert stack.procs["scheduler#2"].poll() is None, stack.log_tail("scheduler#2")
        assert _job_state(stack, late_job) == "failed"
    finally:
        record.stop.set()
        record.join(timeout=15)
    assert record.error is None, record.error

    tis: dict[tuple[str, str], Any] = {}
    for run_id in run_ids:
        for task, state in stack.task_states("ha_sleepers", run_id).items():
            tis[(run_id, task)] = state
    assert len(tis) == RUNS * (TASKS_PER_RUN + 1)
    not_once = {k: v for k, v in tis.items() if v["state"] != "success" or v["try_number"] != 1}
    assert not not_once, not_once
    history = stack.query(
        "SELECT run_id, task_id, map_index, try_number, state FROM task_instance_history "
        "WHERE dag_id = 'ha_sleepers'"
    )
    assert history == [], f"a task was reset or retried: {history}"

    # One pod per launch, and one launch per task instance (nothing here defers or is relaunched).
    pods = {
        name: pod
        for name, pod in record.created.items()
        if pod["annotations"].get("dag_id") == "ha_sleepers" and pod["annotations"].get("run_id") in run_ids
    }
    per_launch = Counter(
        (
            p["annotations"].get("run_id"),
            p["annotations"].get("task_id"),
            p["annotations"].get("map_index"),
            p["annotations"].get("try_number"),
            p["annotations"].get(LAUNCH_ANNOTATION),
        )
        for p in pods.values()
    )
    twice = {launch: n for launch, n in per_launch.items() if n != 1}
    assert not twice, ("two pods for one launch", twice, sorted(pods))
    per_task = Counter((launch[0], launch[1], launch[2]) for launch in per_launch)
    assert len(per_task) == len(tis) and set(per_task.values()) == {1}, per_task

    # What the late scheduler and its peer did: which windows this run hit.
    created_by = Counter(p["labels"].get("airflow-worker") for p in pods.values())
    windows = {
        "pods created by the late scheduler": created_by.get(str(late_job), 0),
        "pods created by its peer": created_by.get(str(adopter_job), 0),
        "late: launches held back while an adoption of them was open": _count(
            stack, "scheduler#2", r"is being adopted by another scheduler right now"
        ),
        "late: launches dropped at its database check": _count(
            stack, "scheduler#2", r"is no longer this scheduler's in Airflow's database"
        ),
        "peer: pods adopted from the late scheduler": _count(
            stack, "scheduler", rf"Adopted pod \S+ of .* from scheduler job {late_job}"
        ),
        "peer: queued tasks launched on adoption": _count(
            stack, "scheduler", r"launching it here on the same try"
        ),
        "either: a create answered 409 by the other's pod": _count(stack, "scheduler", r"409")
        + _count(stack, "scheduler#2", r"409"),
    }
    print("late scheduler windows:", windows)
    lost = (
        windows["peer: pods adopted from the late scheduler"]
        + windows["peer: queued tasks launched on adoption"]
    )
    assert lost, ("the late scheduler lost no task to its peer: the test tested nothing", windows)

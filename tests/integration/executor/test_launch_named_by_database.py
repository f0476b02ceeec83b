"""The executor acts for a launch only while Airflow's database names it, read from a real task_instance table.

Airflow's own tables are created in an in-memory SQLite database (no migrations: only the rows these tests
need are written), and the executor reads them through Airflow's sessions, as in a scheduler. Pods run on the
sandbox over HTTP.

- Without a pre-assigned id (Airflow 3.1, 3.2.0, 3.2.1), each launch reports its id at once as a ``queued``
  event, which the scheduler stores as ``external_executor_id``: the database names the current launch.
- "The task never ran" is QUEUED on this try **and** naming this launch: a pod of a launch that the database
  no longer names (the key was queued again on the same try) is neither launched again nor reported.
- A launch queued by another scheduler job, or under another launch id, is never created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from exec_helpers import pods_of, poll, submit, terminal_events
from support.workloads import make_workload

from airflow_jobwatch.executors import results
from airflow_jobwatch.executors.pods import LAUNCH_ANNOTATION

pytestmark = pytest.mark.timeout(180)

# The real check, kept before this directory's conftest answers it for harnesses without rows.
REAL_LAUNCHES_HELD = getattr(results, "launches_held", None)


@pytest.fixture
def task_instance_table(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``put(key, state=..., queued_by=..., launch=...)`` writes a task instance row that Airflow's sessions
    (``create_session``, scoped or not) read."""
    from airflow import settings
    from airflow.models import import_all_models
    from airflow.models.base import Base
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import create_engine, delete, insert
    from sqlalchemy.orm import sessionmaker
    from sqlalchemy.pool import StaticPool

    import_all_models()
    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    Base.metadata.create_all(engine)
    monkeypatch.setattr(settings, "Session", sessionmaker(bind=engine), raising=False)
    monkeypatch.setattr(settings, "NonScopedSession", sessionmaker(bind=engine), raising=False)
    table = TaskInstance.__table__

    def put(key: Any, *, state: str, queued_by: int, launch: str | None) -> None:
        primary = {
            "dag_id": key.dag_id,
            "task_id": key.task_id,
            "run_id": key.run_id,
            "map_index": key.map_index,
        }
        with engine.begin() as conn:
            conn.execute(delete(table).where(*(table.c[k] == v for k, v in primary.items())))
            conn.execute(
                insert(table).values(
                    **primary,
                    try_number=key.try_number,
                    pool="default_pool",
                    state=state,
                    queued_by_job_id=queued_by,
                    external_executor_id=launch,
                )
            )

    yield put
    engine.dispose()


def test_without_a_pre_assigned_id_each_launch_reports_its_id_as_a_queued_event(
    executor_factory: Any, kube_sandbox: Any
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory(job_id="42")
    first = make_workload(task_id="unnamed", command="sleep 30")
    resumed = make_workload(task_id="unnamed", command="exit 0")
    assert first.ti.external_executor_id is None  # as the scheduler of Airflow 3.1 hands it over
    events: list[tuple[Any, Any]] = []
    submit(ex, first)
    poll(ex, lambda: len(pods_of(sandbox, "unnamed")) == 1, timeout=60, what="the first pod", events=events)
    submit(ex, resumed)  # queued again on the same try (resumed after deferral)
    poll(ex, lambda: len(pods_of(sandbox, "unnamed")) == 2, timeout=60, what="the second pod", events=events)
    queued = [info for key, (state, info) in events if str(state) == "queued" and key == first.ti.key]
    by_age = sorted(pods_of(sandbox, "unnamed"), key=lambda p: p["metadata"]["creationTimestamp"])
    launches = {p["metadata"]["annotations"][LAUNCH_ANNOTATION] for p in by_age}
    assert len(queued) == 2 and set(queued) == launches, (queued, launches)
    assert first.ti.key in ex.running


def test_a_failed_pod_of_a_launch_the_database_no_longer_names_is_not_launched_again_nor_reported(
    executor_factory: Any, kube_sandbox: Any, task_instance_table: Any
) -> None:
    """The pre-deferral launch's pod fails as it exits; the resume is queued in the database (same try, a
    new launch id) but waits for a free slot. The database says QUEUED on this try: for another launch."""
    sandbox, _ = kube_sandbox
    ex = executor_factory(
        job_id="42", AIRFLOW__KUBERNETES_EXECUTOR__POD_LAUNCH_FAILURE_EXCLUDED_CONTAINER_REASONS=""
    )
    w = make_workload(task_id="resuming", command="exit 3")
    w.ti.external_executor_id = "launch-before-deferral"
    task_instance_table(w.ti.key, state="queued", queued_by=42, launch="launch-resume")
    events: list[tuple[Any, Any]] = []
    submit(ex, w)
    poll(ex, lambda: w.ti.key not in ex.running, timeout=60, what="the launch to end", events=events)
    for _ in range(5):
        ex.heartbeat()
        events.extend(ex.get_event_buffer().items())
    assert ex.status()["launch_failure_requeues"] == 0, "the pre-deferral launch was launched again"
    assert ex.status()["pods_launched"] == 1
    assert terminal_events(events) == [], "an end was reported for a launch the database does not name"


def test_a_launch_queued_by_another_scheduler_is_never_created(
    executor_factory: Any, kube_sandbox: Any, task_instance_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, _ = kube_sandbox
    if REAL_LAUNCHES_HELD is not None:
        monkeypatch.setattr(results, "launches_held", REAL_LAUNCHES_HELD)
    ex = executor_factory(job_id="42")
    mine = make_workload(task_id="mine", command="exit 0")
    mine.ti.external_executor_id = "launch-mine"
    theirs = make_workload(task_id="theirs", command="exit 0")
    theirs.ti.external_executor_id = "launch-theirs"
    requeued = make_workload(task_id="requeued", command="exit 0")
    requeued.ti.external_executor_id = "launch-old"
    task_instance_table(mine.ti.key, state="queued", queued_by=42, launch="launch-mine")
    task_instance_table(theirs.ti.key, state="queued", queued_by=43, launch="launch-theirs")
    task_instance_table(requeued.ti.key, state="queued", queued_by=42, launch="launch-new")
    events: list[tuple[Any, Any]] = []
    submit(ex, mine, theirs, requeued)
    poll(ex, lambda: terminal_events(events), timeout=60, what="mine to end", events=events)
    poll(ex, lambda: not ex.running, timeout=60, what="every slot to be freed", events=events)
    assert [(k.task_id, s) for k, s, _ in terminal_events(events)] == [("mine", "success")]
    assert ex.status()["pods_launched"] == 1
    assert pods_of(sandbox, "theirs") == [] and pods_of(sandbox, "requeued") == []
    assert ex.status().get("launches_dropped") == 2


def test_an_executor_run_by_no_scheduler_job_launches_without_the_check(
    executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dag.test(use_executor=True)`` starts the executor with no scheduler job: nothing can adopt its
    tasks, and its task instances name no job, so its launches are not held back by the check."""
    sandbox, _ = kube_sandbox
    if REAL_LAUNCHES_HELD is not None:
        monkeypatch.setattr(results, "launches_held", REAL_LAUNCHES_HELD)
    ex = executor_factory(job_id=None)
    w = make_workload(task_id="adhoc", command="exit 0")
    events: list[tuple[Any, Any]] = []
    submit(ex, w)
    poll(ex, lambda: terminal_events(events), timeout=60, what="the task's end", events=events)
    assert [(k.task_id, s) for k, s, _ in terminal_events(events)] == [("adhoc", "success")]


@pytest.mark.sandbox_opts(pod_start_delay=4.0)
def test_a_relaunch_after_one_failed_database_read_is_not_created_for_a_running_task(
    executor_factory: Any, kube_sandbox: Any, task_instance_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database says RUNNING (the task ran) but the pod's status shows no start (evicted while its
    containers were being created), and the one read at the pod's end fails: the pod's status decides, and
    a relaunch is due. Before its pod is created the launch must be QUEUED on its try; it is not, so the
    task fails with the eviction's own words, and no second pod is made for the try."""
    sandbox, _ = kube_sandbox
    if REAL_LAUNCHES_HELD is not None:
        monkeypatch.setattr(results, "launches_held", REAL_LAUNCHES_HELD)
    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_INITIAL_SECONDS", 0.2)
    real_queued_on_try = results.queued_on_try
    reads: list[int] = []

    def fails_once(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        if len(reads) == 1:
            raise ConnectionError("the database went away for a moment")
        return real_queued_on_try(*args, **kwargs)

    monkeypatch.setattr(results, "queued_on_try", fails_once)
    ex = executor_factory(job_id="42")
    w = make_workload(task_id="ran", command="exit 0")
    w.ti.external_executor_id = "launch-ran"
    task_instance_table(w.ti.key, state="queued", queued_by=42, launch="launch-ran")
    events: list[tuple[Any, Any]] = []
    submit(ex, w)
    poll(ex, lambda: len(pods_of(sandbox, "ran")) == 1, timeout=60, what="the pod", events=events)
    task_instance_table(w.ti.key, state="running", queued_by=42, launch="launch-ran")
    sandbox.evict_pod("default", pods_of(sandbox, "ran")[0]["metadata"]["name"])
    poll(ex, lambda: terminal_events(events), timeout=60, what="the task's end", events=events)
    for _ in range(5):
        ex.heartbeat()
        events.extend(ex.get_event_buffer().items())
    ((_, state, info),) = terminal_events(events)
    assert reads, "the database read at the pod's end never ran"
    assert str(state) == "failed" and "evicted" in info and "no longer QUEUED" in info, info
    assert len(pods_of(sandbox, "ran")) == 1 and ex.status()["pods_launched"] == 1


def test_without_a_pre_assigned_id_no_pod_is_created_before_the_database_names_its_launch(
    executor_factory: Any, kube_sandbox: Any, task_instance_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3.1, 3.2.0, 3.2.1: the scheduler stores the launch id this executor reports (a ``queued``
    event) in its loop after the report. An adopter that read the row in between would find the launch
    unnamed and launch the task under an id of its own, a pod name no 409 could fence. So the pod waits until
    the row names its launch; a report the database has not taken after a few reads is made again (same id),
    and once the row names the launch the pod is created under it."""
    from airflow_jobwatch.executors.launching import UNNAMED_REPORT_AGAIN_AFTER_READS

    sandbox, _ = kube_sandbox
    assert REAL_LAUNCHES_HELD is not None
    reads: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return REAL_LAUNCHES_HELD(*args, **kwargs)

    monkeypatch.setattr(results, "launches_held", counted)
    ex = executor_factory(job_id="42")
    w = make_workload(task_id="named_late", command="exit 0")
    assert w.ti.external_executor_id is None  # as the scheduler of Airflow 3.1 hands it over
    task_instance_table(w.ti.key, state="queued", queued_by=42, launch=None)
    events: list[tuple[Any, Any]] = []
    submit(ex, w)
    poll(
        ex,
        lambda: pods_of(sandbox, "named_late") or len(reads) > 2 * UNNAMED_REPORT_AGAIN_AFTER_READS,
        timeout=60,
        what="the executor's reads of the unnamed launch",
        events=events,
    )
    assert pods_of(sandbox, "named_late") == [], "a pod was created before the database named its launch"
    assert ex.status()["pods_launched"] == 0 and w.ti.key in ex.running
    reported = [info for key, (state, info) in events if str(state) == "queued" and key == w.ti.key]
    assert len(reported) >= 2 and len(set(reported)) == 1, reported
    # The scheduler stores the reported id: the pod is created under it.
    task_instance_table(w.ti.key, state="queued", queued_by=42, launch=reported[0])
    poll(ex, lambda: terminal_events(events), timeout=60, what="the task's end", events=events)
    assert [(k.task_id, s) for k, s, _ in terminal_events(events)] == [("named_late", "success")]
    (pod,) = pods_of(sandbox, "named_late")
    assert pod["metadata"]["annotations"][LAUNCH_ANNOTATION] == reported[0]

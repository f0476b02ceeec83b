"""Differential: upstream's KubernetesExecutor and ours on worker pods that fail before their task ran.

Each scenario runs once per executor (parametrised), driven as the scheduler loop drives an executor
(``queue_workload``, ``heartbeat()``, ``get_event_buffer()``), against the sandbox over HTTP:

* evicted once before any container started (the kubelet's eviction of a Pending pod);
* evicted twice;
* a container that cannot start (the sandbox's ``sandbox.jobwatch.io/start-failure: StartError``);
* a container that exits 1 (reason ``Error``) before the task reported that it runs.

Both executors decide "the task never ran" from Airflow's record, not from the pod: the task instance is
still QUEUED on its try in the metadata database. Upstream (cncf.kubernetes 10.20+) reads it in
``KubernetesExecutor._change_state`` through ``_get_task_instance_state(key, session=...)``, one
``SELECT state`` of the task instance, then requeues a Failed pod whose container reason is not in
``pod_launch_failure_excluded_container_reasons`` (default ``Error``), at most ``pod_launch_failure_retries``
times (default 1). Ours reads it through ``results.queued_on_try(keys)``. This harness has no task instance
rows, so those two reads, and nothing else, are answered from one :class:`AirflowRecord`: a task instance is
QUEUED until its worker reports that the task runs, which the worker's command here does by creating a file
before anything else (a real worker's first call to the execution API), and SUCCESS once that worker ended.
Both executors therefore see the same answer for the same pod. Upstream's other read of a task instance,
``_should_create_pod_for_job`` (is this workload still current?), is answered "yes", as in
test_preemption_vs_upstream.py. Upstream runs on an empty SQLite database (no tables): a read of the
database that this harness does not answer fails instead of quietly finding nothing.

Where both executors launch the pod again for the same try, they must agree. Where ours goes further, the
test asserts the difference, which docs/migration.md lists: a disruption before start has its own budget in
ours (``[jobwatch] disruption_relaunches``, default 3), so a second eviction is launched again where
upstream's single ``pod_launch_failure_retries`` requeue is spent and the task fails (a retry spent).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exec_helpers import pods_of, submit, terminal_events, upstream_executor
from support.workloads import make_workload

pytestmark = [pytest.mark.timeout(120), pytest.mark.sandbox_opts(pod_start_delay=1.5)]

KINDS = ["upstream", "jobwatch"]
# The cncf.kubernetes release whose KubernetesExecutor first requeues a pod that failed before its task ran.
UPSTREAM_REQUEUE_SINCE = "10.20.0"


class AirflowRecord:
    """What Airflow's metadata database would say about each task instance's try: QUEUED until its worker
    reported that the task runs (the worker's command creates ``<task_id>.<try_number>`` in ``folder`` before
    anything else), then SUCCESS (it is read only for pods that ended). Every read is kept in ``reads``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.reads: list[str] = []

    def worker(self, task_id: str, then: str) -> str:
        """A worker's shell command: report that try 1 of ``task_id`` runs, then ``then``."""
        return f"touch {self.folder / f'{task_id}.1'} && {then}"

    def state(self, key: Any) -> str:
        self.reads.append(key.task_id)
        return "success" if (self.folder / f"{key.task_id}.{key.try_number}").exists() else "queued"


@pytest.fixture
def record(tmp_path: Path) -> AirflowRecord:
    folder = tmp_path / "reported-running"
    folder.mkdir()
    return AirflowRecord(folder)


@pytest.fixture
def make_executor(
    kind: str,
    executor_factory: Any,
    record: AirflowRecord,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> Iterator[Any]:
    """A started executor of ``kind`` on the sandbox, its "task never ran" read answered by ``record``."""
    from airflow_jobwatch.executors import results

    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_INITIAL_SECONDS", 0.2)
    monkeypatch.setattr(results, "RELAUNCH_BACKOFF_MAX_SECONDS", 0.5)
    monkeypatch.setattr(results, "queued_on_try", lambda keys: {k: record.state(k) == "queued" for k in keys})
    if kind == "jobwatch":
        yield executor_factory()
        return
    pytest.importorskip("airflow.providers.cncf.kubernetes.executors.kubernetes_executor")
    import airflow.providers.cncf.kubernetes as provider
    from packaging.version import Version

    if Version(provider.__version__) < Version(UPSTREAM_REQUEUE_SINCE):
        pytest.skip(
            f"apache-airflow-providers-cncf-kubernetes {provider.__version__} has no requeue of a pod that "
            f"failed before its task ran (added in {UPSTREAM_REQUEUE_SINCE}): it fails such a task, as the "
            "migration guide says"
        )
    from airflow.utils.state import TaskInstanceState

    # An empty SQLite file (no tables): a database read this harness does not answer fails loudly.
    ex = upstream_executor(f"sqlite:///{tmp_path / 'empty.db'}", executor_factory, monkeypatch, request)

    def task_instance_state(key: Any, *, session: Any = None) -> TaskInstanceState:
        return TaskInstanceState(record.state(key))

    ex._get_task_instance_state = task_instance_state  # type: ignore[method-assign]
    ex.start()
    try:
        yield ex
    finally:
        ex.end()


def _final(events: list[tuple[Any, Any]]) -> list[tuple[str, int, str, Any]]:
    """(task_id, try_number, "success" | "failed", info) of every final event, in order."""
    return [(key.task_id, key.try_number, state, info) for key, state, info in terminal_events(events)]


def _drive(
    ex: Any, sandbox: Any, task_id: str, *, evictions: int, timeout: float = 60
) -> tuple[list[tuple[str, int, str, Any]], dict[str, str]]:
    """Heartbeat ``ex`` until ``task_id`` has a final event; evict each of its first ``evictions`` pods while
    it is still Pending (no container started). Returns the final events and every pod of the task seen
    (name -> its try_number annotation)."""
    events: list[tuple[Any, Any]] = []
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while True:
        ex.heartbeat()
        events.extend(ex.get_event_buffer().items())
        for pod in pods_of(sandbox, task_id):
            name = pod["metadata"]["name"]
            if name in seen:
                continue
            seen[name] = str(pod["metadata"]["annotations"].get("try_number"))
            if len(seen) <= evictions:
                assert pod["status"].get("phase") == "Pending", pod["status"]
                sandbox.evict_pod("default", name)
        finals = _final(events)
        if finals:
            return finals, seen
        assert time.monotonic() < deadline, f"no final event of {task_id}; events {events}, pods {seen}"
        time.sleep(0.05)


def _wait_listed(ex: Any, kind: str) -> None:
    """Ours: wait until the watcher has listed, so the first pod is watched from its creation."""
    if kind == "jobwatch":
        deadline = time.monotonic() + 60
        while not ex.supervisor.all_synced():
            ex.heartbeat()
            assert time.monotonic() < deadline, "the watcher never listed"
            time.sleep(0.05)


def _workload(task_id: str, command: str, annotations: dict[str, str] | None) -> Any:
    from kubernetes.client import models as k8s

    container = k8s.V1Container(name="base", command=["sh", "-c", command])
    override = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(annotations=annotations) if annotations else None,
        spec=k8s.V1PodSpec(containers=[container]),
    )
    return make_workload(task_id=task_id, executor_config={"pod_override": override})


# scenario -> (evictions, the worker's command after it reported running (None: it exits 1 before it reports
#              running), pod annotations, {kind: (outcome on try 1, pods launched for try 1)}, ours' counters)
SCENARIOS: dict[
    str, tuple[int, str | None, dict[str, str] | None, dict[str, tuple[str, int]], dict[str, int]]
] = {
    # Both: launched again once for the same try, which succeeds.
    "evicted-once": (
        1,
        "exit 0",
        None,
        {"upstream": ("success", 2), "jobwatch": ("success", 2)},
        {"disruption_relaunches": 1, "launch_failure_requeues": 0},
    ),
    # Upstream's one requeue is spent by the first eviction: the second fails the try (a retry spent).
    # Ours: disruptions have their own budget ([jobwatch] disruption_relaunches, default 3).
    "evicted-twice": (
        2,
        "exit 0",
        None,
        {"upstream": ("failed", 2), "jobwatch": ("success", 3)},
        {"disruption_relaunches": 2, "launch_failure_requeues": 0},
    ),
    # Both: StartError is not excluded, so requeued once; the second pod cannot start either.
    "start-error": (
        0,
        "exit 0",
        {"sandbox.jobwatch.io/start-failure": "StartError"},
        {"upstream": ("failed", 2), "jobwatch": ("failed", 2)},
        {"disruption_relaunches": 0, "launch_failure_requeues": 1},
    ),
    # Both: reason Error is excluded by default (the worker started and died): failed, never relaunched.
    # The worker exits before it reports running, so the task instance is still QUEUED.
    "error-exit": (
        0,
        None,
        None,
        {"upstream": ("failed", 1), "jobwatch": ("failed", 1)},
        {"disruption_relaunches": 0, "launch_failure_requeues": 0},
    ),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_pod_that_failed_before_its_task_ran(
    scenario: str, kind: str, make_executor: Any, kube_sandbox: Any, record: AirflowRecord
) -> None:
    evictions, then, annotations, expected, counters = SCENARIOS[scenario]
    sandbox, _ = kube_sandbox
    ex = make_executor
    _wait_listed(ex, kind)
    task_id = scenario.replace("-", "_")
    command = record.worker(task_id, then) if then is not None else "exit 1"
    submit(ex, _workload(task_id, command, annotations))
    finals, seen = _drive(ex, sandbox, task_id, evictions=evictions)
    outcome, pods = expected[kind]
    assert [(t, n, s) for t, n, s, _ in finals] == [(task_id, 1, outcome)], finals
    assert len(seen) == pods and set(seen.values()) == {"1"}, seen
    assert task_id in record.reads, "the executor did not ask Airflow's record whether the task ran"
    assert not ex.running, ex.running
    if kind == "jobwatch":
        status = ex.status()
        assert {k: status[k] for k in counters} == counters, status
        assert status["pods_launched"] == pods, status
        if outcome == "failed":
            info = str(finals[0][3])
            assert ("StartError" if scenario == "start-error" else "Error") in info, info

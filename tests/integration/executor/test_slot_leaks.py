"""Fault tests: no executor slot is ever held without a pod that can end it.

Each test drives JobWatchExecutor as the scheduler loop does (``heartbeat()`` in a loop) against the
sandbox, with one fault that used to leave a task without a terminal event (its slot leaked) or
stall the scheduler loop:

1. a create whose answer is lost although the server carried it out;
2. a ``pod_override`` namespace outside the watched ones;
3. a watcher restart with many tracked pods missing from the new child's first list, while the API
   server is slow to answer GETs of single pods;
4. a 409 AlreadyExists for a different pod of the same name.

Faults 1 and 3 need an answer lost or held back, which the sandbox never does: a proxy in front of
it (``faultproxy.py``) does.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from exec_helpers import heartbeat_until, submit, terminal, worker_pod_of
from faultproxy import FaultProxy, write_proxy_kubeconfig
from support.workloads import make_workload

pytestmark = pytest.mark.timeout(180)

POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")


def _no_key_twice(all_events: list[tuple[Any, Any]]) -> None:
    counts = Counter(k for k, (state, _) in all_events if str(state) in ("success", "failed"))
    assert all(n == 1 for n in counts.values()), f"a task got more than one terminal event: {counts}"


def _pods_of(sandbox: Any, task_id: str, namespace: str = "default") -> list[dict[str, Any]]:
    return [
        p
        for p in sandbox.objects("pods", namespace)
        if p["metadata"]["annotations"].get("task_id") == task_id
    ]


@pytest.fixture
def proxy(kube_sandbox: Any, tmp_path: Path) -> Any:
    sandbox, _ = kube_sandbox
    with FaultProxy(sandbox.url) as p:
        p.kubeconfig = write_proxy_kubeconfig(str(tmp_path / "proxy-kubeconfig"), p, sandbox.token)
        yield p


def test_create_answer_lost_but_pod_created_still_ends_the_task(
    proxy: Any, executor_factory: Any, kube_sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_jobwatch.executors import base

    sandbox, _ = kube_sandbox
    # The create's answer never comes; the client gives up after 3 s, by which time the short task
    # has long finished. Its retry then meets 409 for its own pod.
    monkeypatch.setattr(base, "API_REQUEST_TIMEOUT", (3.0, 3.0))
    lost: list[str] = []

    def rule(method: str, path: str, query: str) -> str:
        if method == "POST" and path == "/api/v1/namespaces/default/pods" and not lost:
            lost.append(path)
            return "lose_answer"
        return "pass"

    proxy.rule = rule
    ex = executor_factory(kubeconfig=proxy.kubeconfig)
    submit(ex, make_workload(task_id="quick", command="exit 0"))
    all_events: list[tuple[Any, Any]] = []
    events = heartbeat_until(ex, lambda e: "quick" in terminal(e), timeout=60, all_events=all_events)
    assert lost, "the fault was not injected"
    assert terminal(events)["quick"][0] == "success"
    assert ex.running == set(), "the task's slot is still held"
    _no_key_twice(all_events)
    # One pod for the one try: the retry recognised its own pod instead of creating another.
    creates = [m for m, p, _ in proxy.seen if m == "POST" and p == "/api/v1/namespaces/default/pods"]
    assert len(creates) >= 1
    assert ex.status()["pods_launched"] == 1


def test_pod_override_namespace_gets_watched(executor_factory: Any, kube_sandbox: Any, core_v1: Any) -> None:
    sandbox, _ = kube_sandbox
    core_v1.create_namespace({"metadata": {"name": "elsewhere"}})
    ex = executor_factory()
    submit(ex, make_workload(task_id="away", command="sleep 0.5; exit 0", namespace="elsewhere"))
    events = heartbeat_until(ex, lambda e: "away" in terminal(e), timeout=60)
    assert terminal(events)["away"][0] == "success"
    assert ex.running == set()
    assert "elsewhere" in ex.status()["watchers"]


def test_pod_override_namespace_outside_the_configured_list_fails_at_once(
    executor_factory: Any, kube_sandbox: Any, core_v1: Any
) -> None:
    sandbox, _ = kube_sandbox
    core_v1.create_namespace({"metadata": {"name": "elsewhere"}})
    ex = executor_factory(
        AIRFLOW__KUBERNETES_EXECUTOR__MULTI_NAMESPACE_MODE="True",
        AIRFLOW__KUBERNETES_EXECUTOR__MULTI_NAMESPACE_MODE_NAMESPACE_LIST="default",
    )
    submit(ex, make_workload(task_id="away", command="exit 0", namespace="elsewhere"))
    events = heartbeat_until(ex, lambda e: "away" in terminal(e), timeout=30)
    state, info = terminal(events)["away"]
    assert state == "failed"
    assert "'elsewhere'" in info and "multi_namespace_mode_namespace_list" in info
    assert not _pods_of(sandbox, "away", "elsewhere"), "no pod may be created where nobody watches"


def test_watcher_restart_with_missing_pods_does_not_stall_the_scheduler_loop(
    proxy: Any, executor_factory: Any, kube_sandbox: Any, core_v1: Any
) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory(kubeconfig=proxy.kubeconfig)
    doomed = [f"doomed{i}" for i in range(8)]
    submit(ex, *(make_workload(task_id=t, command="sleep 120") for t in doomed))

    def all_running(_: Any) -> bool:
        pods = [p for t in doomed for p in _pods_of(sandbox, t)]
        return len(pods) == len(doomed) and all(p["status"].get("phase") == "Running" for p in pods)

    all_events: list[tuple[Any, Any]] = []
    events: dict[Any, Any] = {}
    heartbeat_until(ex, all_running, timeout=60, events=events, all_events=all_events)
    # From now on the API server answers no GET of a single pod (a black-holed or overloaded server);
    # lists and watches still work.
    proxy.rule = lambda method, path, query: "hold" if method == "GET" and POD_PATH.match(path) else "pass"
    pid = ex.supervisor.child_pids()["default"]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    # While no watcher runs, all the doomed pods are deleted: the replacement will not list them.
    for t in doomed:
        for p in _pods_of(sandbox, t):
            core_v1.delete_namespaced_pod(p["metadata"]["name"], "default", grace_period_seconds=0)
    # The scheduler loop must go on meanwhile: a new task is launched and its end reported, and the
    # longest heartbeat stays far below one GET timeout (30 s) - the old code did one blocking GET per
    # missing pod inside sync(), here 8 x 30 s.
    submit(ex, make_workload(task_id="meanwhile", command="exit 0"))
    longest = 0.0

    def meanwhile_done(e: dict[Any, Any]) -> bool:
        return "meanwhile" in terminal(e) and ex.supervisor.counters.restarts >= 1

    deadline = time.monotonic() + 60
    while not meanwhile_done(events):
        started = time.monotonic()
        ex.heartbeat()
        longest = max(longest, time.monotonic() - started)
        buffered = ex.get_event_buffer()
        all_events.extend(buffered.items())
        events.update(buffered)
        assert time.monotonic() < deadline, f"the scheduler loop stalled; events so far: {events}"
        time.sleep(0.1)
    assert terminal(events)["meanwhile"][0] == "success"
    print(f"longest heartbeat while the GETs were held: {longest:.3f} s")  # for the record, no threshold
    assert not any(t in terminal(events) for t in doomed), "reported before the GET answered"
    proxy.release()
    events = heartbeat_until(
        ex, lambda e: set(doomed) <= set(terminal(e)), timeout=60, events=events, all_events=all_events
    )
    for t in doomed:
        state, info = terminal(events)[t]
        assert state == "failed" and "found deleted while the KubernetesJobWatcher was not running" in info
        assert "its final state is unknown" in info and "retry it" not in info
    assert ex.running == set()
    _no_key_twice(all_events)


def test_409_from_a_pod_of_another_launch_fails_the_task_and_leaves_that_pod_alone(
    executor_factory: Any, kube_sandbox: Any, core_v1: Any
) -> None:
    """A pod's name is fixed by its launch, so a 409 whose pod names the same task instance but another launch
    (or nothing) is not this launch's pod: it is neither counted as created nor relabelled, and the task
    fails saying which pod holds the name. (Taking another name would make a pod that no other scheduler
    could find by name: the fence would be gone.)"""
    from airflow_jobwatch.executors.pods import launch_pod_name

    sandbox, _ = kube_sandbox
    w = make_workload(task_id="unlucky", command="exit 0")
    w.ti.external_executor_id = "launch-mine"
    taken = launch_pod_name(w.ti.key, "launch-mine")
    key = w.ti.key
    core_v1.create_namespaced_pod(
        "default",
        worker_pod_of(key, name=taken, launch="launch-of-someone-else", job_id="77", command="exit 0"),
    )
    ex = executor_factory()
    submit(ex, w)
    events = heartbeat_until(ex, lambda e: "unlucky" in terminal(e), timeout=60)
    state, info = terminal(events)["unlucky"]
    assert state == "failed" and taken in info and "launch-of-someone-else" in info, info
    assert ex.status()["pods_launched"] == 0
    squatter = sandbox.get_object("pods", "default", taken)
    assert squatter is not None and squatter["metadata"]["labels"]["airflow-worker"] == "77", (
        "another launch's pod must be left alone"
    )

"""The KubernetesJobWatcher subprocess and its parent-side supervisor, against the sandbox.

No Airflow processes here: the test plays the scheduler loop (create pods, ``track`` them, ``poll``)
and switches the sandbox's faults on. What is asserted is what the executor would report: for each
tracked pod, at most one ``running`` and exactly one terminal result, with the right phase and reason.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_jobwatch.executors.pods import worker_label_selector
from airflow_jobwatch.executors.watcher import PodResult, WatcherSupervisor
from airflow_jobwatch.kube.cluster.client import ClusterConfig
from airflow_jobwatch.kube.engine.informer import InformerConfig
from airflow_jobwatch.kube.meaning.states import DEFAULT_FATAL_WAITING_REASONS

pytestmark = pytest.mark.timeout(120)

JOB_ID = "7"
LABELS = {"kubernetes_executor": "True", "airflow-worker": JOB_ID}

# Small everything, so that reconnects, stalls and restarts happen within a test's seconds.
FAST_INFORMER = InformerConfig(
    watch_timeout_seconds=5,
    stall_timeout_seconds=3,
    connect_timeout_seconds=2,
    backoff_initial_seconds=0.1,
    backoff_max_seconds=1.0,
    backoff_reset_after_seconds=10,
    unhealthy_after_seconds=5,
)


def pod_body(name: str, command: str, *, image: str = "python:3.11", job_id: str = JOB_ID) -> dict[str, Any]:
    labels = {**LABELS, "airflow-worker": job_id}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": {"dag_id": "d", "task_id": name}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "base", "image": image, "command": ["sh", "-c", command]}],
        },
    }


def poll_until(
    supervisor: Any, done: Callable[[list[Any]], bool], *, timeout: float, results: list[Any] | None = None
) -> list[Any]:
    """Poll the supervisor (as the scheduler loop would) until ``done(results)`` or the deadline."""
    collected: list[Any] = results if results is not None else []
    deadline = time.monotonic() + timeout
    while True:
        collected.extend(supervisor.poll())
        if done(collected):
            return collected
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s; results so far: {collected!r}")
        time.sleep(0.05)


def poll_for(supervisor: Any, seconds: float, results: list[Any]) -> None:
    """Keep polling for a fixed observation window (used to check that nothing more is reported)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        results.extend(supervisor.poll())
        time.sleep(0.05)


@pytest.fixture
def make_supervisor(kube_sandbox, core_v1) -> Iterator[Any]:
    created: list[WatcherSupervisor] = []

    def make(**overrides: Any) -> WatcherSupervisor:
        opts: dict[str, Any] = {
            "cluster": ClusterConfig(config_file=kube_sandbox[1]),
            "namespaces": ["default"],
            "label_selector": worker_label_selector(JOB_ID),
            "informer_config": FAST_INFORMER,
            "fatal_waiting_reasons": DEFAULT_FATAL_WAITING_REASONS,
            "unresponsive_after": 5.0,
            "restart_backoff_initial": 0.1,
            "restart_backoff_max": 0.5,
        }
        opts.update(overrides)
        sup = WatcherSupervisor(**opts)
        created.append(sup)
        sup.start()
        return sup

    yield make
    for sup in created:
        sup.stop(timeout=1.0)


def _create(core_v1: Any, supervisor: WatcherSupervisor, name: str, command: str, **kw: Any) -> None:
    core_v1.create_namespaced_pod("default", pod_body(name, command, **kw))
    supervisor.track("default", name, name)


def _terminal(results: list[PodResult]) -> dict[str, PodResult]:
    counts = Counter(r.key for r in results if r.terminal)
    duplicated = {k: n for k, n in counts.items() if n > 1}
    assert not duplicated, f"more than one terminal report for {duplicated}"
    return {str(r.key): r for r in results if r.terminal}


def _wait_synced(supervisor: WatcherSupervisor, timeout: float = 20) -> list[PodResult]:
    return poll_until(supervisor, lambda _: supervisor.all_synced(), timeout=timeout)


def test_running_then_exactly_one_terminal_report(make_supervisor, core_v1):
    sup = make_supervisor()
    results = _wait_synced(sup)
    _create(core_v1, sup, "ok", "sleep 0.5; exit 0")
    _create(core_v1, sup, "bad", "sleep 0.5; echo boom >&2; exit 3")
    poll_until(sup, lambda rs: len(_terminal(rs)) == 2, timeout=30, results=results)
    # Further polling must not produce anything new for these pods.
    poll_for(sup, 1.0, results)
    terminal = _terminal(results)
    assert terminal["ok"].phase == "succeeded"
    assert terminal["bad"].phase == "failed"
    assert terminal["bad"].exit_code == 3
    assert sum(1 for r in results if r.key == "ok" and r.phase == "running") <= 1
    assert sup.tracked() == {}


def test_sigkill_with_deletions_in_the_gap_reports_deleted_exactly_once(
    make_supervisor, core_v1, kube_sandbox
):
    sandbox, _ = kube_sandbox
    sup = make_supervisor()
    results = _wait_synced(sup)
    for name in ("gone-graceful", "gone-forced", "survivor", "finisher"):
        _create(core_v1, sup, name, "sleep 60" if name != "finisher" else "sleep 1.5; exit 0")
    poll_until(
        sup,
        lambda rs: (
            {r.key for r in rs if r.phase == "running"} >= {"gone-graceful", "gone-forced", "survivor"}
        ),
        timeout=30,
        results=results,
    )
    pid = sup.child_pids()["default"]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    # While nobody watches: one pod deleted normally, one force-deleted (node loss), one finishes.
    core_v1.delete_namespaced_pod("gone-graceful", "default", grace_period_seconds=0)
    sandbox.force_delete_pod("default", "gone-forced")
    deadline = time.monotonic() + 20
    while (sandbox.get_object("pods", "default", "finisher") or {}).get("status", {}).get(
        "phase"
    ) != "Succeeded":
        assert time.monotonic() < deadline, "the finisher pod did not succeed"
        time.sleep(0.1)

    poll_until(
        sup,
        lambda rs: {"gone-graceful", "gone-forced", "finisher"} <= set(_terminal(rs)),
        timeout=30,
        results=results,
    )
    terminal = _terminal(results)
    for name in ("gone-graceful", "gone-forced"):
        assert terminal[name].phase == "failed"
        assert terminal[name].reason == "Deleted"
        assert terminal[name].gap
    assert terminal["finisher"].phase == "succeeded"
    assert "survivor" not in terminal
    assert sup.counters.restarts == 1
    assert sup.counters.gap_deleted == 2
    # The survivor is still watched by the new child: its end is still reported.
    core_v1.delete_namespaced_pod("survivor", "default", grace_period_seconds=0)
    poll_until(sup, lambda rs: "survivor" in _terminal(rs), timeout=30, results=results)
    assert _terminal(results)["survivor"].reason == "Deleted"


@pytest.mark.sandbox_opts(history_window=1, bookmark_interval=None)
def test_410_storm_and_dropped_watches_lose_nothing(make_supervisor, core_v1, kube_sandbox):
    sandbox, _ = kube_sandbox
    sup = make_supervisor()
    results = _wait_synced(sup)
    names = [f"p{i}" for i in range(12)]
    for i, name in enumerate(names):
        _create(core_v1, sup, name, f"sleep {0.2 + (i % 4) * 0.3}; exit {i % 3}")
    deadline = time.monotonic() + 60
    while len(_terminal(results)) < len(names):
        assert time.monotonic() < deadline, f"only {sorted(_terminal(results))} reported"
        # Cut every watch; while "expired" is on, each resumed watch is answered 410 Gone at once,
        # so the informer must relist (and then resume from the list's resourceVersion).
        sandbox.set_watch_expired(True)
        sandbox.drop_watches()
        poll_for(sup, 0.3, results)
        sandbox.set_watch_expired(False)
        poll_for(sup, 0.3, results)
    terminal = _terminal(results)
    for i, name in enumerate(names):
        expected = "succeeded" if i % 3 == 0 else "failed"
        assert terminal[name].phase == expected, (name, terminal[name])
    poll_until(sup, lambda _: sup.counters.relists >= 1, timeout=10, results=results)
    assert sup.counters.restarts == 0  # a 410 is not a crash
    assert len(_terminal(results)) == len(names)


def test_wedged_child_is_replaced(make_supervisor, core_v1):
    sup = make_supervisor(unresponsive_after=1.5)
    results = _wait_synced(sup)
    _create(core_v1, sup, "while-wedged", "sleep 1; exit 0")
    pid = sup.child_pids()["default"]
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # alive, but its event loop never runs again
    try:
        poll_until(sup, lambda rs: "while-wedged" in _terminal(rs), timeout=30, results=results)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert _terminal(results)["while-wedged"].phase == "succeeded"
    assert sup.counters.restarts == 1
    assert sup.child_pids()["default"] != pid


def test_unpullable_image_fails_fast_with_the_reason(make_supervisor, core_v1, kube_sandbox):
    sandbox, _ = kube_sandbox
    sandbox.set_image_pull_failure(r"^registry\.invalid/")
    sup = make_supervisor()
    results = _wait_synced(sup)
    _create(core_v1, sup, "no-image", "exit 0", image="registry.invalid/nope:1")
    poll_until(sup, lambda rs: "no-image" in _terminal(rs), timeout=30, results=results)
    r = _terminal(results)["no-image"]
    assert r.phase == "failed"
    assert r.reason in ("ErrImagePull", "ImagePullBackOff")


def test_api_outage_then_reported_when_it_returns(make_supervisor, core_v1, kube_sandbox):
    sandbox, _ = kube_sandbox
    sup = make_supervisor()
    results = _wait_synced(sup)
    _create(core_v1, sup, "through-outage", "sleep 1.5; exit 0")
    sandbox.start_outage()
    try:
        # The pod finishes while the API server is unreachable; the child keeps retrying.
        poll_for(sup, 4.0, results)
        assert "through-outage" not in _terminal(results)
    finally:
        sandbox.end_outage()
    poll_until(sup, lambda rs: "through-outage" in _terminal(rs), timeout=30, results=results)
    assert _terminal(results)["through-outage"].phase == "succeeded"
    assert sup.counters.restarts == 0


@pytest.mark.sandbox_opts(namespaces=("default", "team-b"))
@pytest.mark.parametrize("scopes", [["default", "team-b"], [None]], ids=["per-namespace", "all-namespaces"])
def test_multi_namespace_watchers_and_scoped_gap_check(make_supervisor, core_v1, scopes):
    sup = make_supervisor(namespaces=scopes)
    results = _wait_synced(sup)
    assert set(sup.child_pids()) == set(scopes)
    for ns in ("default", "team-b"):
        core_v1.create_namespaced_pod(ns, pod_body(f"long-{ns}", "sleep 60"))
        sup.track(ns, f"long-{ns}", f"long-{ns}")
        core_v1.create_namespaced_pod(ns, pod_body(f"short-{ns}", "sleep 0.5; exit 0"))
        sup.track(ns, f"short-{ns}", f"short-{ns}")
    poll_until(
        sup,
        lambda rs: (
            {"short-default", "short-team-b"} <= set(_terminal(rs))
            and {"long-default", "long-team-b"} <= {r.key for r in rs if r.phase == "running"}
        ),
        timeout=30,
        results=results,
    )
    # Kill the watcher that covers team-b, delete its long pod while it is down.
    victim_scope = "team-b" if "team-b" in scopes else None
    pid = sup.child_pids()[victim_scope]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    core_v1.delete_namespaced_pod("long-team-b", "team-b", grace_period_seconds=0)
    poll_until(sup, lambda rs: "long-team-b" in _terminal(rs), timeout=30, results=results)
    terminal = _terminal(results)
    assert terminal["long-team-b"].reason == "Deleted"
    assert "long-default" not in terminal  # untouched, still running, still tracked
    assert sup.counters.restarts == 1
    assert sup.counters.gap_deleted == 1
    assert {"default", "team-b"} & {ref[0] for ref in sup.tracked()} == {"default"}


def test_crash_loop_backs_off(make_supervisor, tmp_path):
    # A child that cannot even build its client (here: a kubeconfig that does not exist) dies while
    # starting. That is a crash loop, not an incident: the replacement waits for the backoff (10 s
    # ceiling, equal jitter: at least 5 s) instead of being started at once.
    sup = make_supervisor(
        cluster=ClusterConfig(config_file=str(tmp_path / "missing-kubeconfig")),
        restart_backoff_initial=10.0,
        restart_backoff_max=10.0,
    )
    results: list[PodResult] = []
    poll_until(sup, lambda _: sup.counters.restarts >= 1, timeout=30, results=results)
    poll_for(sup, 2.0, results)
    assert sup.counters.restarts == 1
    assert sup.child_pids()["default"] is None  # waiting for the backoff, not respawning
    assert sup.counters.per_namespace["default"]["last_restart_reason"].startswith(
        "the watcher process exited"
    )

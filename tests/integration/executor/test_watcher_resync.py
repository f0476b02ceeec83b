"""The watcher's periodic resync never leaves a pod's end unseen.

A pod that ends and is deleted (by a user, by the scheduler preempting it) must be reported with the end it
really had, whenever that happens. ``resync_interval_seconds`` once closed the watch and listed again: a pod
that ended and was deleted between the two was only found missing, and reported "deleted while running"
(its success, or the disruption that ended it, lost). Here every list is refused from the moment the resync
is due, which holds that moment open for as long as the test needs: the pod ends and is deleted inside it.
After a 410 a list cannot be avoided: a pod found missing then is reported with its end unknown.

No Airflow processes: the test plays the scheduler loop (create, ``track``, ``poll``), as in test_watcher.py.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from test_watcher import FAST_INFORMER, _create, _terminal, _wait_synced, make_supervisor, poll_until

from airflow_jobwatch.executors.watcher import PodResult, WatcherSupervisor

pytestmark = pytest.mark.timeout(120)

__all__ = ["make_supervisor"]  # the fixture, shared with test_watcher.py

# A resync due one second after each list; watches that last a minute, so that the only watch request
# ending within the test's first seconds is the one the resync ends.
RESYNC_INFORMER = dataclasses.replace(FAST_INFORMER, resync_interval_seconds=1.0, watch_timeout_seconds=60)


def _wait(what: str, condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.05)


def _hold_the_resync(sandbox: Any, sup: WatcherSupervisor, results: list[PodResult]) -> None:
    """Refuse every list from now on, and wait until the resync was due: the child either tried to list
    (its watch closed, so nothing is watched until a list succeeds) or resumed its watch."""
    before = sandbox.counters()
    sandbox.set_error_rate(1.0, status=500, verbs=["list"])
    poll_until(
        sup,
        lambda _: any(
            sandbox.counters().get(f"{verb} pods", 0) > before.get(f"{verb} pods", 0)
            for verb in ("list", "watch")
        ),
        timeout=30,
        results=results,
    )


def _gone(sandbox: Any, name: str) -> bool:
    return sandbox.get_object("pods", "default", name) is None


def _running(
    make_supervisor: Any, core_v1: Any, name: str, command: str, **supervisor: Any
) -> tuple[Any, Any]:
    """A supervisor whose watcher has synced and seen the pod ``name`` running ``command``."""
    sup = make_supervisor(**supervisor)
    results = _wait_synced(sup)
    _create(core_v1, sup, name, command)
    poll_until(
        sup,
        lambda rs: any(r.key == name and r.phase == "running" for r in rs),
        timeout=30,
        results=results,
    )
    return sup, results


def _end_of(sup: Any, results: Any, name: str) -> Any:
    """The terminal result the supervisor reports for the pod ``name``."""
    poll_until(sup, lambda rs: name in _terminal(rs), timeout=30, results=results)
    return _terminal(results)[name]


def test_a_pod_that_succeeds_and_is_deleted_at_the_resync_is_reported_succeeded(
    make_supervisor, core_v1, kube_sandbox, tmp_path: Path
):
    sandbox, _ = kube_sandbox
    release = tmp_path / "release"
    sup, results = _running(
        make_supervisor,
        core_v1,
        "finisher",
        f"while [ ! -e {release} ]; do sleep 0.05; done; exit 0",
        informer_config=RESYNC_INFORMER,
    )

    _hold_the_resync(sandbox, sup, results)
    try:
        release.touch()
        _wait(
            "the pod succeeded",
            lambda: (
                (sandbox.get_object("pods", "default", "finisher") or {}).get("status", {}).get("phase")
                == "Succeeded"
            ),
        )
        # Deleted by someone else (kubectl delete, a cleanup job) right after its end.
        core_v1.delete_namespaced_pod("finisher", "default", grace_period_seconds=0)
        _wait("the pod was deleted", lambda: _gone(sandbox, "finisher"))
    finally:
        sandbox.set_error_rate(0.0)

    result = _end_of(sup, results, "finisher")
    assert (result.phase, result.reason) == ("succeeded", "Completed"), result


def test_a_pod_preempted_at_the_resync_is_reported_with_its_disruption(
    make_supervisor, core_v1, kube_sandbox
):
    sandbox, _ = kube_sandbox
    sup, results = _running(make_supervisor, core_v1, "victim", "sleep 60", informer_config=RESYNC_INFORMER)

    _hold_the_resync(sandbox, sup, results)
    try:
        # The scheduler preempts it: a DisruptionTarget condition, then the deletion.
        sandbox.preempt_pod("default", "victim", grace_seconds=0)
        _wait("the pod was deleted", lambda: _gone(sandbox, "victim"))
    finally:
        sandbox.set_error_rate(0.0)

    result = _end_of(sup, results, "victim")
    assert (result.phase, result.reason) == ("failed", "PreemptionByScheduler"), result
    assert result.disruption and "preempted" in result.disruption, result


def test_a_pod_deleted_while_a_410_relist_is_held_is_reported_with_an_unknown_end(
    make_supervisor, core_v1, kube_sandbox
):
    """After a 410 a list cannot be avoided, and a pod deleted before it succeeds is found only missing: its
    end was not seen, and the report says so instead of claiming it was deleted "before it finished"."""
    sandbox, _ = kube_sandbox
    sup, results = _running(make_supervisor, core_v1, "unseen", "sleep 60")

    before = sandbox.counters()
    sandbox.set_error_rate(1.0, status=500, verbs=["list"])
    sandbox.set_watch_expired(True)  # the resumed watch is answered 410 Gone: the child must list
    try:
        sandbox.drop_watches()
        poll_until(
            sup,
            lambda _: sandbox.counters().get("list pods", 0) > before.get("list pods", 0),
            timeout=30,
            results=results,
        )
        core_v1.delete_namespaced_pod("unseen", "default", grace_period_seconds=0)
        _wait("the pod was deleted", lambda: _gone(sandbox, "unseen"))
    finally:
        sandbox.set_watch_expired(False)
        sandbox.set_error_rate(0.0)

    result = _end_of(sup, results, "unseen")
    assert (result.phase, result.reason) == ("failed", "Deleted"), result
    assert "last seen running" in result.message and "final state is unknown" in result.message, result
    assert "before it finished" not in result.message, result

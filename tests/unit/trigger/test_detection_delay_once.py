"""``jobwatch.triggerer.detection_delay`` is sampled once per wait, not once per decision.

A Job can be terminal (here ``FailureTarget``) while one of its pods is still running or terminating; the
trigger then holds its result until the pods are final and re-decides on every informer callback meanwhile.
Each decision used to send a detection delay, so one Job gave as many samples as its pods had changes.

The namespace watch is a stub (a few recorded objects behind ``job`` / ``pods_of``): the sandbox cannot
hold a Job in that state on demand, and what is under test is the trigger's own state machine.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from airflow_jobwatch import metrics
from airflow_jobwatch.triggers.job import JobTrigger

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _load(kind: str, name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / kind / f"{name}.json").read_text())


class _Watch:
    """What the wait reads from a synced NamespaceWatch."""

    synced = True
    refusals = None  # the namespace's refusal watch, for pod-less Jobs; these Jobs have pods

    def __init__(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        self._job, self.pods = job, pods

    def job(self, name: str) -> dict[str, Any] | None:
        return self._job if name == self._job["metadata"]["name"] else None

    def pods_of(self, uid: str) -> list[dict[str, Any]]:
        return list(self.pods)

    def tombstone(self, name: str) -> None:
        return None


def test_a_held_result_sends_one_detection_delay(monkeypatch) -> None:
    samples: list[str] = []
    monkeypatch.setattr(metrics, "detection_delay", lambda seconds, *, status: samples.append(status))
    job = _load("jobs", "failure-target")  # bad-fac2: FailureTarget, one pod failed
    failed = _load("pods", "failed-exit-3")
    still_running = copy.deepcopy(_load("pods", "running"))
    still_running["metadata"].update(
        name="bad-fac2-other", uid="other", ownerReferences=failed["metadata"]["ownerReferences"]
    )
    watch = _Watch(job, [failed, still_running])

    async def scenario() -> dict[str, Any]:
        wait = JobTrigger("bad-fac2", "default", job_uid=job["metadata"]["uid"])._wait()
        wait.watch = watch  # type: ignore[assignment]
        for _ in range(3):  # informer callbacks while the other pod is still running: held
            wait.on_change()
        assert not wait.result.done()
        ended = copy.deepcopy(failed)
        ended["metadata"].update(name="bad-fac2-other", uid="other")
        watch.pods = [failed, ended]
        wait.on_change()
        return await asyncio.wait_for(wait.result, 5)

    payload = asyncio.run(scenario())
    assert payload["outcome"] == "failed"
    assert samples == ["failed"]

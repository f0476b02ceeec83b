"""The wait of one trigger runs on what it is handed: a ``WaitTarget``, a ``Decisions`` and a ``subscribe``.

No trigger is built here: each test hands the wait a stub of the one interface under test, which is
what the seam is for. What the cache means is ``JobDecisions``' (tested against the sandbox elsewhere);
here the stubs say what they decided, and the tests check what the wait does with it.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from airflow_jobwatch.triggers.waiting import Wait, WaitTarget

TARGET = WaitTarget(
    job_name="seam",
    namespace="default",
    job_uid="uid-1",
    deadline=None,
    poll_interval=30.0,
    propagation_policy="Foreground",
    grace_period_seconds=None,
    api_failure_tolerance=lambda: 300.0,
)


class _Notes:
    def __init__(self) -> None:
        self.bound = self.closed = False

    def bind_context(self, context: contextvars.Context) -> None:
        self.bound = True

    def close(self) -> None:
        self.closed = True


class _Decisions:
    """A ``Decisions`` that finds the Job failed at its first look, its one pod failed too."""

    access_denied = None
    log = None

    def __init__(self) -> None:
        self.notes = _Notes()
        self.asked: list[str] = []

    def payload(self, outcome: str, reason: str | None, message: str, **found: Any) -> dict[str, Any]:
        self.asked.append("payload")
        pods = found.get("pods") or []
        return {
            "outcome": outcome,
            "reason": reason,
            "message": message,
            "job": found.get("job"),
            "pods": pods,
        }

    def decide(self, watch: Any) -> dict[str, Any]:
        self.asked.append("decide")
        job = {"status": {"failed": 1}}
        return self.payload("failed", "BackoffLimitExceeded", "failed", job=job, pods=[{"phase": "Failed"}])

    async def with_whole_job(self, watch: Any, payload: dict[str, Any]) -> None:
        self.asked.append("with_whole_job")
        payload["whole"] = True


class _Subscription:
    def __init__(self) -> None:
        self.watch = object()
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def test_a_wait_reports_what_its_decisions_decided_and_leaves_the_watch() -> None:
    decisions, subscription = _Decisions(), _Subscription()
    callbacks: list[Any] = []

    async def subscribe(on_change: Any) -> _Subscription:
        callbacks.append(on_change)
        return subscription

    async def scenario() -> dict[str, Any]:
        return await Wait(TARGET, decisions, subscribe).run()  # type: ignore[arg-type]

    payload = asyncio.run(scenario())
    assert (payload["outcome"], payload["reason"], payload["whole"]) == (
        "failed",
        "BackoffLimitExceeded",
        True,
    )
    assert decisions.asked == ["decide", "payload", "with_whole_job"]
    assert len(callbacks) == 1 and subscription.closed
    assert decisions.notes.bound and decisions.notes.closed


def test_a_watch_that_cannot_be_joined_ends_the_wait_saying_why() -> None:
    decisions = _Decisions()

    async def subscribe(on_change: Any) -> _Subscription:
        raise FileNotFoundError("no kubeconfig at /nowhere")

    async def scenario() -> dict[str, Any]:
        return await Wait(TARGET, decisions, subscribe).run()  # type: ignore[arg-type]

    payload = asyncio.run(scenario())
    assert (payload["outcome"], payload["reason"]) == ("error", "ConfigError")
    assert payload["message"] == (
        "Cannot watch Job default/seam: FileNotFoundError: no kubeconfig at /nowhere"
    )
    assert decisions.asked == ["payload"]  # nothing decided, nothing read: there is no watch
    assert decisions.notes.closed

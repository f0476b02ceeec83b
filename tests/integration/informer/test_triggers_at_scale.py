"""Correctness at scale: 2,000 JobTriggers in one event loop share one namespace watch, and each
gets exactly its own Job's outcome while the watch is hit by a storm of 410 Expired answers (every reconnect
relists and reconciles 2,000 Jobs). Scaled down from bench/bench_trigger.py; nothing here is timed.

The Job controller is off: the test writes each Job's terminal condition itself (success, two kinds of
failure with a message naming the Job, or deletion), so the expected outcome of every trigger is known.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from informer_helpers import NS, api_client_for, eventually
from kubernetes_asyncio.client import BatchV1Api

from airflow_jobwatch.triggers.job import (
    OUTCOME_DELETED,
    OUTCOME_FAILED,
    OUTCOME_SUCCESS,
    OUTCOME_UNKNOWN,
    JobTrigger,
)
from airflow_jobwatch.triggers.registry import get_registry

# the event's `outcome` words (its `status` is upstream's success/error)
STATUS_DELETED, STATUS_FAILED, STATUS_SUCCESS = OUTCOME_DELETED, OUTCOME_FAILED, OUTCOME_SUCCESS

N = 2000
CHUNK = 100  # concurrent API writes at a time
ROUND = 250  # outcomes written per round of the 410 storm


@pytest.fixture
def fast_trigger_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for option, value in {
        "WATCH_TIMEOUT_SECONDS": "30",
        "WATCH_STALL_TIMEOUT_SECONDS": "5",
        "API_CONNECT_TIMEOUT_SECONDS": "5",
        "BACKOFF_INITIAL_SECONDS": "0.05",
        "BACKOFF_MAX_SECONDS": "0.5",
        "BACKOFF_RESET_AFTER_SECONDS": "5",
        "UNHEALTHY_AFTER_SECONDS": "30",
        "RESYNC_INTERVAL_SECONDS": "0",
        "API_FAILURE_TOLERANCE_SECONDS": "600",
        "NAMESPACE_WATCH_LINGER_SECONDS": "0",
    }.items():
        monkeypatch.setenv(f"AIRFLOW__JOBWATCH__{option}", value)


def manifest(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                }
            }
        },
    }


def expected(i: int) -> tuple[str, str | None]:
    """(status, reason) the trigger of Job i must report."""
    return [
        (STATUS_SUCCESS, "Complete"),
        (STATUS_FAILED, "BackoffLimitExceeded"),
        (STATUS_FAILED, "DeadlineExceeded"),
        (STATUS_DELETED, "Deleted"),
    ][i % 4]


def condition(ctype: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-03T00:00:00Z",
    }


async def in_chunks(coros: list[Any]) -> list[Any]:
    results: list[Any] = []
    for start in range(0, len(coros), CHUNK):
        results += await asyncio.gather(*coros[start : start + CHUNK])
    return results


@pytest.mark.slow
async def test_2000_triggers_each_get_their_own_outcome_under_a_410_storm(
    make_sandbox, tmp_path, fast_trigger_config
):
    sandbox = make_sandbox(history_window=50, bookmark_interval=None)
    path = sandbox.write_kubeconfig(str(tmp_path / "kubeconfig"))
    async with api_client_for(sandbox, tmp_path) as client:
        batch = BatchV1Api(client)
        names = [f"scale-{i:04d}" for i in range(N)]
        created = await in_chunks([batch.create_namespaced_job(NS, manifest(n)) for n in names])
        uids = [job.metadata.uid for job in created]

        triggers = [
            JobTrigger(name, NS, config_file=path, job_uid=uid, poll_interval=60)
            for name, uid in zip(names, uids, strict=True)
        ]
        waits = [asyncio.create_task(t.wait()) for t in triggers]
        registry = get_registry()
        await eventually(lambda: sum(registry.active().values()) == N, within=120, what="all subscribed")
        [watch] = [w for w in registry._watches.values()]
        assert await watch.wait_synced(60)

        order = list(range(N))
        random.Random(11).shuffle(order)  # outcomes land in random order, mixed with the relists

        async def finish(i: int) -> None:
            name = names[i]
            status, reason = expected(i)
            if status == STATUS_DELETED:
                await batch.delete_namespaced_job(name, NS, propagation_policy="Background")
                return
            ctype = "Complete" if status == STATUS_SUCCESS else "Failed"
            body = {"status": {"conditions": [condition(ctype, str(reason), f"outcome of {name}")]}}
            await batch.patch_namespaced_job_status(name, NS, body)

        def expired_job_watches() -> int:
            return sandbox.counters().get("expired watch jobs", 0)

        # The storm, round by round so that it cannot miss: the open watches are cut while every new one
        # is answered 410, and a round's outcomes are written while its watch relists. A round ends only
        # once the shared Job watch came back and was told 410 Expired at least once more.
        try:
            for round_no, start in enumerate(range(0, N, ROUND)):
                before = expired_job_watches()
                sandbox.set_watch_expired(True)
                sandbox.drop_watches()
                await in_chunks([finish(i) for i in order[start : start + ROUND]])
                await eventually(
                    lambda before=before: expired_job_watches() > before,
                    within=60,
                    what=f"the Job watch answered 410 in round {round_no}",
                )
                sandbox.set_watch_expired(False)
                await asyncio.sleep(random.uniform(0.05, 0.3))
            results = await asyncio.wait_for(asyncio.gather(*waits), timeout=600)
        finally:
            sandbox.set_watch_expired(False)
            for task in waits:
                task.cancel()

    assert watch.jobs is not None
    # The storm really hit the shared watch: every round's reconnect was answered 410 and relisted.
    counters = sandbox.counters()
    assert counters.get("expired watch jobs", 0) >= N // ROUND, (
        f"no 410 storm, the test proves nothing: {counters}"
    )
    wrong = []
    for i, payload in enumerate(results):
        status, reason = expected(i)
        own = payload["name"] == names[i] and payload["uid"] == uids[i]
        # A deletion the watch saw is `deleted`; one that happened while it relisted was not seen (the
        # Job is only missing from the list, still running when last seen): `unknown`, never claimed.
        seen = (payload["outcome"], payload["reason"])
        if status == STATUS_DELETED and seen == (OUTCOME_UNKNOWN, "FinalStateUnknown") and own:
            continue
        if payload["outcome"] != status or payload["reason"] != reason or not own:
            wrong.append((names[i], status, reason, payload))
        elif status != STATUS_DELETED and f"outcome of {names[i]}" not in payload["message"]:
            wrong.append((names[i], "message", payload["message"]))
    assert wrong == [], f"{len(wrong)} triggers got another outcome, first: {wrong[:3]}"
    assert registry.active() == {}

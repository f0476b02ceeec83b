"""Deferrable Jobs that end and are removed at once (``ttlSecondsAfterFinished: 0``) while the
triggerer's watches are disrupted: a real scheduler, triggerer and dag-processor with LocalExecutor on
SQLite, the sandbox running the Jobs.

* Watches cut, every new one answered 410 and every LIST failing while two Jobs end and vanish: the
  triggerer sees neither their ends nor their deletions. Those tasks end with what was seen: their real
  outcome where the pods' final states prove it, else the `unknown` message.
* Then every watch dropped (no 410) as four Jobs end and vanish: the watches resume where they were
  and miss nothing, so those tasks end with their real outcome (success, or failed with the container's
  exit code).

No task ends with a claimed deletion ("deleted ... before it finished").
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.stack import AirflowStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

DAG_ID = "ttl_zero_jobs"
DAGS = Path(__file__).parent / "dags_unseen_endings"
#: Each pair of Jobs ends when the test creates its gate file (see the DAG).
DROPPED, GAP = (0, 1), (2,)
TASKS = [f"{kind}_{i}" for i in (*DROPPED, *GAP) for kind in ("ok", "fail")]
UNKNOWN = re.compile(r"unknown: FinalStateUnknown: .*its final state is unknown")
EXIT_3 = re.compile(r"failed: BackoffLimitExceeded: .*exited with code 3")
CLAIMED_DELETION = re.compile(r"deleted (while running, )?before (it finished|its result could be read)")


@pytest.fixture(scope="module")
def gate() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="jobwatch-gate-") as d:
        yield Path(d) / "go"


@pytest.fixture(scope="module")
def stack(gate: Path) -> Iterator[AirflowStack]:
    with AirflowStack(
        executor="LocalExecutor",
        triggerer=True,
        dags_folder=DAGS,
        dag_ids=[DAG_ID],
        parallelism=8,
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),  # keep AIRFLOW_HOME (logs) for debugging
        env={"JOBWATCH_E2E_GATE": str(gate)},
        # The watches come back within a second of the faults' end (the stack caps backoff at 5 s).
        config={("jobwatch", "backoff_initial_seconds"): "0.2"},
        sandbox_args=["--bookmark-interval", "1"],
    ) as s:
        yield s


def _jobs_of(stack: AirflowStack, pairs: tuple[int, ...]) -> list[dict[str, Any]]:
    tasks = {f"{kind}_{i}" for i in pairs for kind in ("ok", "fail")}
    return [
        j for j in stack.admin.objects("jobs", "default") if j["metadata"]["labels"].get("task_id") in tasks
    ]


def _pods_of(stack: AirflowStack, pairs: tuple[int, ...]) -> list[dict[str, Any]]:
    prefixes = tuple(f"job-{kind}-{i}-" for i in pairs for kind in ("ok", "fail"))
    return [p for p in stack.admin.objects("pods", "default") if p["metadata"]["name"].startswith(prefixes)]


def _open(gate: Path, pairs: tuple[int, ...]) -> None:
    for i in pairs:
        gate.with_name(f"{gate.name}.{i}").touch()


def test_jobs_that_end_and_vanish_while_the_watches_are_disrupted(stack: AirflowStack, gate: Path) -> None:
    started = time.monotonic()
    run_id = stack.trigger_dag(DAG_ID)

    def all_waiting() -> bool:
        states = stack.task_states(DAG_ID, run_id)
        running = [
            p
            for p in stack.admin.objects("pods", "default")
            if (p.get("status") or {}).get("phase") == "Running"
        ]
        return (
            len(states) == len(TASKS)
            and all(s["state"] == "deferred" for s in states.values())
            and len(running) == len(TASKS)
        )

    wait_until(all_waiting, timeout=120, what="every task deferred, its pod running")
    # The triggerer's Job watch is open (the tasks' workers never watch).
    wait_until(lambda: stack.admin.counters().get("watch jobs", 0) > 0, timeout=30, what="the Job watch")
    deferred = time.monotonic()

    # 1. Every watch cut, every new one answered 410 and every LIST failing: the watches must relist
    # and cannot while the first Jobs end and vanish with their pods (first, so that their resumes'
    # hold after the deferral runs while the other Jobs end).
    stack.admin.fault("set_error_rate", share=1.0, verbs=["list"])
    stack.admin.fault("set_watch_expired", on=True)
    try:
        lists = stack.admin.counters().get("list jobs", 0)
        stack.admin.fault("drop_watches")
        wait_until(
            lambda: stack.admin.counters().get("list jobs", 0) > lists, timeout=30, what="a failing relist"
        )
        _open(gate, GAP)
        wait_until(
            lambda: not _jobs_of(stack, GAP) and not _pods_of(stack, GAP),
            timeout=30,
            what="the first Jobs' and their pods' removal",
        )
    finally:
        stack.admin.fault("set_watch_expired", on=False)
        stack.admin.fault("set_error_rate", share=0.0)
    assert stack.admin.counters().get("expired watch jobs", 0) > 0, "no 410: the test proves nothing"
    # The watches are back (a watch is opened again only after a LIST succeeded): a Job that ended and
    # vanished before that would be a gap's Job too.
    before = stack.admin.counters()

    def watching_again() -> bool:
        now = stack.admin.counters()
        return all(now.get(key, 0) > before.get(key, 0) for key in ("watch jobs", "watch pods"))

    wait_until(watching_again, timeout=30, what="the Job and pod watches to be reopened")

    # 2. Then every watch cut as the other Jobs end and vanish: each watch resumes from where it was,
    # and the API replays what it missed.
    _open(gate, DROPPED)
    stack.admin.fault("drop_watches")
    wait_until(lambda: not _jobs_of(stack, DROPPED), timeout=30, what="the other Jobs' removal")
    ended = time.monotonic()

    stack.wait_for_run(DAG_ID, run_id, timeout=120)
    states = stack.task_states(DAG_ID, run_id)
    endings: dict[str, str] = {}
    wrong: dict[str, str] = {}
    for task, s in states.items():
        log = stack.task_log(DAG_ID, run_id, task, s["try_number"] or 1)
        unseen = int(task.rsplit("_", 1)[1]) in GAP
        if CLAIMED_DELETION.search(log):
            wrong[task] = f"claims a deletion it did not see: {log[-2000:]}"
        elif unseen and s["state"] == "failed" and UNKNOWN.search(log):
            endings[task] = "unknown"
        elif task.startswith("ok") and s["state"] == "success":
            endings[task] = "success"
        elif task.startswith("fail") and s["state"] == "failed" and EXIT_3.search(log):
            endings[task] = "failed, exit code 3"
        else:
            said = [line for line in log.splitlines() if re.search(r"ended|Task failed|ERROR|error", line)]
            wrong[task] = f"{s['state']}: {said[-5:] or log[-2000:]}"
    print(
        f"endings: {endings}; seconds: {deferred - started:.1f} to the deferrals, "
        f"{ended - deferred:.1f} of faults, {time.monotonic() - ended:.1f} to the run's end"
    )
    assert sorted(states) == sorted(TASKS), states
    assert not wrong, wrong

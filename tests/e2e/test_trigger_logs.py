"""A deferrable get_logs=True KubernetesJobOperator under a real scheduler and triggerer: the trigger
writes the pods' logs into the task's log and ends the task itself, with no worker resume. Every line of
a burst written at the Job's end reaches the task's log (none only the triggerer's own log). A log storm
(200,000 empty lines) neither stalls the triggerer's loop nor holds up a task without logs."""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.stack import AirflowStack

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

DAG_ID = "trigger_logs"
STORM_DAG_ID = "trigger_log_storm"
DAGS = Path(__file__).parent / "dags_trigger_logs"


@pytest.fixture(scope="module")
def stack() -> Iterator[AirflowStack]:
    with AirflowStack(
        triggerer=True,
        dags_folder=DAGS,
        dag_ids=[DAG_ID, STORM_DAG_ID],
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),
    ) as s:
        yield s


def _files(stack: AirflowStack, run_id: str, dag_id: str = DAG_ID, task_id: str = "burst") -> dict[str, str]:
    base = stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    return {p.name: p.read_text(errors="replace") for p in sorted(base.glob("attempt=1.log*"))}


def test_get_logs_task_ends_from_the_triggerer_with_every_line(stack: AirflowStack) -> None:
    run_id = stack.trigger_dag(DAG_ID)
    assert stack.wait_for_run(DAG_ID, run_id, timeout=150) == "success"
    files = _files(stack, run_id)
    worker = files.pop("attempt=1.log", "")
    assert files, f"no trigger log beside the worker's: {sorted(files)}"
    trigger = "\n".join(files.values())
    # the lines of the pod, each once, in order, after the init container's
    burst = re.findall(r"\[job-burst-[a-z0-9-]+\] \[base\] burst line (\d{5}) of the main container", trigger)
    assert [int(n) for n in burst] == list(range(1, 3001)), (len(burst), burst[-3:])
    init = trigger.index("[prepare] init says hi")
    assert init < trigger.index("burst line 00001")
    assert trigger.index("ended: success") < init
    # no worker resumed the task: the worker's file ends at the deferral, and nothing it writes on
    # resume (the ending lines, the pods' logs) is in it
    assert "burst line" not in worker and "ended: success" not in worker, worker[-2000:]
    assert "burst line" not in (stack.home / "proc-logs" / "triggerer.log").read_text(errors="replace")
    rows = stack.query(
        "SELECT state, try_number, next_method, end_date FROM task_instance WHERE dag_id = ? AND run_id = ?",
        (DAG_ID, run_id),
    )
    assert [(r[0], r[1]) for r in rows] == [("success", 1)], rows
    print(f"Job end to task end: {_job_end_to_task_end(stack, 'job-burst', rows[0][3]):.1f} s")


def _job_end_to_task_end(stack: AirflowStack, job_prefix: str, end_date: object) -> float:
    """Seconds from the Job's terminal condition (whole seconds) to the task instance's ``end_date``."""
    job = next(
        j for j in stack.admin.objects("jobs", "default") if j["metadata"]["name"].startswith(job_prefix)
    )
    ended = max(
        c["lastTransitionTime"]
        for c in job["status"]["conditions"]
        if c["type"] in ("Complete", "SuccessCriteriaMet")
    )
    job_end = datetime.datetime.fromisoformat(ended.replace("Z", "+00:00"))
    task_end = datetime.datetime.fromisoformat(str(end_date)).replace(tzinfo=datetime.UTC)
    return (task_end - job_end).total_seconds()


def test_a_log_storm_neither_stalls_the_triggerer_nor_holds_up_a_task_without_logs(
    stack: AirflowStack,
) -> None:
    run_id = stack.trigger_dag(STORM_DAG_ID)
    assert stack.wait_for_run(STORM_DAG_ID, run_id, timeout=180) == "success"
    rows = dict(
        stack.query(
            "SELECT task_id, end_date FROM task_instance WHERE dag_id = ? AND run_id = ?",
            (STORM_DAG_ID, run_id),
        )
    )
    quiet = _job_end_to_task_end(stack, "job-quiet", rows["quiet"])
    print(f"the task without logs: Job end to task end {quiet:.1f} s")
    # before, it queued behind the storm's whole tail: 50 s and more (the bound is whole seconds
    # of lastTransitionTime plus the scheduler's and the triggerer's own passes)
    assert quiet < 15, quiet
    triggerer = (stack.home / "proc-logs" / "triggerer.log").read_text(errors="replace")
    assert "event loop appears deadlocked" not in triggerer
    storm = "\n".join(v for k, v in _files(stack, run_id, STORM_DAG_ID, "storm").items() if ".trigger." in k)
    assert "lines) of this log left out" in storm, storm[-2000:]

"""A deferrable get_logs=True KubernetesJobOperator under a real scheduler and triggerer: the trigger
writes the pods' logs into the task's log and ends the task itself, with no worker resume. Every line of
a burst written at the Job's end reaches the task's log (none only the triggerer's own log)."""

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
DAGS = Path(__file__).parent / "dags_trigger_logs"


@pytest.fixture(scope="module")
def stack() -> Iterator[AirflowStack]:
    with AirflowStack(
        triggerer=True,
        dags_folder=DAGS,
        dag_ids=[DAG_ID],
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),
    ) as s:
        yield s


def _files(stack: AirflowStack, run_id: str) -> dict[str, str]:
    base = stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / "task_id=burst"
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
    job = next(
        j for j in stack.admin.objects("jobs", "default") if j["metadata"]["name"].startswith("job-burst")
    )
    ended = max(
        c["lastTransitionTime"]
        for c in job["status"]["conditions"]
        if c["type"] in ("Complete", "SuccessCriteriaMet")
    )
    job_end = datetime.datetime.fromisoformat(ended.replace("Z", "+00:00"))
    task_end = datetime.datetime.fromisoformat(str(rows[0][3])).replace(tzinfo=datetime.UTC)
    print(f"Job end to task end: {(task_end - job_end).total_seconds():.1f} s")

"""A deferrable get_logs=True KubernetesJobOperator under a real scheduler and triggerer: the trigger
writes the pods' logs into the task's log and ends the task itself, with no worker resume. Every line of
a burst written at the Job's end reaches the task's log (none only the triggerer's own log). A log storm
(200,000 empty lines) neither stalls the triggerer's loop nor holds up a task without logs."""

from __future__ import annotations

import datetime
import json
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
SECRETS_DAG_ID = "trigger_logs_secrets"
# The connection and the sensitive Variable the secrets DAG renders into its pods' env_vars.
DB_PASSWORD, API_TOKEN = "e2e-conn-pass-5Rw9", "e2e-var-token-Zq7m"
SECRETS_ENV = {
    "AIRFLOW_CONN_JOBWATCH_E2E_DB": json.dumps({"conn_type": "generic", "password": DB_PASSWORD}),
    "AIRFLOW_VAR_JOBWATCH_E2E_API_TOKEN": API_TOKEN,
}


@pytest.fixture(scope="module")
def stack() -> Iterator[AirflowStack]:
    with AirflowStack(
        triggerer=True,
        dags_folder=DAGS,
        dag_ids=[DAG_ID, SECRETS_DAG_ID, STORM_DAG_ID],
        env=SECRETS_ENV,
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
    # A deadline on the behaviour, not a speed measurement (that is bench/bench_trigger_log_storm.py): before,
    # the task queued behind the storm's whole tail, 50 s and more; within the deadline it did not (it is
    # whole seconds of lastTransitionTime plus the scheduler's and the triggerer's own passes, on a loaded
    # machine).
    assert quiet < 30, quiet
    triggerer = (stack.home / "proc-logs" / "triggerer.log").read_text(errors="replace")
    assert "event loop appears deadlocked" not in triggerer
    storm = "\n".join(v for k, v in _files(stack, run_id, STORM_DAG_ID, "storm").items() if ".trigger." in k)
    assert "lines) of this log left out" in storm, storm[-2000:]


def test_the_triggerer_masks_the_tasks_secrets_as_a_worker_does(stack: AirflowStack) -> None:
    """A connection password and a sensitive Variable echoed by the pods show as ``***`` in every line
    the triggerer writes for the task (its pod log, XCom and termination-message lines), in the
    triggerer's own log, and in the event a resumed task's trigger logs."""
    run_id = stack.trigger_dag(SECRETS_DAG_ID)
    assert stack.wait_for_run(SECRETS_DAG_ID, run_id, timeout=150) == "success"
    ends_here = _files(stack, run_id, SECRETS_DAG_ID, "ends_here")
    resumes = _files(stack, run_id, SECRETS_DAG_ID, "resumes")
    triggerer = (stack.home / "proc-logs" / "triggerer.log").read_text(errors="replace")
    for name, text in [
        *((f"ends_here/{k}", v) for k, v in ends_here.items()),
        *((f"resumes/{k}", v) for k, v in resumes.items()),
        ("triggerer.log", triggerer),
    ]:
        assert DB_PASSWORD not in text and API_TOKEN not in text, f"a secret in clear in {name}"
    trigger = "\n".join(v for k, v in ends_here.items() if ".trigger." in k)
    assert "] [base] connecting with ***" in trigger and "] [base] token=***" in trigger, trigger[-3000:]
    assert "xcom result:" in trigger and '{\\"password\\": \\"***\\"}' in trigger, trigger[
        -3000:
    ]  # JSON lines
    # the resumed task's trigger logged its event, whose Job carries no env value
    resumed_trigger = "\n".join(v for k, v in resumes.items() if ".trigger." in k)
    assert "Trigger fired event" in resumed_trigger and "DB_PASSWORD" in resumed_trigger, resumed_trigger[
        -3000:
    ]
    assert "connecting with ***" in resumes["attempt=1.log"]  # the worker's own masking, for comparison
    rows = stack.query(
        "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (SECRETS_DAG_ID, run_id)
    )
    assert sorted(rows) == [("ends_here", "success"), ("resumes", "success")], rows
    [xcom] = stack.query(
        "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'ends_here' AND key = 'return_value'",
        (SECRETS_DAG_ID, run_id),
    )
    assert DB_PASSWORD in str(xcom[0])  # the value itself is the pod's, unmasked, as a worker stores it

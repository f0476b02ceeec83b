"""XCom results larger than a termination message, returned whole through the pods' native XCom
sidecar, under ``run_dag`` (a real ``dag.test()``): deferred (the trigger ends the task, reading the
sidecar's log in the triggerer) and in the worker."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from airflow_jobwatch_testing import RunningSandbox, run_dag

pytestmark = pytest.mark.timeout(600)

#: A program that writes ``size`` bytes of JSON (a list of records, not compressible to nothing) to
#: the default XCom path; the same list is rebuilt by :func:`_expected`.
_WRITER = (
    "import json, sys; n = int(sys.argv[1]); "
    "data = [{'id': i, 'name': 'row-%08d' % i, 'hex': format(i * 2654435761 % 2**32, '08x')} for i in range(n)]; "
    "json.dump(data, open('/airflow/xcom/return.json', 'w'))"
)


def _expected(rows: int) -> list[dict[str, object]]:
    return [
        {"id": i, "name": f"row-{i:08d}", "hex": format(i * 2654435761 % 2**32, "08x")} for i in range(rows)
    ]


def _rows_for(size: int) -> int:
    return size // len(json.dumps(_expected(1)[0]) + ", ") + 1


def _dag(tmp_path: Path, tasks: dict[str, tuple[bool, int, int]]) -> Path:
    """A DAG of one KubernetesJobOperator task per entry: task id -> (deferrable, rows, parallelism).
    One DAG run (one fresh Airflow) shows several paths."""
    operators = "".join(
        f"""
                KubernetesJobOperator(
                    task_id={task_id!r},
                    image="python:3.12-slim",
                    cmds=["python", "-c", {_WRITER!r}, "{rows}"],
                    wait_until_job_complete=True,
                    deferrable={deferrable!r},
                    backoff_limit=0,
                    parallelism={parallelism},
                    completions={parallelism},
                    do_xcom_push=True,
                    get_logs=False,
                )"""
        for task_id, (deferrable, rows, parallelism) in tasks.items()
    )
    path = tmp_path / "xcom_dag.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import datetime

            from airflow.sdk import DAG

            from airflow_jobwatch.operators.job import KubernetesJobOperator

            with DAG("xcom_dag", schedule=None, start_date=datetime.datetime(2026, 1, 1)):{operators}
            """
        )
    )
    return path


def test_a_1_mib_json_result_comes_back_whole_in_the_worker_and_deferred(
    tmp_path: Path, jobwatch_sandbox: RunningSandbox
) -> None:
    rows = _rows_for(1024 * 1024)
    run = run_dag(_dag(tmp_path, {"in_worker": (False, rows, 1), "deferred": (True, rows, 1)}))
    for task_id in ("in_worker", "deferred"):
        job = run.task(task_id)
        assert job.state == "success", job.log[-5000:]
        value = job.xcoms["return_value"]
        assert len(json.dumps(value)) > 1024 * 1024
        assert value == _expected(rows)
        assert "xcom result" in job.log and "characters)" in job.log  # not copied whole into the log


@pytest.mark.slow  # 10 MiB twice through the sandbox
def test_10_mib_results_and_a_parallel_jobs_per_pod_results_come_back_whole(
    tmp_path: Path, jobwatch_sandbox: RunningSandbox
) -> None:
    big, each = _rows_for(10 * 1024 * 1024), _rows_for(256 * 1024)
    tasks = {"big_in_worker": (False, big, 1), "big_deferred": (True, big, 1), "parallel": (True, each, 2)}
    run = run_dag(_dag(tmp_path, tasks))
    for task_id in tasks:
        assert run.task(task_id).state == "success", run.task(task_id).log[-5000:]
    assert run.task("big_in_worker").xcoms["return_value"] == _expected(big)
    assert run.task("big_deferred").xcoms["return_value"] == _expected(big)
    # one value per pod (unwrap_single applies to one pod only)
    assert run.task("parallel").xcoms["return_value"] == [_expected(each), _expected(each)]

"""The pytest plugin ``airflow_jobwatch_testing`` as a DAG author uses it: the ``jobwatch_sandbox``
fixture, ``run_dag`` (real ``dag.test()`` runs in a fresh Airflow) and the fault helpers, with
KubernetesJobOperator deferred and not; and the example that opens docs/testing.md, run verbatim."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_jobwatch_testing import DagRunError, RunningSandbox, run_dag

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


def _dag_file(
    tmp_path: Path, *, deferrable: bool, command: str, xcom: bool = False, default_xcom_path: bool = False
) -> Path:
    """A DAG of two tasks: a Job, then a Python task that reads the Job's XComs."""
    xcom_args = f"do_xcom_push=True, xcom_path={str(tmp_path / 'return.json')!r}," if xcom else ""
    if default_xcom_path:
        xcom_args = "do_xcom_push=True,"
    path = tmp_path / "job_dag.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import datetime

            from airflow.sdk import DAG, task

            from airflow_jobwatch.operators.job import KubernetesJobOperator

            with DAG("job_dag", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
                job = KubernetesJobOperator(
                    task_id="job",
                    image="busybox:1.36",
                    cmds=["sh", "-c", {command!r}],
                    wait_until_job_complete=True,
                    deferrable={deferrable!r},
                    backoff_limit=0,
                    job_poll_interval=5,
                    {xcom_args}
                )

                @task
                def after(name):
                    print("job was", name)
                    return name

                after(job.output["job_name"])
            """
        )
    )
    return path


@pytest.mark.parametrize("deferrable", [False, True], ids=["in-worker", "deferred"])
def test_run_dag_runs_the_job_operator_and_returns_states_xcoms_and_logs(
    tmp_path: Path, jobwatch_sandbox: RunningSandbox, deferrable: bool
) -> None:
    command = f"echo line from the job; printf '{{\"answer\": 42}}' > {tmp_path / 'return.json'}"
    run = run_dag(_dag_file(tmp_path, deferrable=deferrable, command=command, xcom=True))

    assert run.state == "success", run.log[-5000:]
    assert run.states == {"job": "success", "after": "success"}
    job = run.task("job")
    assert job.xcoms["return_value"] == {"answer": 42}
    assert job.xcoms["job_namespace"] == "default"
    assert job.xcoms["job_name"].startswith("job-job-")
    assert run.task("after").xcoms["return_value"] == job.xcoms["job_name"]
    assert "[base] line from the job" in job.log
    assert "line from the job" not in run.task("after").log
    assert f"job was {job.xcoms['job_name']}" in run.task("after").log
    # dag.test() runs a deferred task's trigger in line: its log is the task's
    assert ("running trigger in line" in job.log) is deferrable
    # the Job ran in the fixture's sandbox, through the connection the fixture defined
    assert [j["metadata"]["name"] for j in jobwatch_sandbox.jobs()] == [job.xcoms["job_name"]]


@pytest.mark.slow  # a fresh Airflow per run (~15-50 s on a loaded 2-core machine)
def test_a_container_writing_the_documented_xcom_path_passes_with_no_setup(
    tmp_path: Path, jobwatch_sandbox: RunningSandbox
) -> None:
    """The operator's default XCom file /airflow/xcom/return.json maps to a per-pod folder of the
    sandbox: the value comes back and the host's /airflow is never created or written."""
    before = os.path.lexists("/airflow") and sorted(os.listdir("/airflow"))
    command = "echo '{\"answer\": 42}' > /airflow/xcom/return.json"
    run = run_dag(_dag_file(tmp_path, deferrable=False, command=command, default_xcom_path=True))
    job = run.task("job")
    assert job.state == "success", job.log
    assert job.xcoms["return_value"] == {"answer": 42}
    after = os.path.lexists("/airflow") and sorted(os.listdir("/airflow"))
    assert after == before


@pytest.mark.parametrize("deferrable", [False, True], ids=["in-worker", "deferred"])
def test_fault_helpers_during_a_run_dropped_watches_and_410_are_survived(
    tmp_path: Path, jobwatch_sandbox: RunningSandbox, deferrable: bool
) -> None:
    marker = tmp_path / "go"

    def expired_watches() -> int:
        counters = jobwatch_sandbox.thread.counters()
        return sum(n for name, n in counters.items() if name.startswith("expired watch"))

    def faults() -> None:
        jobwatch_sandbox.wait_for_pod()
        # the waiter's watches may be between a list and their watch request: cut them once open
        deadline = time.monotonic() + 120
        while jobwatch_sandbox.drop_watches() == 0:
            assert time.monotonic() < deadline, "no watch was ever open to cut"
            time.sleep(0.1)
        jobwatch_sandbox.answer_410()  # the watches resumed after the cut meet 410 Gone
        while expired_watches() == 0:
            assert time.monotonic() < deadline, "no watch met 410"
            time.sleep(0.1)
        jobwatch_sandbox.answer_410(False)
        marker.touch()  # the job ends only after the faults

    command = f"echo waiting; while [ ! -e {marker} ]; do sleep 0.2; done; echo released"
    run = run_dag(_dag_file(tmp_path, deferrable=deferrable, command=command), during=faults)

    assert run.states == {"job": "success", "after": "success"}, run.log[-5000:]
    assert "released" in run.task("job").log
    assert expired_watches() >= 1


@pytest.mark.slow  # a fresh Airflow per run (~15-50 s on a loaded 2-core machine)
def test_fault_helpers_during_a_run_an_evicted_pod_fails_the_task(
    tmp_path: Path, jobwatch_sandbox: RunningSandbox
) -> None:
    def evict() -> None:
        pod = jobwatch_sandbox.wait_for_pod()
        jobwatch_sandbox.evict_pod("default", pod["metadata"]["name"])

    run = run_dag(_dag_file(tmp_path, deferrable=True, command="sleep 300"), during=evict)

    assert run.state == "failed"
    assert run.states == {"job": "failed", "after": "upstream_failed"}
    assert "Evicted" in run.task("job").log


@pytest.mark.slow  # a fresh Airflow per run (~15-50 s on a loaded 2-core machine)
def test_an_exception_in_during_stops_the_run_and_is_raised(
    tmp_path: Path, jobwatch_sandbox: RunningSandbox
) -> None:
    def fail() -> None:
        jobwatch_sandbox.wait_for_pod()
        raise RuntimeError("fault helper failed")

    with pytest.raises(RuntimeError, match="fault helper failed"):
        run_dag(_dag_file(tmp_path, deferrable=False, command="sleep 300"), during=fail)


def test_a_dag_built_inside_a_test_gets_a_clear_error(tmp_path: Path) -> None:
    from airflow.sdk import DAG

    with DAG("built_here", schedule=None) as dag:
        pass
    with pytest.raises(DagRunError, match=r"no DAG 'built_here' at module level .* write it to a file"):
        run_dag(dag)
    with pytest.raises(DagRunError, match="no DAG file at"):
        run_dag(tmp_path / "missing.py")


def test_the_fixture_defines_the_connection_for_the_test_only(jobwatch_sandbox: RunningSandbox) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    assert "AIRFLOW_CONN_KUBERNETES_DEFAULT" in os.environ
    pods = KubernetesHook(conn_id="kubernetes_default").core_v1_client.list_namespaced_pod("default")
    assert pods.items == []


def test_the_connection_is_gone_after_the_test() -> None:
    # runs after the test above (file order): the fixture's environment did not leak
    assert "AIRFLOW_CONN_KUBERNETES_DEFAULT" not in os.environ


def _code_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.S)


def test_the_example_that_opens_docs_testing_md_passes_as_written(tmp_path: Path) -> None:
    """The first two Python blocks of docs/testing.md (a DAG file and a test, each naming its path in its
    first line), written where they say and run with pytest in a new process, with the plugin."""
    blocks = _code_blocks((ROOT / "docs" / "testing.md").read_text())[:2]
    for block in blocks:
        first = block.splitlines()[0]
        assert first.startswith("# "), f"the block must name its file in its first line: {first!r}"
        target = tmp_path / first[2:].strip()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block)
    assert (tmp_path / "dags" / "hello_job.py").exists()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(ROOT), str(ROOT / "airflow-jobwatch-testing"), os.environ.get("PYTHONPATH", "")]
        ),
    )
    env.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "airflow_jobwatch_testing.plugin",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout


@pytest.mark.jobwatch_sandbox(conn_id="my_k8s", namespace="team-a")
def test_the_marker_as_documented_names_the_connection_and_creates_its_namespace(
    jobwatch_sandbox: RunningSandbox,
) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    hook = KubernetesHook(conn_id="my_k8s")
    assert hook.get_namespace() == "team-a"
    # the namespace exists: a Job can be created there (404 `namespaces "team-a" not found` otherwise)
    assert hook.core_v1_client.read_namespace("team-a").metadata.name == "team-a"
    assert (jobwatch_sandbox.conn_id, jobwatch_sandbox.namespace) == ("my_k8s", "team-a")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kubernetes_conn_id": "x"}, r"unknown option kubernetes_conn_id='x'; did you mean conn_id=\?"),
        ({"namespce": "a"}, r"unknown option namespce='a'; did you mean namespace=\?"),
        ({"history_windw": 1}, r"did you mean history_window=\?"),
        ({"namespace": 5}, r"namespace must be a non-empty string, got 5"),
        ({"namespaces": "team-a"}, r"write namespace='team-a'"),
    ],
)
def test_a_misspelt_marker_option_is_refused_with_the_right_spelling(
    options: dict[str, object], message: str
) -> None:
    from airflow_jobwatch_testing.plugin import _fixture_options

    with pytest.raises(ValueError, match=message):
        _fixture_options(options)


def test_inside_the_fixture_everything_a_dag_reads_to_find_the_cluster_is_the_sandbox(
    jobwatch_sandbox: RunningSandbox,
) -> None:
    """What the example DAGs read: the connection, ``[kubernetes_executor] config_file`` (which
    dags_example/deferrable_jobs.py passes as ``config_file``) and, with neither, ``$KUBECONFIG``."""
    from airflow.configuration import conf
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from airflow_jobwatch.kube.cluster.client import ClusterConfig, sync_api_client

    kubeconfig = str(jobwatch_sandbox.kubeconfig)
    assert conf.get("kubernetes_executor", "config_file") == kubeconfig
    assert conf.getboolean("kubernetes_executor", "in_cluster") is False
    hook = KubernetesHook(conn_id=None, config_file=conf.get("kubernetes_executor", "config_file"))
    assert hook.core_v1_client.list_namespaced_pod("default").items == []
    # no connection and no config_file: the client reads $KUBECONFIG, as kubectl does
    from kubernetes import client as k8s

    api = sync_api_client(ClusterConfig(in_cluster=False))
    assert k8s.CoreV1Api(api).list_namespaced_pod("default").items == []
    assert api.configuration.host == jobwatch_sandbox.url


@pytest.mark.slow  # a fresh Airflow per run (~15-50 s on a loaded 2-core machine)
def test_a_task_that_ends_the_run_process_is_named_with_the_cause(tmp_path: Path) -> None:
    path = tmp_path / "exits.py"
    path.write_text(
        textwrap.dedent(
            """
            import datetime
            import os

            from airflow.sdk import DAG, task

            with DAG("exits", schedule=None, start_date=datetime.datetime(2026, 1, 1)):

                @task
                def exit_nonzero():
                    os._exit(3)

                exit_nonzero()
            """
        )
    )
    with pytest.raises(DagRunError) as err:
        run_dag(path)
    message = str(err.value)
    assert "the run's process exited with code 3 while task 'exit_nonzero' ran" in message, message[-3000:]
    assert "os._exit()" in message

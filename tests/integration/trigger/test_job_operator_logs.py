"""get_logs of KubernetesJobOperator against the sandbox: decoded lines prefixed with pod and container,
every requested container of every pod (parallel and retried pods included), streamed while the Job runs
when the wait is in the worker, read after the end when it was deferred."""

from __future__ import annotations

import asyncio
import re
import threading
from collections import defaultdict
from typing import Any

import pytest
import structlog.testing
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred

from airflow_jobwatch.triggers.job import JobTrigger

from .conftest import NS
from .test_job_operator import _rendered, make_context, make_operator, wait_until_sync

pytestmark = pytest.mark.timeout(180)

_LINE = re.compile(r"^\[(?P<pod>[^\]]+)\] \[(?P<container>[^\]]+)\] (?P<text>.*)$")

#: A bytes repr (b'...') in a log, not a word that happens to end in "b" before a quote (a pod name).
BYTES_REPR = re.compile(r"(?<!\w)b['\"]")


def _lines_by_container(text: str) -> dict[tuple[str, str], list[str]]:
    """The task log's container lines, per (pod, container), in order."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out[(m["pod"], m["container"])].append(m["text"])
    return out


def _two_containers(op_kwargs: dict[str, Any], lines: int) -> dict[str, Any]:
    """A pod with the base container and a second one, each printing ``lines`` numbered lines."""
    from kubernetes.client import models as k8s

    side = k8s.V1Container(
        name="side",
        image="busybox:1.36",
        command=["sh", "-c", f"for i in $(seq 1 {lines}); do echo side-$i; done"],
    )
    op_kwargs.update(
        cmds=["sh", "-c", f"for i in $(seq 1 {lines}); do echo base-$i; done"],
        full_pod_spec=k8s.V1Pod(spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base"), side])),
        container_logs=True,
    )
    return op_kwargs


@pytest.mark.parametrize("deferred", [False, True], ids=["in-worker", "deferred"])
def test_every_line_of_every_container_of_every_pod(sandbox, kubeconfig, deferred):
    op = make_operator(
        kubeconfig,
        **_two_containers(
            dict(
                wait_until_job_complete=True, deferrable=deferred, get_logs=True, parallelism=3, completions=3
            ),
            300,
        ),
    )
    context = make_context()
    with structlog.testing.capture_logs() as logs:
        if deferred:
            with pytest.raises(TaskDeferred) as info:
                op.execute(context)
            event = asyncio.run(JobTrigger(**info.value.trigger.serialize()[1]).wait())
            op.execute_complete(context, event)
        else:
            op.execute(context)
    text = _rendered(logs)
    assert not BYTES_REPR.search(text), text[-3000:]
    by_container = _lines_by_container(text)
    pods = {pod for pod, _ in by_container}
    assert len(pods) == 3, sorted(by_container)
    for pod in pods:
        assert by_container[(pod, "base")] == [f"base-{i}" for i in range(1, 301)]
        assert by_container[(pod, "side")] == [f"side-{i}" for i in range(1, 301)]


def test_retried_pods_and_init_containers(sandbox, kubeconfig, tmp_path):
    from kubernetes.client import models as k8s

    marker = tmp_path / "first-try-done"
    op = make_operator(
        kubeconfig,
        cmds=[
            "sh",
            "-c",
            f"if [ -f {marker} ]; then echo second-try; else touch {marker}; echo first-try; exit 1; fi",
        ],
        init_containers=[
            k8s.V1Container(name="prepare", image="busybox:1.36", command=["echo", "init-says-hi"])
        ],
        init_container_logs=True,
        backoff_limit=1,
        wait_until_job_complete=True,
        get_logs=True,
    )
    with structlog.testing.capture_logs() as logs:
        op.execute(make_context())
    by_container = _lines_by_container(_rendered(logs))
    base = sorted(lines for (pod, c), lines in by_container.items() if c == "base")
    assert base == [["first-try"], ["second-try"]], dict(by_container)
    inits = [lines for (pod, c), lines in by_container.items() if c == "prepare"]
    assert inits == [["init-says-hi"], ["init-says-hi"]]


def test_logs_stream_while_the_job_runs(sandbox, kubeconfig, tmp_path):
    """The first line is in the task log while the container still runs (waits for a file)."""
    release = tmp_path / "release"
    op = make_operator(
        kubeconfig,
        cmds=[
            "sh",
            "-c",
            f"echo started-early; while [ ! -f {release} ]; do sleep 0.1; done; echo done-late",
        ],
        wait_until_job_complete=True,
        get_logs=True,
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            op.execute(make_context())
        except BaseException as e:  # surfaced below
            errors.append(e)

    with structlog.testing.capture_logs() as logs:
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        wait_until_sync(
            lambda: "[base] started-early" in _rendered(list(logs)), "the first line, mid-run", limit=60
        )
        assert worker.is_alive() and "done-late" not in _rendered(list(logs))
        release.touch()
        worker.join(60)
    assert not worker.is_alive() and not errors, errors
    assert "[base] done-late" in _rendered(logs)


def test_large_log_arrives_whole_line_by_line(sandbox, kubeconfig):
    """20 000 lines of 200 bytes (4 MB): all of them, in order, none cut or merged."""
    n = 20_000
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", f"seq -f '%0200g' 1 {n}"],
        wait_until_job_complete=True,
        get_logs=True,
    )
    with structlog.testing.capture_logs() as logs:
        op.execute(make_context())
    [(key, lines)] = [(k, v) for k, v in _lines_by_container(_rendered(logs)).items() if k[1] == "base"]
    assert len(lines) == n
    assert lines[0] == f"{1:0200d}" and lines[-1] == f"{n:0200d}"


def test_failed_job_still_writes_its_log(sandbox, kubeconfig):
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "echo why-it-failed; exit 2"],
        wait_until_job_complete=True,
        get_logs=True,
    )
    with structlog.testing.capture_logs() as logs, pytest.raises(AirflowException):
        op.execute(make_context())
    assert "[base] why-it-failed" in _rendered(logs)
    wait_until_sync(lambda: not sandbox.objects("pods", NS), "the pods' deletion")

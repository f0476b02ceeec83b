"""A pod template that cannot be used is reported as such, with its path and the reason.

* ``[kubernetes_executor] pod_template_file`` missing, a folder, or not YAML: ``start()`` stops the
  executor (so the scheduler) with the path and the reason, before any watcher starts. Upstream's
  ``PodGenerator.deserialize_model_file`` takes a path that does not exist for YAML text: every task
  then failed with ``422 ... spec.containers[0].image: Required value``, or, with a worker image set,
  ran without the template at all; the path was only in one warning of the scheduler's log.
* A task whose ``executor_config`` names a missing template fails with the same words, against the
  sandbox, and no pod is created for it.
* A ``[jobwatch]`` option of the wrong kind stops the start as Airflow's ``AirflowConfigException``, with
  no internal class name in front of the words; an unknown option is a warning naming the closest one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from support.workloads import make_workload

from airflow_jobwatch.sandbox import SandboxThread
from airflow_jobwatch.testing.pod_template import pod_template_yaml

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def kube() -> Iterator[SandboxThread]:
    with SandboxThread(bookmark_interval=1.0) as sb:
        yield sb


@pytest.fixture
def executor(
    kube: SandboxThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], Any]]:
    kubeconfig = tmp_path / "kubeconfig"
    kube.write_kubeconfig(kubeconfig)
    created: list[Any] = []

    def make(template: str) -> Any:
        env = {
            "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": "default",
            "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
            "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": str(kubeconfig),
            "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": template,
            "AIRFLOW__KUBERNETES_EXECUTOR__WORKER_CONTAINER_REPOSITORY": "sandbox/airflow",
            "AIRFLOW__KUBERNETES_EXECUTOR__WORKER_CONTAINER_TAG": "local",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path / "logs"),
            "AIRFLOW__JOBWATCH__EXECUTOR_STATUS_FILE": str(tmp_path / "status.json"),
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

        ex = JobWatchExecutor(parallelism=4)
        ex.job_id = "7"
        created.append(ex)
        return ex

    yield make
    for ex in created:
        if ex.supervisor is not None:
            ex.end()


@pytest.mark.parametrize(
    ("make_path", "reason"),
    [
        (lambda tmp: tmp / "pod_templte.yaml", "cannot be read: No such file or directory"),
        (lambda tmp: tmp, "cannot be read: Is a directory"),
        (lambda tmp: _write(tmp / "broken.yaml", "spec: [containers\n"), "is not valid YAML"),
    ],
    ids=["missing", "folder", "not-yaml"],
)
def test_an_unusable_pod_template_file_stops_the_executor_at_start(
    executor: Callable[[str], Any], tmp_path: Path, make_path: Callable[[Path], Path], reason: str
) -> None:
    from airflow.exceptions import AirflowConfigException

    path = make_path(tmp_path)
    ex = executor(str(path))
    with pytest.raises(AirflowConfigException) as err:
        ex.start()
    message = str(err.value)
    assert message.startswith("JobWatchExecutor cannot start: [kubernetes_executor] pod_template_file: ")
    assert f"the pod template file {path}" in message
    assert reason in message
    assert "Error" not in message.split(":", 1)[0]  # no internal class name in front of the words
    assert ex.supervisor is None  # no watcher process was started


def test_a_task_whose_executor_config_names_a_missing_template_fails_with_the_path(
    executor: Callable[[str], Any], kube: SandboxThread, tmp_path: Path
) -> None:
    template = _write(tmp_path / "pod_template.yaml", pod_template_yaml())
    missing = tmp_path / "gpu_templte.yaml"
    ex = executor(str(template))
    ex.start()
    workload = make_workload(task_id="t", executor_config={"pod_template_file": str(missing)})
    ex.queue_workload(workload, session=mock.sentinel.unused_session)
    deadline = time.monotonic() + 60
    while True:
        ex.heartbeat()
        ended = {
            k.task_id: (str(s), info)
            for k, (s, info) in ex.get_event_buffer().items()
            if str(s) in ("success", "failed")
        }
        if "t" in ended:
            break
        assert time.monotonic() < deadline, f"the task did not end; status: {ex.status()}"
        time.sleep(0.1)
    state, info = ended["t"]
    assert state == "failed"
    assert f"the pod template file {missing} cannot be read: No such file or directory" in str(info)
    assert kube.objects("pods", "default") == []  # nothing was created from an empty template


def test_jobwatch_options_are_checked_at_start_in_words_a_user_reads(
    executor: Callable[[str], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import structlog.testing
    from airflow.exceptions import AirflowConfigException

    from airflow_jobwatch import config

    template = str(_write(tmp_path / "pod_template.yaml", pod_template_yaml()))
    monkeypatch.setattr(config, "_WARNED", set())
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS", "-5")
    ex = executor(template)
    with pytest.raises(AirflowConfigException) as err:
        ex.start()
    assert type(err.value) is AirflowConfigException
    assert str(err.value).startswith(
        "JobWatchExecutor cannot start: [jobwatch] watch_timeout_seconds = '-5' must be a number > 0"
    )
    assert ex.supervisor is None

    monkeypatch.delenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__BACKOF_MAX_SECONDS", "30")
    ex = executor(template)
    with structlog.testing.capture_logs() as logs:
        ex.start()
    warnings = [e["event"] % e.get("positional_args", ()) for e in logs if e.get("log_level") == "warning"]
    assert (
        "[jobwatch] backof_max_seconds is not an option of airflow-jobwatch and is ignored; did you mean "
        "backoff_max_seconds?"
    ) in warnings


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path

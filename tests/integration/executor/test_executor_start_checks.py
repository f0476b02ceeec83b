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
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from support.workloads import make_workload

from airflow_jobwatch_testing.sandbox import SandboxThread

pytestmark = pytest.mark.timeout(180)


TEMPLATE = "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE"


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
    executor_factory: Callable[..., Any], tmp_path: Path, make_path: Callable[[Path], Path], reason: str
) -> None:
    from airflow.exceptions import AirflowConfigException

    path = make_path(tmp_path)
    with pytest.raises(AirflowConfigException) as err:
        executor_factory(**{TEMPLATE: str(path)})  # builds the executor and calls its start()
    message = str(err.value)
    assert message.startswith("JobWatchExecutor cannot start: [kubernetes_executor] pod_template_file: ")
    assert f"the pod template file {path}" in message
    assert reason in message
    assert "Error" not in message.split(":", 1)[0]  # no internal class name in front of the words


def test_a_task_whose_executor_config_names_a_missing_template_fails_with_the_path(
    executor_factory: Callable[..., Any], kube_sandbox: tuple[SandboxThread, str], tmp_path: Path
) -> None:
    missing = tmp_path / "gpu_templte.yaml"
    # A worker image is configured: upstream's pod build then ran the task without any template.
    ex = executor_factory(
        AIRFLOW__KUBERNETES_EXECUTOR__WORKER_CONTAINER_REPOSITORY="sandbox/airflow",
        AIRFLOW__KUBERNETES_EXECUTOR__WORKER_CONTAINER_TAG="local",
    )
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
    assert kube_sandbox[0].objects("pods", "default") == []  # nothing was created from an empty template


def test_jobwatch_options_are_checked_at_start_in_words_a_user_reads(
    executor_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import structlog.testing
    from airflow.exceptions import AirflowConfigException

    from airflow_jobwatch import config

    monkeypatch.setattr(config, "_WARNED", set())
    with pytest.raises(AirflowConfigException) as err:
        executor_factory(AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS="-5")
    assert type(err.value) is AirflowConfigException
    assert str(err.value).startswith(
        "JobWatchExecutor cannot start: [jobwatch] watch_timeout_seconds = '-5' must be a number > 0"
    )

    with pytest.raises(AirflowConfigException) as err:  # read when the executor is made, before start()
        executor_factory(AIRFLOW__JOBWATCH__POD_CREATION_CONCURRENCY="many")
    assert type(err.value) is AirflowConfigException
    assert str(err.value).startswith("JobWatchExecutor cannot start: [jobwatch] pod_creation_concurrency")
    monkeypatch.delenv("AIRFLOW__JOBWATCH__POD_CREATION_CONCURRENCY")

    with structlog.testing.capture_logs() as logs:
        executor_factory(
            AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS="5", AIRFLOW__JOBWATCH__BACKOF_MAX_SECONDS="30"
        )
    warnings = [e["event"] % e.get("positional_args", ()) for e in logs if e.get("log_level") == "warning"]
    assert (
        "[jobwatch] backof_max_seconds is not an option of airflow-jobwatch and is ignored; did you mean "
        "backoff_max_seconds?"
    ) in warnings


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path

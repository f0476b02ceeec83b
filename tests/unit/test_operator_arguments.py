"""KubernetesJobOperator refuses an argument of the wrong type when it is built (when the DAG is
parsed), naming the argument, the value and the type expected, before any Job spec exists; templated
arguments still take templates and XComArgs. A bad ``[jobwatch]`` option is refused when the task
starts, before its Job is created."""

from __future__ import annotations

import re
from typing import Any

import pytest

from airflow_jobwatch.operators.job import KubernetesJobOperator


def _operator(**arguments: Any) -> KubernetesJobOperator:
    return KubernetesJobOperator(
        **{"task_id": "hello", "image": "busybox:1.36", "cmds": ["true"], **arguments}
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"namespace": 123},
            "namespace must be a string (a Kubernetes namespace name) or None, got 123 (an int)",
        ),
        ({"image": ["busybox"]}, "image must be a string (a container image reference"),
        ({"cmds": "echo hello"}, "cmds must be a list of strings (the container's command"),
        ({"cmds": ["sh", "-c", 3]}, "cmds[2] must be a string (the container's command"),
        ({"arguments": ("a", 1)}, "arguments[1] must be a string"),
        ({"labels": ["team"]}, "labels must be a dict of strings"),
        ({"kubernetes_conn_id": 5}, "kubernetes_conn_id must be a string (an Airflow connection id)"),
        ({"config_file": 7}, "config_file must be a path to a kubeconfig file"),
        ({"parallelism": "3"}, "parallelism must be a whole number (int) or None, got '3' (a str)"),
        ({"backoff_limit": True}, "backoff_limit must be a whole number"),
        ({"env_vars": "A=1"}, "env_vars must be a dict {name: value} or a list of V1EnvVar"),
        ({"volumes": {"name": "v"}}, "volumes must be a list or None"),
        ({"job_poll_interval": 0}, "job_poll_interval must be a number of seconds > 0"),
    ],
)
def test_a_wrong_type_is_refused_when_the_operator_is_built(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=re.escape(message)) as err:
        _operator(**arguments)
    assert str(err.value).startswith("KubernetesJobOperator(task_id='hello'): ")


def test_templates_xcomargs_and_paths_are_accepted() -> None:
    from pathlib import Path

    from airflow.sdk import DAG, task

    with DAG("templated", schedule=None):

        @task
        def words() -> list[str]:
            return ["echo", "hi"]

        op = _operator(
            namespace="{{ params.ns }}",
            arguments=words(),
            labels="{{ params.labels }}",
            cmds=["sh", "-c", "{{ ds }}"],
            config_file=Path("/tmp/kubeconfig"),
            env_vars={"A": "1"},
            parallelism=2,
        )
    assert op.namespace == "{{ params.ns }}"


def test_a_bad_jobwatch_option_fails_the_task_before_its_job_is_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_jobwatch.config import JobwatchConfigError

    op = _operator(wait_until_job_complete=True, deferrable=True)

    def created(*args: Any, **kwargs: Any) -> None:  # never reached: the check comes first
        raise AssertionError("the Job was built or created before the options were checked")

    monkeypatch.setattr(op, "build_job_request_obj", created)
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS", "-5")
    with pytest.raises(
        JobwatchConfigError, match=r"\[jobwatch\] watch_timeout_seconds = '-5' must be a number > 0"
    ):
        op.execute({})

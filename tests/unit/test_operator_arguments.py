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
        ({"env_vars": "A=1"}, "env_vars must be a dict {name: value}, e.g. {'MODE': 'fast'}, or a list of"),
        ({"volumes": {"name": "v"}}, "volumes must be a list, each item a V1Volume (e.g. "),
        ({"job_poll_interval": 0}, "job_poll_interval must be a number of seconds > 0"),
    ],
)
def test_a_wrong_type_is_refused_when_the_operator_is_built(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=re.escape(message)) as err:
        _operator(**arguments)
    assert str(err.value).startswith("KubernetesJobOperator(task_id='hello'): ")


# Each argument with a Kubernetes shape, given as a DAG author gets it wrong: refused when the DAG is
# parsed, naming the argument (and the item) and the shape expected, not when the task runs.
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"env_vars": ["A=1"]},
            "env_vars[0] must be a k8s.V1EnvVar(name=..., value=...); env_vars is a dict",
        ),
        ({"env_vars": {"A": 1}}, "env_vars['A'] must be a string (an environment variable's value), got 1"),
        ({"env_vars": [{"value": "1"}]}, "env_vars[0] must be a k8s.V1EnvVar"),
        (
            {"tolerations": ["gpu"]},
            "tolerations[0] must be a V1Toleration or a dict of its fields (e.g. {'key'",
        ),
        ({"tolerations": {"key": "gpu"}}, "tolerations must be a list, each item a V1Toleration"),
        ({"volumes": [{"name": "v"}]}, "volumes[0] must be a V1Volume (e.g. k8s.V1Volume(name='data'"),
        ({"volume_mounts": ["/data"]}, "volume_mounts[0] must be a V1VolumeMount (e.g. "),
        (
            {"ports": [8080]},
            "ports[0] must be a V1ContainerPort (e.g. k8s.V1ContainerPort(container_port=8080))",
        ),
        ({"env_from": ["my-configmap"]}, "env_from[0] must be a V1EnvFromSource or a dict of its fields"),
        ({"affinity": "zone-a"}, "affinity must be a V1Affinity or a dict of its fields"),
        ({"container_resources": "1Gi"}, "container_resources must be a V1ResourceRequirements or a dict"),
        (
            {"container_resources": {"memory": "1Gi"}},
            "container_resources must be a V1ResourceRequirements or a",
        ),
        (
            {"init_containers": ["busybox"]},
            "init_containers[0] must be a V1Container or a dict of its fields",
        ),
        ({"security_context": "root"}, "security_context must be a V1PodSecurityContext or a dict"),
        ({"image_pull_secrets": [3]}, "image_pull_secrets[0] must be a V1LocalObjectReference"),
    ],
)
def test_a_value_of_the_wrong_kubernetes_shape_is_refused_when_the_operator_is_built(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(message)) as err:
        _operator(**arguments)
    assert str(err.value).startswith("KubernetesJobOperator(task_id='hello'): ")


def test_the_shapes_upstream_accepts_are_accepted_and_converted_as_upstream_does() -> None:
    from kubernetes.client import models as k8s

    op = _operator(
        env_vars={"MODE": "fast"},
        tolerations=[{"key": "gpu", "operator": "Exists"}, k8s.V1Toleration(key="spot")],
        volumes=[k8s.V1Volume(name="data", empty_dir=k8s.V1EmptyDirVolumeSource())],
        volume_mounts=[k8s.V1VolumeMount(name="data", mount_path="/data")],
        ports=[k8s.V1ContainerPort(container_port=8080)],
        env_from=[k8s.V1EnvFromSource(config_map_ref=k8s.V1ConfigMapEnvSource(name="cm"))],
        affinity={"nodeAffinity": {}},
        container_resources=k8s.V1ResourceRequirements(limits={"memory": "1Gi"}),
        init_containers=[{"name": "init", "image": "busybox:1.36"}],
        security_context={"runAsNonRoot": True},
        image_pull_secrets="regcred,other",
    )
    # upstream's conversions (convert_toleration, convert_affinity, convert_image_pull_secrets)
    assert [t.key for t in op.tolerations] == ["gpu", "spot"]
    assert all(isinstance(t, k8s.V1Toleration) for t in op.tolerations)
    assert isinstance(op.affinity, k8s.V1Affinity)
    assert [s.name for s in op.image_pull_secrets] == ["regcred", "other"]


def test_a_templated_argument_is_checked_once_rendered() -> None:
    """A Jinja template passes the DAG's import (its value is known when the task runs); what it renders
    to is checked then, with the same words."""
    from airflow.sdk import DAG

    with DAG("rendered", schedule=None, render_template_as_native_obj=True):
        # (env_vars is a templated field of every supported cncf.kubernetes release; volumes is not before
        # 10.25, whose earlier releases convert it in __init__)
        op = _operator(env_vars="{{ params.env }}")
        ok = _operator(task_id="ok", env_vars="{{ params.env }}")
    with pytest.raises(TypeError, match=re.escape("env_vars[0] must be a k8s.V1EnvVar(name=..., value=...)")):
        op.render_template_fields({"params": {"env": ["A=1"]}})
    ok.render_template_fields({"params": {"env": {"A": "1"}}})
    assert ok.env_vars == {"A": "1"}  # upstream turns it into V1EnvVar items when it builds the pod


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
    from airflow.exceptions import AirflowConfigException

    op = _operator(wait_until_job_complete=True, deferrable=True)

    def created(*args: Any, **kwargs: Any) -> None:  # never reached: the check comes first
        raise AssertionError("the Job was built or created before the options were checked")

    monkeypatch.setattr(op, "build_job_request_obj", created)
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS", "-5")
    # Airflow's configuration error (the task log names the class; the provider's own is internal)
    with pytest.raises(
        AirflowConfigException, match=r"\[jobwatch\] watch_timeout_seconds = '-5' must be a number > 0"
    ) as err:
        op.execute({})
    assert type(err.value) is AirflowConfigException


def test_an_unknown_jobwatch_option_is_a_warning_naming_the_closest_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import structlog.testing

    from airflow_jobwatch import config

    monkeypatch.setattr(config, "_WARNED", set())
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECOND", "5")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__NO_SUCH_THING", "1")
    assert config.unknown_options() == {
        "no_such_thing": None,
        "watch_timeout_second": "watch_timeout_seconds",
    }
    op = _operator()
    with structlog.testing.capture_logs() as logs:
        op._check_arguments()
        op._check_arguments()  # once per process, not once per task
    lines = [e["event"] % e.get("positional_args", ()) for e in logs if e.get("log_level") == "warning"]
    lines = [line for line in lines if "is not an option" in line]
    assert lines == [
        "[jobwatch] no_such_thing is not an option of airflow-jobwatch and is ignored; the options are "
        "listed by: airflow config list --section jobwatch",
        "[jobwatch] watch_timeout_second is not an option of airflow-jobwatch and is ignored; did you mean "
        "watch_timeout_seconds?",
    ]


@pytest.mark.parametrize("argument", ["job_template_file", "pod_template_file"])
def test_a_missing_template_file_fails_the_task_naming_it_before_its_job_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, argument: str
) -> None:
    """Upstream reads a path that does not exist as YAML text (one warning) and builds the Job from no
    template: the task failed later, in words about something else."""
    missing = tmp_path / "templte.yaml"
    op = _operator(**{argument: str(missing)})

    def built(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the Job was built before its template was checked")

    monkeypatch.setattr(op, "build_job_request_obj", built)
    kind = "job" if argument == "job_template_file" else "pod"
    with pytest.raises(
        Exception, match=re.escape(f"{argument}: the {kind} template file {missing} cannot be read")
    ):
        op.execute({})

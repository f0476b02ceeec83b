"""Type checks of KubernetesJobOperator's arguments, when the operator is built (the DAG is parsed), and
the upstream arguments that have no effect here.

A value of the wrong type otherwise travels into the Job spec and comes back from the API server as an
HTTP 400 or 422 about something else (``namespace=123`` as "the namespace of the provided object does
not match the namespace sent on the request"), after the Job was built. Here it is refused where the DAG
author looks first, naming the argument, the value and the type expected.

Templated arguments may also hold what Airflow resolves later: a Jinja string (rendered when the task
runs, possibly to a list with ``render_template_as_native_obj``) or an ``XComArg`` such as
``other_task.output``. Those are accepted wherever a templated argument is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

#: Arguments that hold one string: ``(argument, what it is)``.
STRINGS = {
    "namespace": "a Kubernetes namespace name",
    "image": "a container image reference, e.g. 'busybox:1.36'",
    "name": "the Job's name",
    "kubernetes_conn_id": "an Airflow connection id",
    "cluster_context": "a kubeconfig context name",
    "service_account_name": "a service account name",
    "image_pull_policy": "'Always', 'IfNotPresent' or 'Never'",
    "hostname": "the pod's hostname",
    "subdomain": "the pod's subdomain",
    "base_container_name": "a container name",
    "job_template_file": "a path",
    "pod_template_file": "a path",
    "priority_class_name": "a PriorityClass name",
    "schedulername": "a scheduler name",
    "dnspolicy": "a DNS policy",
    "runtime_class_name": "a RuntimeClass name",
    "termination_message_policy": "'File' or 'FallbackToLogsOnError'",
}
#: Arguments that hold a list of strings.
STRING_LISTS = {
    "cmds": "the container's command, one word per item, e.g. ['sh', '-c', 'echo hello']",
    "arguments": "the container's arguments, one per item, e.g. ['--date', '{{ ds }}']",
    "configmaps": "ConfigMap names",
}
#: Arguments that hold a list of something other than Kubernetes objects.
LISTS = ("secrets",)


class Shape(NamedTuple):
    """The Kubernetes shape of an argument: one ``kubernetes.client`` model or a list of them."""

    model: str  # the class's name in kubernetes.client.models
    many: bool  # a list of them
    #: Whether a dict may stand for one: upstream converts it (``convert_toleration``, ``convert_affinity``:
    #: a dict of the model's fields) or the client sends it as it is. Where upstream's own conversion
    #: accepts the model only (``convert_volume``, ``convert_volume_mount``, ``convert_port``), or the
    #: argument must be the object itself, a dict fails when the Job is built: refused here instead.
    dict_ok: bool
    example: str


#: Arguments with a Kubernetes shape. A value of another type used to pass the DAG's import and fail when
#: the task ran, in words that do not name the argument (``env_vars=["A=1"]``: "Invalid value for `name`,
#: must not be `None`", after its Job was built).
SHAPES: dict[str, Shape] = {
    "tolerations": Shape("V1Toleration", True, True, "{'key': 'gpu', 'operator': 'Exists'}"),
    "volumes": Shape(
        "V1Volume", True, False, "k8s.V1Volume(name='data', empty_dir=k8s.V1EmptyDirVolumeSource())"
    ),
    "volume_mounts": Shape(
        "V1VolumeMount", True, False, "k8s.V1VolumeMount(name='data', mount_path='/data')"
    ),
    "ports": Shape("V1ContainerPort", True, False, "k8s.V1ContainerPort(container_port=8080)"),
    "env_from": Shape(
        "V1EnvFromSource",
        True,
        True,
        "k8s.V1EnvFromSource(config_map_ref=k8s.V1ConfigMapEnvSource(name='cm'))",
    ),
    "init_containers": Shape("V1Container", True, True, "k8s.V1Container(name='init', image='busybox:1.36')"),
    "host_aliases": Shape("V1HostAlias", True, True, "k8s.V1HostAlias(ip='10.0.0.1', hostnames=['db'])"),
    "pod_runtime_info_envs": Shape("V1EnvVar", True, False, "k8s.V1EnvVar(name='NODE', value_from=...)"),
    "image_pull_secrets": Shape(
        "V1LocalObjectReference", True, False, "k8s.V1LocalObjectReference(name='regcred')"
    ),
    "affinity": Shape("V1Affinity", False, True, "{'nodeAffinity': {...}}"),
    "container_resources": Shape(
        "V1ResourceRequirements", False, True, "k8s.V1ResourceRequirements(limits={'memory': '1Gi'})"
    ),
    "security_context": Shape("V1PodSecurityContext", False, True, "{'runAsNonRoot': True}"),
    "container_security_context": Shape("V1SecurityContext", False, True, "{'runAsUser': 1000}"),
    "dns_config": Shape("V1PodDNSConfig", False, True, "k8s.V1PodDNSConfig(nameservers=['1.1.1.1'])"),
    "selector": Shape("V1LabelSelector", False, False, "k8s.V1LabelSelector(match_labels={'app': 'x'})"),
    "full_job_spec": Shape("V1Job", False, False, "k8s.V1Job(spec=k8s.V1JobSpec(...))"),
    "full_pod_spec": Shape("V1Pod", False, False, "k8s.V1Pod(spec=k8s.V1PodSpec(...))"),
}
#: What a ``container_resources`` dict may hold (V1ResourceRequirements' fields).
_RESOURCE_KEYS = {"limits", "requests", "claims"}
#: Arguments that hold a mapping of strings.
MAPPINGS = ("labels", "annotations", "node_selector")
#: Arguments that hold a whole number (never a bool).
INTEGERS = (
    "backoff_limit",
    "completions",
    "parallelism",
    "ttl_seconds_after_finished",
    "active_deadline_seconds",
    "termination_grace_period",
)


def _deferred(value: Any, templated: bool) -> bool:
    """A value Airflow resolves when the task runs: a Jinja template or an XComArg-like reference."""
    if not templated:
        return False
    if isinstance(value, str) and "{{" in value:
        return True
    return hasattr(value, "resolve") and hasattr(value, "iter_references")


def _type(value: Any) -> str:
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def check_argument_types(owner: str, arguments: Mapping[str, Any], template_fields: tuple[str, ...]) -> None:
    """Raise :class:`TypeError` for the first argument whose value has the wrong type.

    :param owner: how the operator is named in the message, e.g. ``KubernetesJobOperator(task_id='x')``.
    :param arguments: the arguments as given (``None`` always passes: it means the default).
    :param template_fields: the operator's templated arguments (those may hold a template or an XComArg).
    """

    def refuse(argument: str, value: Any, expected: str) -> TypeError:
        return TypeError(f"{owner}: {argument} must be {expected}, got {value!r} ({_type(value)})")

    templated = set(template_fields)
    for argument, value in arguments.items():
        if value is None or _deferred(value, argument in templated):
            continue
        if argument in STRINGS:
            if argument in ("config_file", "job_template_file", "pod_template_file"):
                ok = isinstance(value, str | os.PathLike)
            else:
                ok = isinstance(value, str)
            if not ok:
                raise refuse(argument, value, f"a string ({STRINGS[argument]}) or None")
        elif argument == "config_file":
            if not isinstance(value, str | os.PathLike):
                raise refuse(argument, value, "a path to a kubeconfig file (a string) or None")
        elif argument in STRING_LISTS:
            if not isinstance(value, list | tuple):
                raise refuse(argument, value, f"a list of strings ({STRING_LISTS[argument]}) or None")
            for index, item in enumerate(value):
                if not isinstance(item, str) and not _deferred(item, argument in templated):
                    raise refuse(f"{argument}[{index}]", item, f"a string ({STRING_LISTS[argument]})")
        elif argument in LISTS:
            if not isinstance(value, list | tuple):
                raise refuse(argument, value, "a list or None")
        elif argument in SHAPES:
            _check_shape(argument, value, SHAPES[argument], argument in templated, refuse)
        elif argument in MAPPINGS:
            if not isinstance(value, Mapping):
                raise refuse(argument, value, "a dict of strings, e.g. {'team': 'data'}, or None")
        elif argument == "env_vars":
            _check_env_vars(value, argument in templated, refuse)
        elif argument in INTEGERS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise refuse(argument, value, "a whole number (int) or None")
        elif argument == "job_poll_interval":
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise refuse(argument, value, "a number of seconds > 0")


def _is_model(value: Any, model: str) -> bool:
    from kubernetes.client import models

    # upstream's converters also take Airflow's former Kubernetes classes (to_k8s_client_obj)
    return isinstance(value, getattr(models, model)) or callable(getattr(value, "to_k8s_client_obj", None))


def _check_shape(argument: str, value: Any, shape: Shape, templated: bool, refuse: Any) -> None:
    one = f"a {shape.model}" + (" or a dict of its fields" if shape.dict_ok else "")
    example = f"e.g. {shape.example}"
    if shape.many:
        if argument == "image_pull_secrets" and isinstance(value, str):
            return  # upstream's convert_image_pull_secrets: "name1,name2"
        if not isinstance(value, list | tuple):
            raise refuse(argument, value, f"a list, each item {one} ({example}), or None")
        items = [(f"{argument}[{index}]", item) for index, item in enumerate(value)]
    else:
        items = [(argument, value)]
    for name, item in items:
        if _deferred(item, templated) or _is_model(item, shape.model):
            continue
        if shape.dict_ok and isinstance(item, Mapping):
            if argument == "container_resources" and not set(item) <= _RESOURCE_KEYS:
                raise refuse(name, item, f"{one}: a dict with limits and/or requests ({example})")
            continue
        raise refuse(name, item, f"{one} ({example})")


def _check_env_vars(value: Any, templated: bool, refuse: Any) -> None:
    """``env_vars``: a dict {name: value}, which upstream turns into V1EnvVar items (``convert_env_vars``),
    or a list of V1EnvVar (or of dicts with a name, which the client sends as they are)."""
    expected = "a dict {name: value}, e.g. {'MODE': 'fast'}, or a list of k8s.V1EnvVar(name=..., value=...)"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                raise refuse("env_vars", key, "a dict whose keys are variable names (non-empty strings)")
            if not isinstance(item, str) and not _deferred(item, templated):
                raise refuse(f"env_vars[{key!r}]", item, "a string (an environment variable's value)")
        return
    if not isinstance(value, list | tuple):
        raise refuse("env_vars", value, f"{expected}, or None")
    for index, item in enumerate(value):
        if _deferred(item, templated) or _is_model(item, "V1EnvVar"):
            continue
        if isinstance(item, Mapping) and isinstance(item.get("name"), str) and item["name"]:
            continue
        raise refuse(
            f"env_vars[{index}]", item, f"a k8s.V1EnvVar(name=..., value=...); env_vars is {expected}"
        )


#: Upstream arguments that have no effect here: their upstream default, and why. A value other than the
#: default is named in one warning when the task starts (``KubernetesJobOperator._check_arguments``).
_NOT_HONOURED: dict[str, tuple[Any, str]] = {
    "discover_pods_retry_number": (3, "no pod discovery before the wait: the shared watch sees the pods"),
    "durable": (None, "a retried worker adopts its try's Job by labels (reattach_on_restart)"),
    "startup_timeout_seconds": (
        120,
        "no wait for pod start: fatal_waiting_reasons, backoff_limit, active_deadline_seconds or "
        "execution_timeout end a Job whose pods cannot start",
    ),
    "startup_check_interval_seconds": (5, "no polling for pod start: the watch reports it"),
    "schedule_timeout_seconds": (None, "no wait for scheduling: see startup_timeout_seconds"),
    "base_container_status_polling_interval": (1, "container ends arrive with the watch"),
    "log_events_on_failure": (False, "pod events are not logged"),
    "skip_on_exit_code": (None, "a Job fails or succeeds as a whole; exit codes do not skip the task"),
    "poll_interval": (2, "KubernetesPodOperator's trigger period; the Job's wait uses job_poll_interval"),
    "callbacks": (None, "KubernetesPodOperator callbacks are not called for a Job's pods"),
    "progress_callback": (None, "log lines go to the task log only"),
    "logging_interval": (None, "a deferred task's logs are copied when it resumes"),
    "trigger_kwargs": (None, "JobTrigger takes its options from the operator's own arguments"),
    "container_name_log_prefix_enabled": (True, "each log line always starts with [pod] [container]"),
    "log_formatter": (None, "log lines keep the [pod] [container] prefix"),
}


def unhonoured_arguments(given: dict[str, Any]) -> dict[str, str]:
    """The upstream arguments of ``given`` set to something other than their default, with the reason
    they have no effect here."""
    return {
        name: _NOT_HONOURED[name][1]
        for name, value in given.items()
        if name in _NOT_HONOURED and value != _NOT_HONOURED[name][0]
    }

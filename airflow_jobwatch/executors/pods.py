"""Worker pods of JobWatchExecutor: built exactly like the upstream KubernetesExecutor builds them.

Labels and annotations are the upstream ones (``airflow-worker``, ``kubernetes_executor=True``,
``dag_id`` / ``task_id`` / ``run_id`` / ``try_number`` / ``map_index`` annotations), so either
executor can adopt the other's pods after a switch, and tooling that selects worker pods by label
keeps working. Pod generation (template -> dynamic pod -> ``pod_override``, then the pod mutation
hook) is the provider's :meth:`PodGenerator.construct_pod`; nothing is re-implemented here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.providers.cncf.kubernetes.executors.kubernetes_executor_types import POD_EXECUTOR_DONE_KEY
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import (
    POD_NAME_MAX_LENGTH,
    create_unique_id,
)
from airflow.providers.cncf.kubernetes.pod_generator import (
    PodGenerator,
    make_safe_label_value,
    workload_to_command_args,
)

from airflow_jobwatch.pod_template import pod_template_problem

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig
    from kubernetes.client import models as k8s

WORKER_LABEL = "airflow-worker"
EXECUTOR_LABEL = "kubernetes_executor"
DONE_LABEL = POD_EXECUTOR_DONE_KEY
# Which launch of its task instance key a worker pod belongs to. A key keeps its
# try_number across deferral and resumption, reschedule-mode sensors and some clears, so the key alone
# cannot tell the pod of the current launch from one of an earlier launch that is still ending. An
# annotation, beside upstream's (which stay exactly as upstream writes and reads them): upstream's
# executor ignores it when it adopts our pods, and it needs no label selector.
LAUNCH_ANNOTATION = "airflow-jobwatch/launch-id"


@dataclass(frozen=True)
class LabelScheme:
    """Which labels mark a worker pod: its scheduler job (``worker``) and that an executor owns it."""

    name: str
    worker: str
    executor: str

    def selector(self, scheduler_job_id: str) -> str:
        """The pods of one scheduler job that are not yet marked done."""
        return (
            f"{self.executor}=True,{self.worker}={make_safe_label_value(scheduler_job_id)},{DONE_LABEL}!=True"
        )


# The upstream KubernetesExecutor's labels: pods stay adoptable across a switch between the executors.
UPSTREAM_LABELS = LabelScheme("upstream", WORKER_LABEL, EXECUTOR_LABEL)
# Our own, for running both executors in one scheduler ([core] executor = KubernetesExecutor,
# airflow_jobwatch.executors.JobWatchExecutor): upstream's watcher selects airflow-worker=<job id> and
# its completed-pod cleanup kubernetes_executor=True, so a pod without either is invisible to it.
JOBWATCH_LABELS = LabelScheme("jobwatch", "airflow-jobwatch-worker", "jobwatch_executor")
LABEL_SCHEMES = {s.name: s for s in (UPSTREAM_LABELS, JOBWATCH_LABELS)}


def label_scheme(name: str) -> LabelScheme:
    """The scheme of ``[jobwatch] worker_pod_labels``; a clear error for anything else."""
    try:
        return LABEL_SCHEMES[(name or "upstream").strip().lower()]
    except KeyError:
        raise ValueError(
            f"[jobwatch] worker_pod_labels must be one of {sorted(LABEL_SCHEMES)}, got {name!r}"
        ) from None


def worker_label_selector(scheduler_job_id: str, scheme: LabelScheme = UPSTREAM_LABELS) -> str:
    """The pods of one scheduler job that are not yet marked done (upstream's selector by default)."""
    return scheme.selector(scheduler_job_id)


def apply_label_scheme(pod: k8s.V1Pod, scheme: LabelScheme) -> k8s.V1Pod:
    """Move the upstream worker/executor labels of a built pod to ``scheme``'s (no-op for upstream's)."""
    if scheme == UPSTREAM_LABELS:
        return pod
    labels = dict(pod.metadata.labels or {})
    worker = labels.pop(WORKER_LABEL, None)
    labels.pop(EXECUTOR_LABEL, None)
    if worker is not None:
        labels[scheme.worker] = worker
    labels[scheme.executor] = "True"
    pod.metadata.labels = labels
    return pod


def key_from_annotations(annotations: dict[str, str]) -> TaskInstanceKey | None:
    """The TaskInstanceKey a worker pod runs, from its annotations; None if they are incomplete.

    Airflow 3 pods always carry ``run_id``, so unlike the provider's ``annotations_to_key`` this
    never needs the metadata database (it runs in the scheduler loop for every adopted pod).
    """
    try:
        return TaskInstanceKey(
            dag_id=annotations["dag_id"],
            task_id=annotations["task_id"],
            run_id=annotations["run_id"],
            try_number=int(annotations["try_number"]),
            map_index=int(annotations.get("map_index", -1)),
        )
    except (KeyError, ValueError):
        return None


def new_launch_id() -> str:
    """A fresh launch id: unique across launches, schedulers and restarts (random, 16 hex digits)."""
    import secrets

    return secrets.token_hex(8)


def launch_id_of(annotations: dict[str, str], namespace: str, name: str) -> str:
    """The launch id a pod carries; a pod without one (launched by upstream's executor, or by a
    version of ours before launch ids) is its own launch, named after the pod."""
    return annotations.get(LAUNCH_ANNOTATION) or f"pod:{namespace}/{name}"


def launch_pod_name(key: TaskInstanceKey, launch_id: str, pod_index: int = 0) -> str:
    """The one name of a launch's pod: ``<dag>-<task>-<10 hex digits>`` (upstream's base), the same for every
    scheduler that creates it, so that the API server answers a second create of the same launch with 409.

    The digits are a digest of what identifies the pod: the task instance key (its try included), the launch
    id, and ``pod_index``, which counts the pods of that launch replaced after they failed before their task
    ran (a relaunch of the same try is a new pod of the same launch). Ten hex digits (40 bits) make two
    launches of one task's name collide about once in a trillion pairs; a collision is a 409 from a pod of
    another launch, which fails the task with a clear error and touches nothing. Within the provider's 63
    characters (a DNS label, so that it is also a valid hostname), whatever the dag and task ids.
    """
    import hashlib

    identity = "\x00".join(
        (
            key.dag_id,
            key.task_id,
            key.run_id,
            str(key.map_index),
            str(key.try_number),
            launch_id,
            str(pod_index),
        )
    )
    suffix = "-" + hashlib.sha256(identity.encode()).hexdigest()[:10]
    base = create_unique_id(key.dag_id, key.task_id, unique=False)
    return base[: POD_NAME_MAX_LENGTH - len(suffix)].strip("-.") + suffix


_TEMPLATES: dict[str, tuple[float, Any]] = {}


def _template(path: str) -> k8s.V1Pod:
    """The pod template, parsed once per file version (parsing YAML per pod cost ~10 ms of each create)."""
    import copy

    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        mtime = -1.0  # let the provider raise its own error for a missing file
    cached = _TEMPLATES.get(path)
    if cached is None or cached[0] != mtime or mtime < 0:
        # upstream would take a missing path for YAML text and build the pod from no template
        if problem := pod_template_problem(path):
            raise ValueError(problem)
        cached = (mtime, PodGenerator.deserialize_model_file(path))
        _TEMPLATES[path] = cached
    return copy.deepcopy(cached[1])


@dataclass(frozen=True)
class TaskValues:
    """The values a worker pod's build takes from its task, beside the pod's template and override."""

    FIELDS = ("pod_name", "dag_id", "task_id", "run_id", "try_number", "map_index", "args", "launch_id")

    pod_name: str
    dag_id: str
    task_id: str
    run_id: str | None
    try_number: int
    map_index: int
    args: list[str]
    launch_id: str | None

    @classmethod
    def of(cls, workload: ExecuteTask, *, pod_name: str, launch_id: str | None) -> TaskValues:
        ti = workload.ti
        return cls(
            pod_name=pod_name,
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            try_number=ti.try_number,
            map_index=ti.map_index,
            args=list(workload_to_command_args(workload)),
            launch_id=launch_id,
        )

    def text(self, field: str) -> str:
        """A field as the pod spells it (numbers as their decimal string)."""
        return str(getattr(self, field))

    def by_marker(self) -> dict[str, str]:
        """Each text field's text -> the field's name (args: its one element)."""
        found = {self.text(f): f for f in self.FIELDS if f != "args" and getattr(self, f) is not None}
        found.update({arg: "args" for arg in self.args})
        return found


def build_worker_pod(
    workload: ExecuteTask,
    *,
    kube_config: KubeConfig,
    scheduler_job_id: str,
    pod_name: str,
    labels: LabelScheme | None = None,
    launch_id: str | None = None,
) -> k8s.V1Pod:
    """Build the worker pod of one ``ExecuteTask`` workload.

    Order of precedence, as upstream: the pod template (``executor_config["pod_template_file"]``,
    else ``[kubernetes_executor] pod_template_file``) < the dynamic pod (name, labels,
    annotations, the ``execute_workload`` command, the worker image) < ``executor_config["pod_override"]``;
    then Airflow's ``pod_mutation_hook``. ``launch_id`` is written to the ``LAUNCH_ANNOTATION``
    annotation after all of them (a template or hook cannot drop it). Raises ``PodReconciliationError`` /
    ``PodMutationHookException`` / ``AirflowConfigException`` / ``TypeError`` on bad input; the
    executor fails the task with that message.
    """
    return construct_worker_pod(
        TaskValues.of(workload, pod_name=pod_name, launch_id=launch_id),
        executor_config=workload.ti.executor_config or {},
        kube_config=kube_config,
        scheduler_job_id=scheduler_job_id,
        labels=labels,
    )


def construct_worker_pod(
    values: TaskValues,
    *,
    executor_config: dict[str, Any],
    kube_config: KubeConfig,
    scheduler_job_id: str,
    labels: LabelScheme | None = None,
) -> k8s.V1Pod:
    """:func:`build_worker_pod` from the task's values (see there)."""
    pod_override = PodGenerator.from_obj(executor_config)
    template_file = executor_config.get("pod_template_file") or kube_config.pod_template_file
    if not template_file:
        raise ValueError(
            "JobWatchExecutor needs a worker pod template: set [kubernetes_executor] pod_template_file "
            "or executor_config={'pod_template_file': ...} on the task"
        )
    base_pod = _template(template_file)
    namespace = kube_config.executor_namespace
    override_meta = getattr(pod_override, "metadata", None)
    if override_meta is not None and getattr(override_meta, "namespace", None):
        namespace = override_meta.namespace
    pod = PodGenerator.construct_pod(
        namespace=namespace,
        scheduler_job_id=scheduler_job_id,
        pod_id=values.pod_name,
        dag_id=values.dag_id,
        task_id=values.task_id,
        kube_image=kube_config.kube_image,
        try_number=values.try_number,
        map_index=values.map_index,
        date=None,
        run_id=values.run_id,
        args=list(values.args),
        pod_override_object=pod_override,
        base_worker_pod=base_pod,
        with_mutation_hook=True,
    )
    if values.launch_id is not None:
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), LAUNCH_ANNOTATION: values.launch_id}
    return apply_label_scheme(pod, labels or UPSTREAM_LABELS)

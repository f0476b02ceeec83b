"""The XCom sidecar in the Job's pod template, and the results read from it in the worker.

With ``do_xcom_push`` the pod template gets a native sidecar (:mod:`airflow_jobwatch.kube.meaning.xcom_sidecar`
says how it prints the result) and an ``emptyDir`` that it shares with the base container at the
folder of ``xcom_path``. Upstream's settings for its own sidecar apply to it: the connection's
``xcom_sidecar_container_image`` and ``xcom_sidecar_container_resources``, the operator's (or the
connection's) ``xcom_sidecar_container_security_context``.

A cluster without native sidecars (Kubernetes 1.28 and older, or the ``SidecarContainers`` feature
off) drops the sidecar's ``restartPolicy`` when the Job is created, and the sidecar would then run as
an ordinary init container, forever, before the base container. The operator sees the dropped field
in the Job the API server returns, deletes that Job before any pod of it can start its work, and
creates it again without the sidecar: the result then travels as the base container's termination
message, as in earlier releases (at most 4096 bytes).
"""

from __future__ import annotations

import copy
import posixpath
import random
import time
from typing import Any, Protocol

from airflow.providers.common.compat.sdk import AirflowException
from kubernetes.client import models as k8s
from kubernetes.client.rest import ApiException

from airflow_jobwatch.kube.meaning import xcom_sidecar
from airflow_jobwatch.kube.meaning.result import EMPTY_XCOM_RESULT, JobResult
from airflow_jobwatch.kube.meaning.xcom_sidecar import (
    MAX_RESULT_BYTES,
    results_from_sidecars,
    sidecar_pods,
    too_large_hint,
)


class KubernetesJobOperator(Protocol):
    """What this module reads of the operator (a protocol, so that it does not import the operator)."""

    @property
    def xcom_path(self) -> str: ...
    @property
    def xcom_sidecar_container_security_context(self) -> Any: ...
    @property
    def hook(self) -> Any: ...
    @property
    def client(self) -> Any: ...  # CoreV1Api
    @property
    def job_client(self) -> Any: ...  # BatchV1Api


def add_sidecar(op: KubernetesJobOperator, job: k8s.V1Job, base: k8s.V1Container) -> None:
    """Add the XCom sidecar and its ``emptyDir`` (mounted in ``base`` at the folder of ``xcom_path``)."""
    spec = job.spec.template.spec
    folder = posixpath.dirname(op.xcom_path) or "/"
    for mount in base.volume_mounts or []:
        if mount.mount_path == folder:
            raise AirflowException(
                f"do_xcom_push mounts a volume at {folder!r} (the folder of xcom_path={op.xcom_path!r}) in "
                f"container {base.name!r}, which already mounts {mount.name!r} there. Remove that mount, "
                "or pass another xcom_path."
            )
    if any(v.name == xcom_sidecar.VOLUME_NAME for v in spec.volumes or []):
        raise AirflowException(
            f"do_xcom_push adds a volume named {xcom_sidecar.VOLUME_NAME!r}, and the pod template already has "
            "one; rename yours."
        )
    mount = k8s.V1VolumeMount(name=xcom_sidecar.VOLUME_NAME, mount_path=folder)
    spec.volumes = [k8s.V1Volume(name=xcom_sidecar.VOLUME_NAME, empty_dir={}), *(spec.volumes or [])]
    base.volume_mounts = [mount, *(base.volume_mounts or [])]
    hook: Any = op.hook  # upstream's KubernetesHook (untyped)
    sidecar = k8s.V1Container(
        name=xcom_sidecar.SIDECAR_NAME,
        image=hook.get_xcom_sidecar_container_image() or xcom_sidecar.DEFAULT_IMAGE,
        command=xcom_sidecar.sidecar_command(op.xcom_path),
        volume_mounts=[copy.deepcopy(mount)],
        restart_policy="Always",
        resources=hook.get_xcom_sidecar_container_resources()
        or {"requests": {"cpu": "1m", "memory": "10Mi"}},
    )
    # The connection's security context: a hook method from cncf.kubernetes 10.25 (Airflow 3.3's) on.
    from_connection = getattr(hook, "get_xcom_sidecar_container_security_context", None)
    context = op.xcom_sidecar_container_security_context or (from_connection() if from_connection else None)
    if context is not None:
        sidecar.security_context = context
    spec.init_containers = [*(spec.init_containers or []), sidecar]


def drop_sidecar(op: KubernetesJobOperator, job: k8s.V1Job) -> k8s.V1Job:
    """A copy of ``job`` without the sidecar, its volume and mount (for a cluster without native
    sidecars); the caller then sets the base container's termination message path."""
    job = copy.deepcopy(job)
    job.metadata.resource_version = None
    job.metadata.uid = None
    spec = job.spec.template.spec
    spec.init_containers = [
        c for c in spec.init_containers or [] if c.name != xcom_sidecar.SIDECAR_NAME
    ] or None
    spec.volumes = [v for v in spec.volumes or [] if v.name != xcom_sidecar.VOLUME_NAME] or None
    for c in spec.containers or []:
        if c.volume_mounts:
            c.volume_mounts = [m for m in c.volume_mounts if m.name != xcom_sidecar.VOLUME_NAME] or None
    return job


def delete_refused(op: KubernetesJobOperator, job: k8s.V1Job) -> None:
    """Delete a Job whose sidecar the cluster cannot run, and wait (bounded, with backoff) until its
    name is free; its pod, if already made, is stuck before its base container and goes with it."""
    ns, name, uid = job.metadata.namespace, job.metadata.name, job.metadata.uid
    try:
        op.job_client.delete_namespaced_job(name=name, namespace=ns, propagation_policy="Background")
    except ApiException as e:
        if e.status != 404:
            raise
    deadline = time.monotonic() + 60.0
    delay = 0.1
    while not _gone(op, ns, name, uid):
        if time.monotonic() >= deadline:
            break
        time.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, 2.0)
    else:
        return
    raise AirflowException(
        f"Job {ns}/{name} (created with an XCom sidecar this cluster cannot run) is not gone"
    )


def _gone(op: KubernetesJobOperator, ns: str, name: str, uid: str | None) -> bool:
    """Whether the Job ``uid`` no longer holds its name."""
    try:
        return bool(op.job_client.read_namespaced_job(name=name, namespace=ns).metadata.uid != uid)
    except ApiException as e:
        if e.status == 404:
            return True
        raise


def with_sidecar_results(op: KubernetesJobOperator, result: JobResult, pods: list[Any]) -> JobResult:
    """In the worker: ``result`` with the results of the pods that ran the sidecar, read from its log
    through ``pods/log``, one at a time.

    :raises AirflowException: a log that cannot be read, or holds no whole result, or one too large.
    """
    names = sidecar_pods(pods)
    if not any(names):
        return result
    texts: dict[str, str] = {}
    for name in names:
        if name is None:
            continue
        texts[name] = read_one(op, name, pods)
    return results_from_sidecars(result, names, texts)


def read_one(op: KubernetesJobOperator, name: str, pods: list[Any]) -> str:
    from airflow_jobwatch.kube.meaning.objects import to_dict

    ns = next(
        str((to_dict(p).get("metadata") or {}).get("namespace"))
        for p in pods
        if (to_dict(p).get("metadata") or {}).get("name") == name
    )
    try:
        data = xcom_sidecar.read_result_sync(op.client, name, ns, limit=MAX_RESULT_BYTES)
    except xcom_sidecar.SidecarResultError as e:
        raise AirflowException(too_large_hint(str(e))) from None
    except ApiException as e:
        raise AirflowException(
            f"Could not read the XCom result of pod {ns}/{name} from its {xcom_sidecar.SIDECAR_NAME} container's "
            f"log (HTTP {e.status} {e.reason}); the task needs the 'get' right on pods/log"
        ) from None
    return EMPTY_XCOM_RESULT if data is None else data.decode("utf-8", errors="replace")

"""The Job request and its Kubernetes calls: the Job built from upstream's arguments, created or adopted
(a retried worker finds the Job of its own try), what is left of ``execution_timeout`` for the deferred
wait, and the plan to end the task in the triggerer. All of it works on the operator's
:class:`~airflow_jobwatch.operators.taskjob.TaskJob`, never on the operator."""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException
from kubernetes.client.rest import ApiException

from airflow_jobwatch.kube.meaning import xcom_sidecar
from airflow_jobwatch.kube.meaning.result import TERMINATION_MESSAGE_LIMIT_BYTES
from airflow_jobwatch.operators import sidecar
from airflow_jobwatch.operators.disruption import add_disruption_rule

if TYPE_CHECKING:
    from airflow.sdk import Context
    from kubernetes.client import models as k8s

    from airflow_jobwatch.operators.taskjob import TaskJob

__all__ = [
    "api_error_message",
    "create_job",
    "create_or_adopt",
    "deadline",
    "end_plan",
    "find_job_of_this_try",
    "finish_job_request",
    "same_try",
]

#: A container's terminationMessagePath when nobody sets it (the API server's default).
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"

#: Labels (from KubernetesPodOperator's task-instance labels, which upstream puts on the Job's pod
#: template) that identify one try of one task instance; a Job whose pod template carries all of them
#: with our values was created by this very try.
_TRY_LABELS = ("dag_id", "task_id", "run_id", "map_index", "try_number")


def api_error_message(e: ApiException) -> str:
    """The API server's own message from a Status body, or the HTTP reason."""
    try:
        body = json.loads(e.body or "{}")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return f"{e.status} {e.reason}"


def finish_job_request(tj: TaskJob, job: k8s.V1Job, *, xcom: bool) -> k8s.V1Job:
    """Upstream's Job (built without its exec-read XCom sidecar), plus our native XCom sidecar
    (:mod:`~airflow_jobwatch.operators.sidecar`) and the disruption rule."""
    if xcom:
        sidecar.add_sidecar(tj, job, _base_container(tj, job))
    if tj.disruption_retries is not None:
        try:
            add_disruption_rule(job)
        except ValueError as e:
            raise AirflowException(str(e)) from None
    return job


def _base_container(tj: TaskJob, job: k8s.V1Job) -> k8s.V1Container:
    containers = job.spec.template.spec.containers or []
    base = next((c for c in containers if c.name == tj.base_container_name), None)
    if base is None:
        raise AirflowException(
            f"do_xcom_push needs a container named {tj.base_container_name!r} in the Job's pod "
            f"template; found {[c.name for c in containers]}"
        )
    return base


def without_native_sidecar(tj: TaskJob, job: k8s.V1Job) -> k8s.V1Job:
    """``job`` for a cluster without native sidecars: no sidecar, and the result travels as the base
    container's termination message (``terminationMessagePath`` is ``xcom_path``)."""
    job = sidecar.drop_sidecar(tj, job)
    base = _base_container(tj, job)
    own = base.termination_message_path
    if own not in (None, DEFAULT_TERMINATION_MESSAGE_PATH, tj.xcom_path):
        raise AirflowException(
            f"This cluster has no native sidecars, so do_xcom_push returns the result through the base "
            f"container's terminationMessagePath (xcom_path={tj.xcom_path!r}; the kubelet keeps at most "
            f"{TERMINATION_MESSAGE_LIMIT_BYTES} bytes of it), but the pod template sets "
            f"terminationMessagePath={own!r} on container {base.name!r}. Remove it, or pass "
            f"xcom_path={own!r} if that file is where the result is written, or turn do_xcom_push off."
        )
    base.termination_message_path = tj.xcom_path
    base.termination_message_policy = "File"
    return job


# -- create or adopt ----------------------------------------------------------------------------------
def create_or_adopt(tj: TaskJob, job_request: k8s.V1Job, context: Context) -> k8s.V1Job:
    """Create the Job; on 409 (its name is taken) adopt the Job there if this very try created it."""
    ns, name = job_request.metadata.namespace, job_request.metadata.name
    try:
        return tj.job_client.create_namespaced_job(namespace=ns, body=job_request)
    except ApiException as e:
        if e.status != 409:
            raise AirflowException(
                f"Kubernetes rejected Job {ns}/{name} (HTTP {e.status}): {api_error_message(e)}"
            ) from None
    existing = tj.job_client.read_namespaced_job(name=name, namespace=ns)
    if same_try(tj, existing, context):
        tj.log.info("Job %s/%s already exists for this task try; adopting it", ns, name)
        return existing
    raise AirflowException(
        f"A Job named {name!r} already exists in namespace {ns!r} and was not created by this task try "
        f"(its pod template labels: {_template_labels(existing)}); choose another name or delete that Job."
    )


def same_try(tj: TaskJob, job: k8s.V1Job, context: Context) -> bool:
    """Whether ``job``'s pod template carries this try's labels (as upstream puts them there)."""
    want = tj.try_labels
    have = _template_labels(job)
    return (
        not job.metadata.deletion_timestamp
        and bool(want)
        and all(have.get(k) == want.get(k) for k in _TRY_LABELS if k in want)
    )


def find_job_of_this_try(tj: TaskJob, namespace: str, context: Context) -> k8s.V1Job | None:
    """A live Job that an earlier run of this same task try created (a retried worker).

    The try's labels are on the Job's pod template, not on the Job (whose labels are the user's),
    so the search goes through the pods, which carry them and are selectable; a Job whose pods the
    controller has not created yet is not found this way, and then a fixed name still meets it on
    409 (see :func:`create_or_adopt`).
    """
    want = tj.try_labels
    selector = ",".join(f"{k}={want[k]}" for k in _TRY_LABELS if k in want)
    pods = tj.client.list_namespaced_pod(namespace=namespace, label_selector=selector).items
    owners = sorted(
        {
            ref.name
            for pod in pods
            for ref in (pod.metadata.owner_references or [])
            if ref.kind == "Job" and ref.controller
        }
    )
    live = []
    for name in owners:
        try:
            job = tj.job_client.read_namespaced_job(name=name, namespace=namespace)
        except ApiException as e:
            if e.status == 404:
                continue
            raise
        if same_try(tj, job, context):
            live.append(job)
    if len(live) > 1:
        raise AirflowException(
            f"Found {len(live)} Jobs for this task try in {namespace} ({selector}): "
            f"{[j.metadata.name for j in live]}; delete the extra ones."
        )
    return live[0] if live else None


# -- the wait -----------------------------------------------------------------------------------------
def deadline(execution_timeout: datetime.timedelta | None, context: Context) -> datetime.datetime | None:
    """What is left of ``execution_timeout``, as an absolute deadline."""
    if execution_timeout is None:
        return None
    start = getattr(context.get("ti"), "start_date", None) or datetime.datetime.now(datetime.UTC)
    return start + execution_timeout


def create_job(tj: TaskJob, job_request: k8s.V1Job, context: Context) -> k8s.V1Job:
    """Adopt this try's Job if a previous run of the try created one, else create it."""
    ns = job_request.metadata.namespace
    adopted = find_job_of_this_try(tj, ns, context) if tj.reattach_on_restart else None
    if adopted is not None:
        tj.log.info("Adopting Job %s/%s created earlier by this task try", ns, adopted.metadata.name)
        job = tj.record(adopted)
    else:
        job = tj.record(create_or_adopt(tj, job_request, context))
        if tj.do_xcom_push and xcom_sidecar.sidecar_kept(job) is False:
            # The API server dropped the sidecar's restartPolicy: it would run as an ordinary init
            # container, forever, before the base container. Start again without it.
            tj.log.warning(
                "This cluster does not run native sidecars (Kubernetes 1.29 or later, feature "
                "SidecarContainers): it dropped restartPolicy: Always of the %s init container of Job "
                "%s/%s. Creating the Job again without it: the XCom result then travels as the base "
                "container's termination message and must stay under %d bytes. Upgrade the cluster to "
                "return results of any size.",
                xcom_sidecar.SIDECAR_NAME,
                ns,
                job.metadata.name,
                TERMINATION_MESSAGE_LIMIT_BYTES,
            )
            sidecar.delete_refused(tj, job)
            job = tj.record(create_or_adopt(tj, without_native_sidecar(tj, job_request), context))
        tj.log.info("Created Job %s/%s", ns, job.metadata.name)
    ti = context["ti"]
    ti.xcom_push(key="job_name", value=job.metadata.name)
    ti.xcom_push(key="job_namespace", value=job.metadata.namespace)
    return job


def end_plan(tj: TaskJob, *, on_finish_action: str, last_try: bool) -> dict[str, Any]:
    """What the trigger needs to end the task itself: the ``job`` and return-value XComs, the log lines
    and the pods' logs (``get_logs``, the tail up to ``[jobwatch] trigger_log_max_bytes``),
    ``on_finish_action`` and the failure message. Whether a failure may end there is decided in the
    triggerer, by its own Airflow version (:func:`~airflow_jobwatch.ending.end.may_fail_here`),
    from ``last_try``."""
    return {
        "on_finish_action": on_finish_action,
        "push_return": bool(tj.do_xcom_push),
        "xcom_path": tj.xcom_path,
        "unwrap_single": bool(tj.unwrap_single),
        "last_try": last_try,
        "logs": (
            {
                "container_logs": _json_names(tj.container_logs),
                "init_container_logs": _json_names(tj.init_container_logs),
            }
            if tj.get_logs
            else None
        ),
    }


def _json_names(names: Any) -> Any:
    """``container_logs`` / ``init_container_logs`` as JSON: True, None, a name, or a list of names."""
    if names is None or isinstance(names, (bool, str)):
        return names
    return [str(n) for n in names]


def _template_labels(job: k8s.V1Job) -> dict[str, str]:
    template = job.spec.template if job.spec else None
    return dict((template.metadata.labels if template and template.metadata else None) or {})

"""The Job request and its Kubernetes calls: the Job built from upstream's arguments, created or adopted
(a retried worker finds the Job of its own try), and the trigger that waits for it (with its plan to end
the task in the triggerer when nothing else must run on a worker)."""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException
from kubernetes.client.rest import ApiException

from airflow_jobwatch.compat import OnKillAction, on_kill_action
from airflow_jobwatch.kube import xcom_sidecar
from airflow_jobwatch.kube.result import TERMINATION_MESSAGE_LIMIT_BYTES
from airflow_jobwatch.operators import sidecar
from airflow_jobwatch.operators.disruption import add_disruption_rule
from airflow_jobwatch.triggers.job import JobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context
    from kubernetes.client import models as k8s

    from airflow_jobwatch.operators.job import KubernetesJobOperator

__all__ = [
    "api_error_message",
    "create_job",
    "create_or_adopt",
    "deadline",
    "end_plan",
    "find_job_of_this_try",
    "finish_job_request",
    "same_try",
    "trigger",
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


def finish_job_request(op: KubernetesJobOperator, job: k8s.V1Job, *, xcom: bool) -> k8s.V1Job:
    """Upstream's Job (built without its exec-read XCom sidecar), plus our native XCom sidecar
    (:mod:`~airflow_jobwatch.operators.sidecar`) and the disruption rule."""
    if xcom:
        sidecar.add_sidecar(op, job, _base_container(op, job))
    if op.disruption_retries is not None:
        try:
            add_disruption_rule(job)
        except ValueError as e:
            raise AirflowException(str(e)) from None
    return job


def _base_container(op: KubernetesJobOperator, job: k8s.V1Job) -> k8s.V1Container:
    containers = job.spec.template.spec.containers or []
    base = next((c for c in containers if c.name == op.base_container_name), None)
    if base is None:
        raise AirflowException(
            f"do_xcom_push needs a container named {op.base_container_name!r} in the Job's pod "
            f"template; found {[c.name for c in containers]}"
        )
    return base


def without_native_sidecar(op: KubernetesJobOperator, job: k8s.V1Job) -> k8s.V1Job:
    """``job`` for a cluster without native sidecars: no sidecar, and the result travels as the base
    container's termination message (``terminationMessagePath`` is ``xcom_path``)."""
    job = sidecar.drop_sidecar(op, job)
    base = _base_container(op, job)
    own = base.termination_message_path
    if own not in (None, DEFAULT_TERMINATION_MESSAGE_PATH, op.xcom_path):
        raise AirflowException(
            f"This cluster has no native sidecars, so do_xcom_push returns the result through the base "
            f"container's terminationMessagePath (xcom_path={op.xcom_path!r}; the kubelet keeps at most "
            f"{TERMINATION_MESSAGE_LIMIT_BYTES} bytes of it), but the pod template sets "
            f"terminationMessagePath={own!r} on container {base.name!r}. Remove it, or pass "
            f"xcom_path={own!r} if that file is where the result is written, or turn do_xcom_push off."
        )
    base.termination_message_path = op.xcom_path
    base.termination_message_policy = "File"
    return job


# -- create or adopt ----------------------------------------------------------------------------------
def create_or_adopt(op: KubernetesJobOperator, job_request: k8s.V1Job, context: Context) -> k8s.V1Job:
    """Create the Job; on 409 (its name is taken) adopt the Job there if this very try created it."""
    ns, name = job_request.metadata.namespace, job_request.metadata.name
    try:
        return op.job_client.create_namespaced_job(namespace=ns, body=job_request)
    except ApiException as e:
        if e.status != 409:
            raise AirflowException(
                f"Kubernetes rejected Job {ns}/{name} (HTTP {e.status}): {api_error_message(e)}"
            ) from None
    existing = op.job_client.read_namespaced_job(name=name, namespace=ns)
    if same_try(op, existing, context):
        op.log.info("Job %s/%s already exists for this task try; adopting it", ns, name)
        return existing
    raise AirflowException(
        f"A Job named {name!r} already exists in namespace {ns!r} and was not created by this task try "
        f"(its pod template labels: {_template_labels(existing)}); choose another name or delete that Job."
    )


def same_try(op: KubernetesJobOperator, job: k8s.V1Job, context: Context) -> bool:
    """Whether ``job``'s pod template carries this try's labels (as upstream puts them there)."""
    want = op._get_ti_pod_labels(context)
    have = _template_labels(job)
    return (
        not job.metadata.deletion_timestamp
        and bool(want)
        and all(have.get(k) == want.get(k) for k in _TRY_LABELS if k in want)
    )


def find_job_of_this_try(op: KubernetesJobOperator, namespace: str, context: Context) -> k8s.V1Job | None:
    """A live Job that an earlier run of this same task try created (a retried worker).

    The try's labels are on the Job's pod template, not on the Job (whose labels are the user's),
    so the search goes through the pods, which carry them and are selectable; a Job whose pods the
    controller has not created yet is not found this way, and then a fixed name still meets it on
    409 (see :func:`create_or_adopt`).
    """
    want = op._get_ti_pod_labels(context)
    selector = ",".join(f"{k}={want[k]}" for k in _TRY_LABELS if k in want)
    pods = op.client.list_namespaced_pod(namespace=namespace, label_selector=selector).items
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
            job = op.job_client.read_namespaced_job(name=name, namespace=namespace)
        except ApiException as e:
            if e.status == 404:
                continue
            raise
        if same_try(op, job, context):
            live.append(job)
    if len(live) > 1:
        raise AirflowException(
            f"Found {len(live)} Jobs for this task try in {namespace} ({selector}): "
            f"{[j.metadata.name for j in live]}; delete the extra ones."
        )
    return live[0] if live else None


# -- the wait -----------------------------------------------------------------------------------------
def deadline(op: KubernetesJobOperator, context: Context) -> datetime.datetime | None:
    """What is left of ``execution_timeout``, as an absolute deadline."""
    if op.execution_timeout is None:
        return None
    start = getattr(context.get("ti"), "start_date", None) or datetime.datetime.now(datetime.UTC)
    return start + op.execution_timeout


def trigger(
    op: KubernetesJobOperator,
    context: Context,
    name: str,
    namespace: str,
    uid: str | None,
    *,
    deadline: datetime.datetime | None = None,
    end_task: dict[str, Any] | None = None,
    deferred_at: float | None = None,
    mask_secrets: list[str] | None = None,
) -> JobTrigger:
    """The trigger for the Job. ``deadline`` only when deferred: in the worker, Airflow's own
    ``execution_timeout`` (SIGALRM) is the one deadline
    (see :func:`~airflow_jobwatch.operators.inworker.wait_in_worker`)."""
    return JobTrigger(
        name,
        namespace,
        kubernetes_conn_id=op.kubernetes_conn_id,
        config_file=op.config_file,
        cluster_context=op.cluster_context,
        in_cluster=op.in_cluster,
        timeout=deadline,
        poll_interval=op.job_poll_interval,
        fatal_waiting_reasons=op.fatal_waiting_reasons,
        api_failure_tolerance=op.api_failure_tolerance,
        job_uid=uid,
        # upstream's on_kill always deletes the Job; on_kill_action only governs the pods
        delete_on_kill=True,
        do_xcom_push=op.do_xcom_push,
        base_container_name=op.base_container_name,
        on_kill_propagation_policy=op.on_kill_propagation_policy,
        termination_grace_period=op.termination_grace_period,
        delete_pods_on_kill=on_kill_action(op) == OnKillAction.DELETE_POD,
        disruption_retries=op.disruption_retries,
        end_task=end_task,
        deferred_at=deferred_at,
        mask_secrets=mask_secrets,
    )


def end_plan(op: KubernetesJobOperator, context: Context) -> dict[str, Any] | None:
    """What the trigger needs to end the task itself, or None when the task must resume on a worker.

    The trigger can do all of ``execute_complete``'s work: the ``job`` and return-value XComs, the
    log lines and the pods' logs (``get_logs``, the tail up to ``[jobwatch] trigger_log_max_bytes``),
    ``on_finish_action`` and the failure message. The
    task resumes on a worker when something else must run there: a subclass's own
    ``execute_complete``, the task's callbacks, a ``post_execute`` hook, outlets, ``multiple_outputs``
    or a mapped task downstream that maps over the result. A failure ends from the triggerer only
    where the triggerer's Airflow then respects ``retries`` (3.3.1 and later), or when this try is
    the last one (decided in the triggerer: :func:`~airflow_jobwatch.triggers.ending.may_fail_here`).
    """
    from airflow_jobwatch.operators.job import KubernetesJobOperator  # (imports this module)

    if type(op).execute_complete is not KubernetesJobOperator.execute_complete:
        return None
    callbacks = ("on_success_callback", "on_failure_callback", "on_retry_callback", "on_skipped_callback")
    if any(getattr(op, name, None) for name in callbacks):
        return None
    if getattr(op, "_post_execute_hook", None) or op.outlets or op.multiple_outputs:
        return None
    try:
        if next(iter(op.iter_mapped_dependants()), None) is not None:
            return None
    except Exception:  # no DAG to ask (a bare operator): nothing maps over it
        pass
    ti = context["ti"]
    try_number, max_tries = getattr(ti, "try_number", None), getattr(ti, "max_tries", None)
    last_try = not op.retries or (
        isinstance(try_number, int) and isinstance(max_tries, int) and try_number > max_tries
    )
    return {
        "on_finish_action": str(getattr(op.on_finish_action, "value", op.on_finish_action)),
        "push_return": bool(op.do_xcom_push),
        "xcom_path": op.xcom_path,
        "unwrap_single": bool(op.unwrap_single),
        # whether a failure may end here is decided in the triggerer, by its own Airflow version
        "last_try": last_try,
        "logs": (
            {
                "container_logs": _json_names(op.container_logs),
                "init_container_logs": _json_names(op.init_container_logs),
            }
            if op.get_logs
            else None
        ),
    }


def create_job(op: KubernetesJobOperator, job_request: k8s.V1Job, context: Context) -> k8s.V1Job:
    """Adopt this try's Job if a previous run of the try created one, else create it."""
    ns = job_request.metadata.namespace
    adopted = find_job_of_this_try(op, ns, context) if op.reattach_on_restart else None
    if adopted is not None:
        op.log.info("Adopting Job %s/%s created earlier by this task try", ns, adopted.metadata.name)
        op.job = adopted
    else:
        op.job = create_or_adopt(op, job_request, context)
        if op.do_xcom_push and xcom_sidecar.sidecar_kept(op.job) is False:
            # The API server dropped the sidecar's restartPolicy: it would run as an ordinary init
            # container, forever, before the base container. Start again without it.
            op.log.warning(
                "This cluster does not run native sidecars (Kubernetes 1.29 or later, feature "
                "SidecarContainers): it dropped restartPolicy: Always of the %s init container of Job "
                "%s/%s. Creating the Job again without it: the XCom result then travels as the base "
                "container's termination message and must stay under %d bytes. Upgrade the cluster to "
                "return results of any size.",
                xcom_sidecar.SIDECAR_NAME,
                ns,
                op.job.metadata.name,
                TERMINATION_MESSAGE_LIMIT_BYTES,
            )
            sidecar.delete_refused(op, op.job)
            op.job = create_or_adopt(op, without_native_sidecar(op, job_request), context)
        op.log.info("Created Job %s/%s", ns, op.job.metadata.name)
    ti = context["ti"]
    ti.xcom_push(key="job_name", value=op.job.metadata.name)
    ti.xcom_push(key="job_namespace", value=op.job.metadata.namespace)
    return op.job


def _json_names(names: Any) -> Any:
    """``container_logs`` / ``init_container_logs`` as JSON: True, None, a name, or a list of names."""
    if names is None or isinstance(names, (bool, str)):
        return names
    return [str(n) for n in names]


def _template_labels(job: k8s.V1Job) -> dict[str, str]:
    template = job.spec.template if job.spec else None
    return dict((template.metadata.labels if template and template.metadata else None) or {})

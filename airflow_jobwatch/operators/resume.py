"""The resume: what the operator does once the wait has ended (``execute_complete``).

The trigger's event (ours, or upstream's ``KubernetesJobTrigger``'s) is reported with the Job and its
pods as they are now: the ``job`` XCom, the ending's log lines, the pods' logs, the failure (rebuilt
from the settled pods), the XCom value; then a Job that still runs is stopped as ``on_kill`` stops it,
and ``on_finish_action`` is applied to the pods. It works on the operator's
:class:`~airflow_jobwatch.operators.taskjob.TaskJob`, whose ``stop`` and ``finish_pods`` are the
operator's own steps.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowTaskTimeout
from kubernetes.client.rest import ApiException

from airflow_jobwatch.ending.end import failure_text, log_ending
from airflow_jobwatch.ending.masking import XCOM_RESULT_MASKED
from airflow_jobwatch.ending.outcomes import OUTCOME_FAILED, OUTCOME_TIMEOUT, STATUS_SUCCESS
from airflow_jobwatch.kube.meaning import xcom_sidecar
from airflow_jobwatch.kube.meaning.result import EMPTY_XCOM_RESULT, JobResult, XComResultError
from airflow_jobwatch.kube.meaning.states import classify_job, classify_pod
from airflow_jobwatch.operators import sidecar
from airflow_jobwatch.operators.podlogs import write_pod_logs
from airflow_jobwatch.operators.request import api_error_message

if TYPE_CHECKING:
    from airflow.sdk import Context
    from kubernetes.client import models as k8s

    from airflow_jobwatch.operators.taskjob import TaskJob

__all__ = [
    "complete",
    "event_identity",
    "read_job_now",
    "read_pods",
    "settled_pods",
    "stop_unfinished_job",
    "xcom_value",
]


def complete(tj: TaskJob, context: Context, event: dict[str, Any]) -> Any:
    """``KubernetesJobOperator.execute_complete``: report the trigger's event (ours or upstream's).

    What a user sees is in ``execute_complete``'s docstring; why each step is here is beside the step.
    """
    name, ns, uid = event_identity(event)
    status = event.get("status")
    outcome = event.get("outcome") or status
    reason, message = event.get("reason"), event.get("message")
    context["ti"].xcom_push(key="job", value=event.get("job"))
    pods = read_pods(tj, ns, uid, event)
    unfinished: k8s.V1Job | None = None
    if status != STATUS_SUCCESS and ns and name:
        job_now = read_job_now(tj, ns, name, uid)
        if job_now is not None:
            fatal = tj.fatal_reasons
            if outcome == OUTCOME_FAILED:
                pods = settled_pods(tj, job_now, pods, ns, uid, event, fatal)
                state = classify_job(job_now, pods, fatal_waiting_reasons=fatal)
                # Rebuilt from the pods only while they exist: once cleaned up, the event's message
                # (read before they went, or from the result written onto the Job) is the one that
                # still names the failing container's exit code.
                if pods and state.terminal and state.phase == "failed":
                    message = state.message  # names the failing pod and its container's exit code
            if not classify_job(job_now).terminal:  # the Job's own conditions: it still runs
                unfinished = job_now
    result = JobResult.from_payload(event)
    expected_results = len(result.xcom_result or ())
    if event.get(XCOM_RESULT_MASKED):  # the event's texts held a secret and were masked: not the value
        result = dataclasses.replace(result, xcom_result=None)
    result = result.with_fresh_pods(pods, tj.base_container_name)
    log_ending(
        tj.log,
        {**event, "namespace": ns, "name": name, "outcome": outcome, "message": message},
        [p.as_dict() for p in result.pods],
    )
    try:
        if tj.get_logs:
            for pod in pods:
                write_pod_logs(tj, pod)
        if status != STATUS_SUCCESS:
            text = failure_text(
                {
                    **event,
                    "namespace": ns,
                    "name": name,
                    "outcome": outcome,
                    "reason": reason,
                    "message": message,
                },
                disruption_retries=tj.disruption_retries,
            )
            if outcome == OUTCOME_TIMEOUT:
                raise AirflowTaskTimeout(text)
            raise AirflowException(text)
        if tj.do_xcom_push:  # results printed by the pods' XCom sidecars read from their logs first
            job_template = ((event.get("job") or {}).get("spec") or {}).get("template") or {}
            carried = [
                t for t in event.get("xcom_result") or [] if t and str(t).rstrip() != EMPTY_XCOM_RESULT
            ]
            if not pods and not carried and event.get("pod_names") and xcom_sidecar.has_sidecar(job_template):
                # the value was in the sidecars' logs, which went with the pods (the event carries none, as
                # it does when read back from the result written onto the Job): never report None for it
                raise AirflowException(
                    f"Job {ns}/{name} succeeded, but its return value cannot be read: the pods whose XCom "
                    "sidecars printed it are gone. Keep the pods until the task has resumed "
                    "(on_finish_action, the Job's ttlSecondsAfterFinished)."
                )
            if event.get(XCOM_RESULT_MASKED) and len(result.xcom_result or ()) < expected_results:
                raise AirflowException(
                    f"Job {ns}/{name} succeeded, but its return value cannot be read: it holds a secret of "
                    "this task, which is masked in the event the triggerer logged, and the pods that "
                    "printed it are gone. Keep the pods until the task has resumed (on_finish_action, the "
                    "Job's ttlSecondsAfterFinished), or return no secret from the task."
                )
            return xcom_value(tj, sidecar.with_sidecar_results(tj, result, pods))
        return None
    finally:
        if unfinished is not None:
            stop_unfinished_job(tj, unfinished, outcome, reason)
        tj.finish_pods(pods)


def read_job_now(tj: TaskJob, ns: str, name: str, uid: str | None) -> k8s.V1Job | None:
    """The Job as the API server has it now; None when it is gone (or another Job took its name) or
    cannot be read (logged)."""
    try:
        job = tj.job_client.read_namespaced_job(name=name, namespace=ns)
    except ApiException as e:
        if e.status != 404:
            tj.log.warning("Could not read Job %s/%s: %s", ns, name, api_error_message(e))
        return None
    except Exception as e:  # the API unreachable (what may have ended the wait): say so, go on
        tj.log.warning("Could not read Job %s/%s: %s", ns, name, e)
        return None
    if uid and job.metadata.uid != uid:
        return None
    return job


def settled_pods(
    tj: TaskJob,
    job: k8s.V1Job,
    pods: list[k8s.V1Pod],
    ns: str,
    uid: str | None,
    event: dict[str, Any],
    fatal: Collection[str],
) -> list[k8s.V1Pod]:
    """The Job's pods once every pod it counts as ended shows so (at most ``_POD_SETTLE_SECONDS``).

    The Job controller counts a pod only after it saw it end, so a list read after the Job's
    condition normally has them all; the bounded re-read covers a list answered before that.
    """
    want = _ended_pods_counted(job)
    if not pods:
        # None listed by a consistent read made after the Job ended: they were deleted (a TTL, a user,
        # an earlier cleanup), not late; the event's result stands, and waiting would not bring them.
        return pods
    deadline = time.monotonic() + _POD_SETTLE_SECONDS
    delay = 0.1
    while True:
        ended = sum(1 for p in pods if classify_pod(p, fatal_waiting_reasons=fatal).terminal)
        if ended >= want or time.monotonic() >= deadline:
            return pods
        time.sleep(min(delay * random.uniform(0.5, 1.5), max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 1.0)
        pods = read_pods(tj, ns, uid, event)


def stop_unfinished_job(tj: TaskJob, job: k8s.V1Job, outcome: str | None, reason: str | None) -> None:
    """The task fails while its Job still runs: delete the Job as ``on_kill`` does (with
    ``on_kill_propagation_policy`` / ``termination_grace_period``; its pods unless
    ``on_kill_action="keep_pod"``). Best effort: a failure here never hides the task's own error."""
    tj.log.warning(
        "Job %s/%s has not finished, but the task ends (%s: %s): deleting it as on_kill does",
        job.metadata.namespace,
        job.metadata.name,
        outcome,
        reason,
    )
    try:
        tj.stop(job)
    except Exception as e:
        tj.log.warning(
            "Could not delete Job %s/%s; it may still be running: %s",
            job.metadata.namespace,
            job.metadata.name,
            e,
        )


# -- after the wait ----------------------------------------------------------------------------------
def read_pods(tj: TaskJob, ns: str | None, uid: str | None, event: dict[str, Any]) -> list[k8s.V1Pod]:
    """The Job's pods (oldest first), best effort: a Job deleted with its pods has none left."""
    if not ns:
        return []
    try:
        if uid:
            selector = f"controller-uid={uid}"
            pods = tj.client.list_namespaced_pod(namespace=ns, label_selector=selector).items
        else:  # an event without the Job (upstream's, when it never read it): its pod names
            pods = []
            for pod_name in event.get("pod_names") or []:
                try:
                    pods.append(tj.client.read_namespaced_pod(pod_name, event.get("pod_namespace") or ns))
                except ApiException as e:
                    if e.status != 404:
                        raise
    except ApiException as e:
        tj.log.warning("Could not read the Job's pods: %s", api_error_message(e))
        return []
    return sorted(pods, key=lambda p: (p.metadata.creation_timestamp or 0, p.metadata.name))


def xcom_value(tj: TaskJob, result: JobResult) -> Any:
    """The value the task returns, read by the one reader the trigger uses too
    (:class:`~airflow_jobwatch.kube.meaning.result.JobResult`)."""
    try:
        return result.xcom_value(xcom_path=tj.xcom_path, unwrap_single=tj.unwrap_single, log=tj.log)
    except XComResultError as e:
        raise AirflowException(str(e)) from None


#: How long a failure's report waits for the pods the Job counts as ended to show so in a list
#: (see :func:`settled_pods`); normally the first list already does.
_POD_SETTLE_SECONDS = 5.0


def _ended_pods_counted(job: k8s.V1Job) -> int:
    """How many of its pods the Job has seen end: its counters plus the ones not yet counted."""
    status = job.status
    if status is None:
        return 0
    uncounted = status.uncounted_terminated_pods
    return (
        (status.succeeded or 0)
        + (status.failed or 0)
        + len((uncounted.succeeded or []) if uncounted else [])
        + len((uncounted.failed or []) if uncounted else [])
    )


def event_identity(event: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """The Job's name, namespace and uid from our event or upstream's (whose ``job`` is a V1Job dict)."""
    job = event.get("job") if isinstance(event.get("job"), dict) else {}
    meta = (job or {}).get("metadata") or {}
    name = event.get("name") or meta.get("name")
    ns = event.get("namespace") or meta.get("namespace") or event.get("pod_namespace")
    uid = event.get("uid") or meta.get("uid")
    return name, ns, uid

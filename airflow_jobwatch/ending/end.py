"""Ending a deferred task from the triggerer, and the words a failed Job's task fails with.

Airflow 3 lets a trigger end its task itself (``TaskSuccessEvent`` / ``TaskFailedEvent``, with XComs):
no worker resumes, so the task instance never goes back through SCHEDULED and QUEUED on the same try.
That closes Airflow core's stale defer-exit race: when a trigger fires before the scheduler has drained
the executor's SUCCESS for the worker that deferred, the scheduler finds a QUEUED task instance on the
same try and fails it as killed externally. A task instance the trigger already ended is in a finished
state, and the scheduler ignores the stale event for it.

The operator decides at defer time whether everything it does after the wait can run in the triggerer
(see :func:`end_plan_allowed`); the trigger then does exactly that here: the ``job`` and return-value
XComs, the same log lines, the pods' logs (``get_logs``, see :mod:`~airflow_jobwatch.ending.pod_logs`),
``on_finish_action`` on the pods, and the same failure message. Anything else resumes on a worker, held
for at most ``[jobwatch] resume_hold_seconds`` after the deferral; a task ended here is never held.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_jobwatch.ending import pod_logs, sidecar_results
from airflow_jobwatch.ending.interface import EndingTrigger
from airflow_jobwatch.kube.meaning.result import (
    EMPTY_XCOM_RESULT,
    RESULT_ANNOTATION,
    RESULT_ANNOTATION_LIMIT_BYTES,
    TERMINATION_MESSAGE_LIMIT_BYTES,
    JobResult,
    XComResultError,
    log_xcom_results,
    parse_xcom_results,
)

__all__ = [
    "EMPTY_XCOM_RESULT",
    "TERMINATION_MESSAGE_LIMIT_BYTES",
    "XComResultError",
    "end_from_triggerer",
    "failure_text",
    "log_ending",
    "may_fail_here",
    "xcom_results",
]

#: ``[jobwatch] resume_hold_seconds``: a resume that fires this soon after the task deferred is held
#: until this many seconds after the deferral, so that the scheduler has drained the executor's SUCCESS
#: for the worker that deferred while the task instance is still DEFERRED or SCHEDULED with
#: ``next_method`` set (which its guard ignores), before the resume makes it QUEUED on the same try. A
#: Job that ends later is not held. 5 s was not enough on a loaded 2-core machine (the scheduler drained
#: the worker's exit 6 s after the deferral).
RESUME_HOLD_OPTION = "resume_hold_seconds"


def resume_hold_seconds() -> float:
    """``[jobwatch] resume_hold_seconds`` (0 or more)."""
    from airflow_jobwatch import config as jobwatch_config

    return jobwatch_config.get_float(RESUME_HOLD_OPTION, minimum=0)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def disruption_clause(disruptions: list[dict[str, Any]] | None, disruption_retries: int | None) -> str:
    """What the cluster did to the Job's pods, for a failure message: '' when nothing."""
    if not disruptions:
        return ""
    listed = "; ".join(f"pod {d.get('pod')} was {d.get('message') or d.get('reason')}" for d in disruptions)
    text = f" after {plural(len(disruptions), 'disruption')}: {listed}"
    if not disruption_retries:
        text += "; `disruption_retries` absorbs disruptions"
    return text + "."


def failure_text(event: dict[str, Any], *, disruption_retries: int | None = None) -> str:
    """The task's failure message for a trigger event that is not a success: the same words whether
    the task fails in the worker, on resume, or from the triggerer."""
    outcome = event.get("outcome") or event.get("status")
    text = (
        f"Kubernetes Job {event.get('namespace')}/{event.get('name')} {outcome}: "
        f"{event.get('reason')}: {event.get('message')}"
    )
    if event.get("reason") != "DisruptionRetriesExceeded":  # that message names each one already
        clause = disruption_clause(event.get("disruptions"), disruption_retries)
        if clause:
            text = f"{text.rstrip()}{'' if text.rstrip().endswith('.') else '.'} It failed{clause}"
    return text


#: The return value from the pods' termination messages (kept under its old name).
xcom_results = parse_xcom_results


def log_ending(log: Any, event: dict[str, Any], pods: list[dict[str, Any]]) -> None:
    """The lines the task log gets when a Job's wait ends, before its result or error."""
    log.info(
        "Job %s/%s ended: %s (%s) %s",
        event.get("namespace"),
        event.get("name"),
        event.get("outcome") or event.get("status"),
        event.get("reason"),
        event.get("message"),
    )
    for pod in pods:
        log.info(
            "  pod %s: %s, exit code %s, reason %s",
            pod.get("name"),
            pod.get("phase"),
            pod.get("exit_code"),
            pod.get("reason"),
        )


def xcom_json(value: Any) -> Any:
    """``value`` as Airflow's XCom encoder writes it (datetimes and tuples as tagged objects), so that
    an XCom the triggerer stores reads back exactly as the worker's would."""
    from airflow.utils.json import XComEncoder

    return json.loads(json.dumps(value, cls=XComEncoder))


def trigger_failure_respects_retries(version: str | None = None) -> bool:
    """Whether this Airflow's ``TaskFailedEvent`` sends a task that has retries left to UP_FOR_RETRY.

    Airflow 3.1, 3.2 and 3.3.0 set FAILED whatever the retries (and run ``on_failure_callback``);
    3.3.1 and later route it through the task's retry eligibility, as a failure on a worker.
    """
    from packaging.version import Version

    if version is None:
        from airflow import __version__

        version = __version__
    return Version(str(version)).release >= (3, 3, 1)


def job_finished(job: dict[str, Any] | None) -> bool:
    """The Job's own conditions say it has ended (Complete, Failed, SuccessCriteriaMet, FailureTarget),
    in the ``V1Job.to_dict()`` shape or the API's."""
    if not job:
        return False
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget") and (
            str(condition.get("status")) == "True"
        ):
            return True
    return False


async def hold_resume(trigger: EndingTrigger, hold_seconds: float | None = None) -> None:
    """Hold a resume that fires within ``hold_seconds`` (``[jobwatch] resume_hold_seconds``) of the
    deferral until that much time has passed since it; a resume that comes later is not held at all."""
    if trigger.deferred_at is None:
        return
    import asyncio
    import time

    hold = resume_hold_seconds() if hold_seconds is None else hold_seconds
    wait = min(hold, trigger.deferred_at + hold - time.time())
    if wait > 0:
        trigger.log.info(
            "Job %s/%s ended %.1f s after the task deferred; resuming the task in %.1f s, once the "
            "scheduler has seen the deferring worker exit",
            trigger.namespace,
            trigger.job_name,
            hold - wait,
            wait,
        )
        await asyncio.sleep(wait)


async def end_from_triggerer(trigger: EndingTrigger, payload: dict[str, Any]) -> Any:
    """End the task here with what ``execute_complete`` would do on a worker, or return None to resume.

    Ends it for a Job that succeeded, and for one whose own conditions say it failed when the operator
    allowed a failure from here (``end_task["fail"]``); every other ending (a timeout, an unreachable
    API, a Job deleted, a fail-fast end of a Job that still runs) resumes, since the worker must raise
    the timeout or stop the Job.
    """
    from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent

    plan = trigger.end_task or {}
    if getattr(trigger, "secrets", None) is None:
        # The task's secrets are not known here (an operator that did not send them, or an Airflow
        # without a masker to read): what this path writes (pod logs, XCom and termination-message
        # lines) would be in clear. A worker's supervisor masks them: resume there.
        trigger.log.info(
            "The task's secrets are not known to the triggerer: resuming the task on a worker, which "
            "masks them in the task log"
        )
        return None
    outcome = payload.get("outcome")
    may_fail = may_fail_here(plan)
    if outcome == "failed":
        if not may_fail or not job_finished(payload.get("job")):
            return None
    elif outcome != "success":
        return None
    log = trigger.log
    xcoms: dict[str, Any] = {"job": xcom_json(payload.get("job"))}
    result = JobResult.from_payload(payload)
    xcom_path = str(plan.get("xcom_path"))
    unwrap_single = bool(plan.get("unwrap_single", True))
    error: str | None = None
    value: Any = None
    if outcome == "success":
        if plan.get("push_return"):
            try:
                # results printed by the pods' XCom sidecars (sidecar_results.py); kept in the payload
                # so that the result written onto the Job before cleanup is the one returned. Read and
                # parsed within the process's memory budget, shared with the pod logs' tails.
                limit = sidecar_results.TRIGGERER_RESULT_BYTES
                async with pod_logs.budget().hold(limit):
                    result = await sidecar_results.with_sidecar_results(trigger, payload, result, limit=limit)
                    payload = sidecar_results.payload_with(payload, result)
                    value = result.xcom_value(xcom_path=xcom_path, unwrap_single=unwrap_single)
            except sidecar_results.ResultTooLargeHere as e:
                trigger.log.info("Resuming the task on a worker, which reads its result: %s", e)
                return None
            except XComResultError as e:
                if not may_fail:
                    return None
                error = str(e)
    else:
        error = failure_text(payload, disruption_retries=trigger.disruption_retries)
    # Lines whose number grows with the Job's pods are written paced, as the pod logs are (pod_logs.Lines).
    ending = pod_logs.Lines()
    log_ending(ending, payload, list(payload.get("pods") or []))
    await ending.write(log)
    logs = plan.get("logs")
    if logs is not None:
        await write_pod_logs(trigger, payload, {"on_finish_action": plan.get("on_finish_action"), **logs})
    if error is None and plan.get("push_return"):  # the same lines, in order, as the worker writes
        results = pod_logs.Lines()
        log_xcom_results(result.xcom_result or (), results)  # not parsed again: ``value`` is held already
        await results.write(log)
    await cleanup_pods(trigger, payload, str(plan.get("on_finish_action") or "delete_pod"))
    if error is not None:
        log.error("Task failed with exception: %s", error)
        await pod_logs.drained(log)  # every line above in the task's log before the task ends
        return TaskFailedEvent(xcoms=xcoms)
    if value is not None:
        xcoms["return_value"] = xcom_json(value)
    await pod_logs.drained(log)
    return TaskSuccessEvent(xcoms=xcoms)


def may_fail_here(plan: dict[str, Any]) -> bool:
    """Whether a failed Job's task may fail from this triggerer: on its last try, or where this
    triggerer's Airflow sends a task with retries left to UP_FOR_RETRY. Decided here, not by the worker
    that deferred: during an upgrade the two run different Airflow versions, and the triggerer's is the
    one that handles the ``TaskFailedEvent``. (A plan from an earlier release carries its worker's
    answer as ``fail``.)"""
    if "last_try" in plan:
        return bool(plan["last_try"]) or trigger_failure_respects_retries()
    return bool(plan.get("fail"))


def requested_containers(
    log: Any, pod_name: str, init_names: list[str], names: list[str], logs: dict[str, Any]
) -> list[str]:
    """Init containers named by ``init_container_logs``, then containers named by ``container_logs``
    (``True``: all), in the pod's order; a requested container the pod lacks is a warning."""
    chosen: list[str] = []
    for requested, present in (
        (logs.get("init_container_logs"), init_names),
        (logs.get("container_logs"), names),
    ):
        if not requested:
            continue
        if requested is True:
            chosen.extend(present)
            continue
        for name in [requested] if isinstance(requested, str) else list(requested):
            if name in present:
                chosen.append(name)
            else:
                log.warning("Container %s whose logs were requested is not in pod %s", name, pod_name)
    return chosen


async def write_pod_logs(trigger: EndingTrigger, payload: dict[str, Any], logs: dict[str, Any]) -> None:
    """Every requested container's log of every pod of the Job into the task log, as the operator
    writes it on resume: decoded, line by line, prefixed ``[pod] [container]``, pods oldest first. At most
    ``[jobwatch] trigger_log_max_bytes`` of lines, the tail, with a note where lines were left out. A log
    that cannot be read is a warning."""
    if not payload.get("uid"):
        return
    log = trigger.log
    limit, problem = pod_logs.max_bytes()
    if problem is not None:
        log.warning("%s", problem)
    on_finish_action = str(logs.get("on_finish_action") or "delete_pod")
    tail = pod_logs.Tail(limit)
    # The tail's bytes come from the process's budget for as long as it is held: read, then written.
    async with pod_logs.budget().hold(limit):
        async with pod_logs.reading():
            if not await _read_pod_logs(trigger, payload, logs, tail, on_finish_action):
                return
        await pod_logs.write(log, tail, on_finish_action)


async def _read_pod_logs(
    trigger: EndingTrigger,
    payload: dict[str, Any],
    logs: dict[str, Any],
    tail: pod_logs.Tail,
    on_finish_action: str,
) -> bool:
    """Every requested container's log of every pod of the Job into ``tail``; False when the pods could
    not be listed (said in the task log)."""
    from kubernetes_asyncio.client import CoreV1Api

    log = trigger.log
    try:
        api, release = await trigger.end_client()
    except Exception as e:
        log.warning("Could not read the logs of Job %s/%s: %s", trigger.namespace, trigger.job_name, e)
        return False
    try:
        core = CoreV1Api(api)
        try:
            listed = await core.list_namespaced_pod(
                trigger.namespace,
                label_selector=f"controller-uid={payload.get('uid')}",
                _request_timeout=pod_logs.READ_TIMEOUT,
            )
        except Exception as e:
            log.warning("Could not read the Job's pods: %s", e)
            return False
        pods = sorted(listed.items, key=lambda p: (str(p.metadata.creation_timestamp or ""), p.metadata.name))
        for pod in pods:
            spec = pod.spec
            containers = requested_containers(
                tail,
                pod.metadata.name,
                [c.name for c in (spec.init_containers or [])] if spec else [],
                [c.name for c in (spec.containers or [])] if spec else [],
                logs,
            )
            kept = pod_logs.pod_kept(
                on_finish_action,
                pod.status.phase if pod.status else None,
                _base_succeeded(pod, trigger.base_container_name),
            )
            for container in containers:
                await pod_logs.read_into(
                    core, tail, pod.metadata.name, trigger.namespace, container, kept=kept
                )
    finally:
        await release()
    return True


def _base_succeeded(pod: Any, base: str) -> bool:
    for cs in (pod.status.container_statuses or []) if pod.status else []:
        if cs.name == base and cs.state and cs.state.terminated and cs.state.terminated.exit_code == 0:
            return True
    return False


async def cleanup_pods(trigger: EndingTrigger, payload: dict[str, Any], on_finish_action: str) -> None:
    """``on_finish_action`` on the Job's pods, as the operator does it after a resume: a pod kept or not
    succeeded gets upstream's ``already_checked`` label, then it is deleted or not by upstream's rule.
    Best effort: a failure here is logged and never changes the task's outcome.

    The result is made durable before any pod it was read from is deleted: it is written onto the Job
    (:func:`persist_result`), so that a second run of this trigger (another triggerer, a restart before
    the event was saved) reports the same result. When it cannot be written, every pod is kept.
    """
    uid = payload.get("uid")
    if not uid:
        return
    from kubernetes_asyncio.client import CoreV1Api, V1DeleteOptions
    from kubernetes_asyncio.client.exceptions import ApiException

    base = trigger.base_container_name
    try:
        api, release = await trigger.end_client()
    except Exception as e:
        trigger.log.warning(
            "Could not clean up the pods of Job %s/%s: %s", trigger.namespace, trigger.job_name, e
        )
        return
    try:
        if on_finish_action != "keep_pod":
            unsaved = await persist_result(api, trigger.namespace, trigger.job_name, payload)
            if unsaved is not None:
                trigger.log.warning(
                    "Keeping the pods of Job %s/%s (on_finish_action %s not applied): %s",
                    trigger.namespace,
                    trigger.job_name,
                    on_finish_action,
                    unsaved,
                )
                on_finish_action = "keep_pod"
        keep = on_finish_action in ("keep_pod", "delete_active_pod")
        core = CoreV1Api(api)
        listed = await core.list_namespaced_pod(trigger.namespace, label_selector=f"controller-uid={uid}")
        pods = sorted(listed.items, key=lambda p: (str(p.metadata.creation_timestamp or ""), p.metadata.name))
        lines = pod_logs.Lines()  # a line per pod: paced, as every line whose number grows with the pods
        for pod in pods:
            name, phase = pod.metadata.name, pod.status.phase if pod.status else None
            await lines.write(trigger.log)
            try:
                if phase != "Succeeded" or keep:
                    await core.patch_namespaced_pod(
                        name, trigger.namespace, body={"metadata": {"labels": {"already_checked": "True"}}}
                    )
                delete = (
                    on_finish_action == "delete_pod"
                    or (
                        on_finish_action == "delete_succeeded_pod"
                        and (phase == "Succeeded" or _base_succeeded(pod, base))
                    )
                    or (on_finish_action == "delete_active_pod" and phase in ("Running", "Pending"))
                )
                if delete:
                    lines.info("Deleting pod: %s", name)
                    await lines.write(trigger.log)
                    await core.delete_namespaced_pod(name, trigger.namespace, body=V1DeleteOptions())
                else:
                    lines.info("Skipping deleting pod: %s", name)
            except ApiException as e:
                if e.status != 404:
                    lines.warning("Error while cleaning up pod %s: HTTP %s", name, e.status)
        await lines.write(trigger.log)
    except Exception as e:
        trigger.log.warning(
            "Could not clean up the pods of Job %s/%s: %s", trigger.namespace, trigger.job_name, e
        )
    finally:
        await release()


async def persist_result(api: Any, namespace: str, name: str, payload: dict[str, Any]) -> str | None:
    """Write the event's result onto the Job (annotation ``RESULT_ANNOTATION``, signed with the first of
    ``result_keys()``), where a later reader of the same Job takes it from (:meth:`JobResult.read`); None
    when written, else why it was not (no key, too large, the Job gone or replaced, the API refused), in
    which case the pods must be kept."""
    from kubernetes_asyncio.client import BatchV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from airflow_jobwatch.ending.result_keys import result_keys

    keys = result_keys()
    if not keys:
        return (
            "[core] fernet_key is not set, so its result cannot be signed onto the Job (an unsigned result "
            "would not be used), so the pods that hold it are kept"
        )
    result = JobResult.from_payload(payload)
    text = result.to_annotation(keys[0])
    if text is None:
        return (
            f"its result is larger than {RESULT_ANNOTATION_LIMIT_BYTES} bytes, too large to keep on the Job, "
            "so the pods that hold it are kept"
        )
    batch = BatchV1Api(api)
    try:
        # The uid is checked on the Job as it is now: a Job re-created under this name is not annotated
        # with another Job's result (a reader also checks the uid written in the result).
        job = await batch.read_namespaced_job(name, namespace)
        if result.uid and job.metadata.uid != result.uid:
            return "the Job was replaced by another one of the same name"
        await batch.patch_namespaced_job(
            name,
            namespace,
            {"metadata": {"annotations": {RESULT_ANNOTATION: text}}},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )
    except ApiException as e:
        from airflow_jobwatch.kube.cluster.errors import access_denied_from_exception

        denied = access_denied_from_exception(
            e, verb="patch", resource="jobs", group="batch", namespace=namespace
        )
        if denied is not None:
            return f"the result could not be written onto the Job: {denied.message()}"
        return f"the result could not be written onto the Job: HTTP {e.status} {e.reason}"
    except Exception as e:
        return f"the result could not be written onto the Job: {type(e).__name__}: {e}"
    return None

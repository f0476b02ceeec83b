"""What a Job's state means (:func:`classify_job`), and what a Job means that vanished while the
watch was away (:func:`vanished_job_state`).

Part of the state classification (:mod:`airflow_jobwatch.kube.meaning.states` is its facade and states its
rules). Job conditions decide, never pod counters; the Job's pods only add detail.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from airflow_jobwatch.kube.meaning.containers import (
    ContainerProblem,
    fatal_waiting_container,
    first_failed_container,
)
from airflow_jobwatch.kube.meaning.objects import to_dict
from airflow_jobwatch.kube.meaning.objectstate import (
    DEFAULT_FATAL_WAITING_REASONS,
    FINAL_STATE_UNKNOWN,
    ObjectState,
    Phase,
)
from airflow_jobwatch.kube.meaning.pod_states import classify_live_pod, classify_pod, deleted_state
from airflow_jobwatch.kube.meaning.state_words import (
    as_int,
    as_map,
    as_maps,
    as_sentence,
    as_str,
    check_reasons,
    display_name,
    quote_message,
    true_condition,
    with_hint,
)

JOB_FAILED_CONDITIONS = ("Failed", "FailureTarget")  # final first: its reason/message are the settled ones
JOB_SUCCEEDED_CONDITIONS = ("Complete", "SuccessCriteriaMet")


def classify_job(
    job: Mapping[str, Any] | Any,
    pods: Iterable[Mapping[str, Any] | Any] | None = None,
    *,
    deleted: bool = False,
    fatal_waiting_reasons: Collection[str] = DEFAULT_FATAL_WAITING_REASONS,
) -> ObjectState:
    """What a Job's state means.

    The Job's own conditions decide success and failure. ``pods`` (the Job's pods, in any order; pods
    whose controller owner is another object are ignored) only add detail: the failing pod's exit code
    and termination message, and fail-fast, where a Job that is not yet terminal fails when one of its
    pods is stuck on a fatal waiting reason (the Job controller would wait for it forever, since such
    a pod never fails and so never counts against ``backoffLimit``).

    :param job: the Job as API JSON or a ``kubernetes`` / ``kubernetes_asyncio`` ``V1Job``.
    :param pods: the Job's pods, or ``None`` when not known.
    :param deleted: this is the last state we will see of the Job; unless it had reached a terminal
        condition, it failed with reason ``Deleted``.
    :param fatal_waiting_reasons: container waiting reasons that fail a pod (and so the Job) at once.
    :raises TypeError: when ``job`` or a pod is neither a mapping nor a client model.
    """
    check_reasons(fatal_waiting_reasons)
    obj = to_dict(job)
    pod_dicts = _own_pods(obj, pods)
    name = display_name(obj)
    spec = as_map(obj.get("spec"))
    status = as_map(obj.get("status"))

    failed = true_condition(status, JOB_FAILED_CONDITIONS)
    if failed is not None:
        reason = as_str(failed.get("reason")) or "Failed"
        text = f"Job '{name}' failed ({reason})"
        condition_message = quote_message(as_str(failed.get("message")))
        if condition_message:
            text += f": {condition_message}"
        culprit_name, problem = _job_culprit(pod_dicts, fatal_waiting_reasons)
        if problem is not None:
            text += f"; pod '{culprit_name}': {problem.describe()}"
        return ObjectState(
            "failed", True, reason, with_hint(text, reason), exit_code=problem.exit_code if problem else None
        )

    succeeded = true_condition(status, JOB_SUCCEEDED_CONDITIONS)
    if succeeded is not None:
        reason = as_str(succeeded.get("reason")) or "Complete"
        text = f"Job '{name}' succeeded ({reason})"
        condition_message = quote_message(as_str(succeeded.get("message")))
        return ObjectState(
            "succeeded",
            True,
            reason,
            as_sentence(f"{text}: {condition_message}" if condition_message else text),
        )

    suspended = true_condition(status, ("Suspended",))
    if suspended is not None or spec.get("suspend") is True:
        if deleted:
            return deleted_state("Job", obj, None, was="suspended")
        reason = (as_str(suspended.get("reason")) if suspended else None) or "Suspended"
        return ObjectState(
            "suspended",
            False,
            reason,
            f"Job '{name}' is suspended: it runs no pods until spec.suspend is set to false.",
        )

    for pod in pod_dicts:
        problem = fatal_waiting_container(pod, fatal_waiting_reasons)
        if problem is not None and as_str(as_map(pod.get("status")).get("phase")) not in (
            "Succeeded",
            "Failed",
        ):
            text = f"Job '{name}' cannot run: pod '{display_name(pod)}': {problem.describe()}"
            return ObjectState("failed", True, problem.reason, with_hint(text, problem.reason))

    return _live_job_state(obj, pod_dicts, deleted=deleted, fatal_waiting_reasons=fatal_waiting_reasons)


def _live_job_state(
    job: Mapping[str, Any],
    pods: list[Mapping[str, Any]],
    *,
    deleted: bool,
    fatal_waiting_reasons: Collection[str],
) -> ObjectState:
    name = display_name(job)
    status = as_map(job.get("status"))
    active = as_int(status.get("active")) or 0
    counts = ", ".join(
        f"{key} {as_int(status.get(key)) or 0}" for key in ("active", "ready", "succeeded", "failed")
    )
    live = [
        (pod, state) for pod in pods if not (state := classify_live_pod(pod, fatal_waiting_reasons)).terminal
    ]
    started = active > 0 or as_str(status.get("startTime")) is not None or bool(live)
    if any(state.phase == "running" for _, state in live):
        phase: Phase = "running"
    elif live:
        # Every pod the Job has right now is still pending (unschedulable, pulling, ...).
        phase = "pending"
    else:
        phase = "running" if started else "pending"

    if deleted:
        return deleted_state("Job", job, None, was=phase)

    deleting = " (deletion in progress)" if as_map(job.get("metadata")).get("deletionTimestamp") else ""
    if phase == "pending":
        pending_pods = [(pod, state) for pod, state in live if state.phase == "pending"]
        if pending_pods:
            pod, state = pending_pods[0]
            return ObjectState(
                "pending",
                False,
                state.reason,
                as_sentence(f"Job '{name}' is pending{deleting} ({counts}); {state.message}"),
            )
        return ObjectState("pending", False, None, f"Job '{name}' has not started a pod yet{deleting}.")
    return ObjectState("running", False, None, f"Job '{name}' is running{deleting} ({counts}).")


def vanished_job_state(
    job: Mapping[str, Any] | Any,
    pods: Iterable[Mapping[str, Any] | Any] | None = None,
    *,
    fatal_waiting_reasons: Collection[str] = DEFAULT_FATAL_WAITING_REASONS,
) -> ObjectState:
    """What a Job means that vanished while the watch was away (a relist no longer listed it): its
    deletion was not seen, so neither was what it did in between.

    * The last state seen was terminal: that outcome stands (it was observed).
    * Otherwise the pods' final states decide only where they prove the Job's outcome on their own: a
      Job of one completion (not indexed, no ``podFailurePolicy`` or ``successPolicy``) succeeded when
      one of its pods succeeded, and failed (``BackoffLimitExceeded``) when more of its pods failed than
      ``backoffLimit`` allows and none still ran.
    * Otherwise the state is not terminal, with reason :data:`FINAL_STATE_UNKNOWN`: the Job may have
      succeeded, failed, or been deleted while running. Its message says so and gives no advice to run
      it again (a non-idempotent Job that did succeed must not run twice).

    :param job: the last state seen of the Job (API JSON or a client model).
    :param pods: the freshest copy seen of each of its pods (their DELETED events carry final states).
    :param fatal_waiting_reasons: as for :func:`classify_job`.
    """
    obj = to_dict(job)
    own = _own_pods(obj, pods)
    last = classify_job(obj, own, fatal_waiting_reasons=fatal_waiting_reasons)
    if last.terminal:
        return last
    name = display_name(obj)
    spec = as_map(obj.get("spec"))
    simple = (
        (as_int(spec.get("completions")) or 1) == 1
        and as_str(spec.get("completionMode")) in (None, "NonIndexed")
        and not spec.get("podFailurePolicy")
        and not spec.get("successPolicy")
    )
    if simple:
        states = [(pod, classify_pod(pod, fatal_waiting_reasons=fatal_waiting_reasons)) for pod in own]
        won = next((pod for pod, state in states if state.phase == "succeeded"), None)
        if won is not None:
            return ObjectState(
                "succeeded",
                True,
                "Complete",
                f"Job '{name}' succeeded: its pod '{display_name(won)}' succeeded (the Job itself "
                "vanished while the watch was reconnecting, and its pod's final state says how it ended).",
                exit_code=0,
            )
        backoff = as_int(spec.get("backoffLimit"))
        failed = sum(1 for _, state in states if state.phase == "failed")
        live = any(not state.terminal for _, state in states)
        if not live and failed > (6 if backoff is None else backoff):
            culprit, problem = _job_culprit(own, fatal_waiting_reasons)
            text = (
                f"Job '{name}' failed (BackoffLimitExceeded): {failed} of its pods failed"
                + (f"; pod '{culprit}': {problem.describe()}" if problem is not None else "")
                + " (the Job itself vanished while the watch was reconnecting; its pods' final states "
                "say how it ended)"
            )
            return ObjectState(
                "failed",
                True,
                "BackoffLimitExceeded",
                as_sentence(text),
                exit_code=problem.exit_code if problem else None,
            )
    return ObjectState(
        last.phase,
        False,
        FINAL_STATE_UNKNOWN,
        f"Job '{name}' vanished while the watch was reconnecting; its final state is unknown (last seen "
        f"{last.phase}: {last.message.rstrip('.')}). Whether it succeeded, failed or was deleted was "
        "not seen: check its results and its pods' logs before running it again.",
    )


def _own_pods(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any] | Any] | None
) -> list[Mapping[str, Any]]:
    """The given pods as dicts, minus those whose controller is not this Job.

    Guards against pods of an older Job of the same name (pod discovery by the ``job-name`` label
    alone finds those too) lending their exit code to this one.
    """
    if pods is None:
        return []
    job_uid = as_str(as_map(job.get("metadata")).get("uid"))
    result: list[Mapping[str, Any]] = []
    for pod in pods:
        obj = to_dict(pod)
        if job_uid is not None:
            owners = as_maps(as_map(obj.get("metadata")).get("ownerReferences"))
            controller = next((ref for ref in owners if ref.get("controller") is True), None)
            if controller is not None and as_str(controller.get("uid")) not in (None, job_uid):
                continue
        result.append(obj)
    return result


def _job_culprit(
    pods: list[Mapping[str, Any]], fatal_waiting_reasons: Collection[str]
) -> tuple[str, ContainerProblem | None]:
    """The pod that best explains a Job failure: the most recently created failed one, else a stuck one."""
    failed: list[tuple[datetime.datetime, str, ContainerProblem]] = []
    for pod in pods:
        problem = first_failed_container(pod)
        if problem is not None:
            failed.append((_created(pod), display_name(pod), problem))
    if failed:
        _, pod_name, problem = max(failed, key=lambda item: item[0])
        return pod_name, problem
    for pod in pods:
        stuck = fatal_waiting_container(pod, fatal_waiting_reasons)
        if stuck is not None:
            return display_name(pod), stuck
    return "", None


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _created(pod: Mapping[str, Any]) -> datetime.datetime:
    raw = as_str(as_map(pod.get("metadata")).get("creationTimestamp"))
    if raw is None:
        return _EPOCH
    try:
        value = datetime.datetime.fromisoformat(raw)
    except ValueError:
        return _EPOCH
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)

"""What a Pod's state means (:func:`classify_pod`), and the pod summary of trigger payloads.

Part of the state classification (:mod:`airflow_jobwatch.kube.meaning.states` is its facade and states its
rules).
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping
from typing import Any

from airflow_jobwatch.kube.meaning.containers import (
    ContainerProblem,
    fatal_waiting_container,
    first_failed_container,
    waiting_note,
)
from airflow_jobwatch.kube.meaning.disruptions import pod_disruption
from airflow_jobwatch.kube.meaning.objects import to_dict
from airflow_jobwatch.kube.meaning.objectstate import DEFAULT_FATAL_WAITING_REASONS, ObjectState
from airflow_jobwatch.kube.meaning.state_words import (
    as_map,
    as_sentence,
    as_str,
    check_reasons,
    display_name,
    quote_message,
    with_hint,
)


def classify_pod(
    pod: Mapping[str, Any] | Any,
    *,
    deleted: bool = False,
    fatal_waiting_reasons: Collection[str] = DEFAULT_FATAL_WAITING_REASONS,
) -> ObjectState:
    """What a Pod's state means.

    :param pod: the Pod as API JSON or a ``kubernetes`` / ``kubernetes_asyncio`` ``V1Pod``.
    :param deleted: this is the last state we will see of the pod (DELETED event or tombstone). A pod
        that is not terminal then failed with reason ``Deleted``. ``metadata.deletionTimestamp`` alone
        is not deletion: a graceful delete is in progress and the pod may still finish either way.
    :param fatal_waiting_reasons: container waiting reasons that fail the pod at once.
    :raises TypeError: when ``pod`` is neither a mapping nor a client model.
    """
    check_reasons(fatal_waiting_reasons)
    obj = to_dict(pod)
    state = classify_live_pod(obj, fatal_waiting_reasons)
    if deleted and not state.terminal:
        disruption = pod_disruption(obj, deleted=True)
        if disruption is not None and disruption.reason != "Deleted":
            # Deleted by whoever disrupted it (the Eviction API, the taint manager, the pod GC):
            # name the disruption rather than a bare deletion.
            problem = first_failed_container(obj)
            text = f"Pod '{display_name(obj)}' was deleted while {state.phase}: {disruption.message}"
            if disruption.detail:
                text += f" ({disruption.detail.rstrip(' .')})"
            if problem is not None:
                text += f"; {problem.describe()}"
            return ObjectState(
                "failed",
                True,
                disruption.reason,
                with_hint(text, disruption.reason),
                exit_code=problem.exit_code if problem else None,
            )
        return deleted_state("Pod", obj, first_failed_container(obj), was=state.phase)
    return state


def classify_live_pod(pod: Mapping[str, Any], fatal_waiting_reasons: Collection[str]) -> ObjectState:
    name = display_name(pod)
    status = as_map(pod.get("status"))
    phase = as_str(status.get("phase"))

    if phase == "Succeeded":
        # "All containers in the Pod have terminated in success": exit code 0 by definition.
        return ObjectState("succeeded", True, "Completed", f"Pod '{name}' succeeded.", exit_code=0)

    if phase == "Failed":
        problem = first_failed_container(pod)
        pod_reason = as_str(status.get("reason"))  # Evicted, DeadlineExceeded, NodeLost, Shutdown, ...
        pod_message = quote_message(as_str(status.get("message")))
        # Since 1.26 a pod killed by a disruption (preemption, taint eviction, the eviction API,
        # kubelet shutdown) carries a DisruptionTarget condition saying so; its container only shows
        # the resulting 137. Name the disruption in the user's words, then the server's message.
        disruption = pod_disruption(pod)
        if disruption is not None:
            pod_reason = disruption.reason
            pod_message = disruption.message + (
                f" ({disruption.detail.rstrip(' .')})" if disruption.detail else ""
            )
        reason = pod_reason or (problem.reason if problem else None) or "Failed"
        text = f"Pod '{name}' failed"
        if pod_reason:
            text += f" ({pod_reason})"
        if pod_message:
            text += f": {pod_message}"
        if problem:
            text += f"; {problem.describe()}"
        return ObjectState(
            "failed",
            True,
            reason,
            with_hint(text, reason),
            exit_code=problem.exit_code if problem else None,
        )

    fatal = fatal_waiting_container(pod, fatal_waiting_reasons)
    if fatal is not None:
        return ObjectState(
            "failed",
            True,
            fatal.reason,
            with_hint(f"Pod '{name}' cannot run: {fatal.describe()}", fatal.reason),
        )

    deleting = " (deletion in progress)" if as_map(pod.get("metadata")).get("deletionTimestamp") else ""
    if phase == "Running":
        # A Running pod can still have a container waiting (CrashLoopBackOff under
        # restartPolicy OnFailure): say so, with the exit code of its last crash.
        waiting_reason, note = waiting_note(pod, scheduling=False)
        text = f"Pod '{name}' is running{deleting}"
        if note:
            last = first_failed_container(pod)
            text += f", but {note}" + (f"; last time {last.describe()}" if last else "")
        return ObjectState("running", False, waiting_reason, as_sentence(text))
    if phase == "Unknown":
        # Deprecated phase: the node stopped reporting. The pod may well still be running there, and
        # the node lifecycle controller will move it on, so this is not an outcome.
        reason = as_str(status.get("reason")) or "Unknown"
        return ObjectState(
            "running",
            False,
            reason,
            f"Pod '{name}' is in phase Unknown: its node stopped reporting{deleting}.",
        )
    waiting_reason, note = waiting_note(pod)
    text = f"Pod '{name}' is pending{deleting}"
    return ObjectState("pending", False, waiting_reason, as_sentence(f"{text}: {note}" if note else text))


def deleted_state(
    kind: str, obj: Mapping[str, Any], problem: ContainerProblem | None, *, was: str
) -> ObjectState:
    text = f"{kind} '{display_name(obj)}' was deleted while {was}, before it finished"
    if problem is not None:
        text += f"; {problem.describe()}"
    if kind == "Pod":
        why = "node loss, a force deletion, an eviction or garbage collection of its owner"
    else:
        why = "a user or a cleanup deleted it, or it went with its owner (cascading deletion)"
    return ObjectState(
        "failed",
        True,
        "Deleted",
        as_sentence(text) + f" Likely causes: {why}; nothing will finish this work, so retry it.",
        exit_code=problem.exit_code if problem else None,
    )


def pod_summary(pod: Mapping[str, Any] | Any, *, deleted: bool = False) -> dict[str, Any]:
    """A small JSON-safe description of a pod for trigger payloads.

    ``{"name", "phase", "exit_code", "reason"}``; ``phase`` is the classified phase (``pending``,
    ``running``, ``succeeded``, ``failed``), not the raw ``status.phase``, so a Pending pod stuck in
    ``ErrImagePull`` reads ``failed``.
    """
    obj = to_dict(pod)
    state = classify_pod(obj, deleted=deleted)
    return {
        "name": as_str(as_map(obj.get("metadata")).get("name")),
        "phase": state.phase,
        "exit_code": state.exit_code,
        "reason": state.reason,
    }


def parse_time(value: str | None) -> datetime.datetime | None:
    """An RFC 3339 time of the API (``2026-01-02T03:04:05Z``), or None when absent or malformed."""
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def completion_time(pod: dict[str, Any]) -> datetime.datetime | None:
    """When the pod finished: its last container's ``finishedAt`` (init containers included), else its
    latest condition transition, else its creation (upstream's rule)."""
    status = pod.get("status") or {}
    statuses = [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]
    finished = [
        t
        for s in statuses
        if (t := parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))) is not None
    ]
    if finished:
        return max(finished)
    transitions = [
        t for c in status.get("conditions") or [] if (t := parse_time(c.get("lastTransitionTime")))
    ]
    if transitions:
        return max(transitions)
    return parse_time((pod.get("metadata") or {}).get("creationTimestamp"))

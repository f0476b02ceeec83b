"""What a pod's containers say: which one failed or cannot start, why a pod is still waiting, and
whether any container ever started.

Part of the state classification (:mod:`airflow_jobwatch.kube.meaning.states` is its facade and states its
rules).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_jobwatch.kube.meaning.objectstate import TRANSIENT_WAITING_MESSAGES
from airflow_jobwatch.kube.meaning.state_words import as_int, as_map, as_maps, as_str, quote_message


@dataclass(frozen=True, slots=True)
class ContainerProblem:
    """A container that failed (terminated non-zero) or cannot start (fatal waiting reason)."""

    kind: str  # "init container", "container" or "sidecar container"
    name: str
    reason: str | None
    exit_code: int | None
    detail: str | None  # termination or waiting message
    waiting: bool

    def describe(self) -> str:
        if self.waiting:
            text = f"{self.kind} '{self.name}' cannot start: {self.reason}"
        else:
            code = "an unknown code" if self.exit_code is None else f"code {self.exit_code}"
            text = f"{self.kind} '{self.name}' exited with {code}"
            if self.reason and self.reason not in ("Error", "Completed"):
                text += f" ({self.reason})"
        if self.detail:
            text += f": {self.detail}"
        return text


def _container_statuses(pod: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Container statuses in the order that explains a failure best.

    Init containers come first (a pod whose init container failed never started its main
    containers), then the main containers, then restartable init containers ("sidecars",
    ``restartPolicy: Always``): the kubelet kills sidecars when the main containers end, so their
    exit code 137/143 is a consequence, never the cause.
    """
    spec = as_map(pod.get("spec"))
    status = as_map(pod.get("status"))
    sidecars = {
        as_str(c.get("name"))
        for c in as_maps(spec.get("initContainers"))
        if c.get("restartPolicy") == "Always"
    }
    init: list[Mapping[str, Any]] = []
    sidecar: list[Mapping[str, Any]] = []
    for cs in as_maps(status.get("initContainerStatuses")):
        (sidecar if as_str(cs.get("name")) in sidecars else init).append(cs)
    ordered: list[tuple[str, Mapping[str, Any]]] = [("init container", cs) for cs in init]
    ordered += [("container", cs) for cs in as_maps(status.get("containerStatuses"))]
    ordered += [("sidecar container", cs) for cs in sidecar]
    return ordered


def _terminated_problem(kind: str, cs: Mapping[str, Any], state_key: str) -> ContainerProblem | None:
    terminated = as_map(as_map(cs.get(state_key)).get("terminated"))
    if not terminated:
        return None
    exit_code = as_int(terminated.get("exitCode"))
    reason = as_str(terminated.get("reason"))
    if exit_code == 0 and reason in (None, "Completed"):
        return None
    if exit_code is None and reason in (None, "Completed"):
        return None
    return ContainerProblem(
        kind=kind,
        name=as_str(cs.get("name")) or "<unnamed>",
        reason=reason,
        exit_code=exit_code,
        detail=quote_message(as_str(terminated.get("message"))),
        waiting=False,
    )


def first_failed_container(pod: Mapping[str, Any]) -> ContainerProblem | None:
    """The container whose termination explains a failure.

    Its current state first; failing that its ``lastState`` (a container restarted under
    ``restartPolicy: OnFailure`` shows its last crash there while it waits in CrashLoopBackOff).
    """
    statuses = _container_statuses(pod)
    for state_key in ("state", "lastState"):
        for kind, cs in statuses:
            problem = _terminated_problem(kind, cs, state_key)
            if problem is not None:
                return problem
    return None


def fatal_waiting_container(
    pod: Mapping[str, Any], fatal_waiting_reasons: Collection[str]
) -> ContainerProblem | None:
    # Only a Pending pod fails fast, as upstream's KubernetesExecutor decides (its watcher checks the
    # waiting reasons of Pending pods only). In a Running pod the task has started: a restartable
    # init container ("sidecar") that is restarting into ImagePullBackOff does not stop it.
    if as_str(as_map(pod.get("status")).get("phase")) != "Pending":
        return None
    for kind, cs in _container_statuses(pod):
        waiting = as_map(as_map(cs.get("state")).get("waiting"))
        reason = as_str(waiting.get("reason"))
        if reason is None or reason not in fatal_waiting_reasons:
            continue
        message = as_str(waiting.get("message")) or ""
        if any(marker in message.lower() for marker in TRANSIENT_WAITING_MESSAGES):
            continue
        return ContainerProblem(
            kind=kind,
            name=as_str(cs.get("name")) or "<unnamed>",
            reason=reason,
            exit_code=None,
            detail=quote_message(message),
            waiting=True,
        )
    return None


def waiting_note(pod: Mapping[str, Any], *, scheduling: bool = True) -> tuple[str | None, str | None]:
    """Why a live pod is not running yet: the first waiting reason, else an Unschedulable condition."""
    for kind, cs in _container_statuses(pod):
        waiting = as_map(as_map(cs.get("state")).get("waiting"))
        reason = as_str(waiting.get("reason"))
        if reason:
            detail = quote_message(as_str(waiting.get("message")))
            note = f"{kind} '{as_str(cs.get('name')) or '<unnamed>'}' is waiting: {reason}"
            return reason, f"{note}: {detail}" if detail else note
    if not scheduling:
        return None, None
    status = as_map(pod.get("status"))
    for condition in as_maps(status.get("conditions")):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = as_str(condition.get("reason")) or "Unschedulable"
            detail = quote_message(as_str(condition.get("message")))
            return reason, f"not scheduled: {reason}: {detail}" if detail else f"not scheduled: {reason}"
    return None, None


def containers_started(pod: Mapping[str, Any]) -> bool:
    """Whether any container (init containers included) of the pod ever started, from its status alone.

    The one predicate for it: the executor's watcher and the disruption rules (``kube/meaning/disruptions.py``)
    both call it. What the pod's status cannot show (it was seen running earlier, then its last updates
    were lost) is the caller's to add: the executor never treats a pod it saw running as never started.

    A container that never started shows ``waiting`` (ContainerCreating, PodInitializing, an image
    pull), or, once the pod is terminal, ``terminated`` with reason ``ContainerStatusUnknown`` and no
    ``startedAt`` (the kubelet's placeholder). Anything else (``running``, a ``terminated`` with a
    start time, a ``lastState``, a restart, phase Running/Succeeded) means it ran.
    """
    status = as_map(pod.get("status"))
    if as_str(status.get("phase")) in ("Running", "Succeeded"):
        return True
    for _kind, cs in _container_statuses(pod):
        if cs.get("started") is True or (as_int(cs.get("restartCount")) or 0) > 0:
            return True
        state = as_map(cs.get("state"))
        if state.get("running") is not None:
            return True
        terminated = as_map(state.get("terminated"))
        if terminated and (
            as_str(terminated.get("startedAt"))
            or as_str(terminated.get("reason")) != "ContainerStatusUnknown"
        ):
            return True
        if as_map(as_map(cs.get("lastState")).get("terminated")):
            return True
    return False


_containers_started = containers_started

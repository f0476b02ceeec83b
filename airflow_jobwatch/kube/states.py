"""What a Pod or a Job object means: pending, running, succeeded, failed or suspended, and why.

This is the only place in airflow-jobwatch that derives a state from raw Kubernetes fields; the
executor and the trigger call it and never look at ``status`` themselves. The functions are pure:
one object (plus, for a Job, the pods it owns) in, one immutable :class:`ObjectState` out. They never
raise on odd shapes: a brand-new object has no ``status`` at all, fields the server omits are simply
missing, and a watch can hand us a half-written object, so any field of the wrong type is treated as
absent.

Rules, each answering a way real monitoring code has gone wrong (see ``docs/architecture.md``):

* Job conditions decide a Job's outcome, never pod counters. ``status.failed > 0`` is not a failed Job
  while ``backoffLimit`` allows retries, ``completionTime`` stays null on failure, and a pod can be
  Succeeded while the Job still counts it as active.
* A condition counts only when its ``status`` is the string ``"True"``; ``"False"`` and ``"Unknown"``
  decide nothing (``"False"`` is a truthy string, a classic bug).
* Since Kubernetes 1.31 the Job controller sets ``FailureTarget`` / ``SuccessCriteriaMet`` first and
  adds ``Failed`` / ``Complete`` only once every pod has terminated; the outcome is already decided at
  the first of the two, so both count. A ``Failed`` condition without a ``reason`` is still a failure.
* A container stuck waiting on a reason that never heals by itself (``ErrImagePull``, ...) keeps its
  pod in phase Pending forever; it fails fast instead, except for registry throttling ("pull QPS
  exceeded"), which does heal.
* ``deleted=True`` means we will never see the object again (a DELETED watch event or a tombstone
  after a relist). A terminal object keeps its outcome (a Succeeded pod seen only in its DELETED event
  is a success); anything else failed with reason ``Deleted``, because nobody will ever finish it.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from airflow_jobwatch.kube.objects import to_dict

__all__ = [
    "DEFAULT_FATAL_WAITING_REASONS",
    "TERMINAL_PHASES",
    "TRANSIENT_WAITING_MESSAGES",
    "ObjectState",
    "Phase",
    "classify_job",
    "classify_pod",
    "pod_disruption",
    "pod_summary",
]

Phase = Literal["pending", "running", "succeeded", "failed", "suspended"]
TERMINAL_PHASES: frozenset[str] = frozenset({"succeeded", "failed"})

#: Waiting reasons after which a container will not start without a change to the Pod spec, the image or
#: the cluster (a Secret, a ConfigMap, a registry credential). The kubelet keeps retrying them with a
#: back-off and the pod stays Pending, so waiting for them only burns the task's timeout.
DEFAULT_FATAL_WAITING_REASONS: frozenset[str] = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "ImageInspectError",
    }
)

#: Substrings of a waiting ``message`` that mark a fatal-looking reason as transient. The kubelet reports
#: its own registry rate limit (``registryPullQPS``) as ``ErrImagePull`` with "pull QPS exceeded"; the
#: next pull attempt succeeds once the limiter refills, so failing the pod would be wrong. Compared
#: case-insensitively.
TRANSIENT_WAITING_MESSAGES: tuple[str, ...] = ("pull qps exceeded",)

#: Longest termination message (or pod/condition message) quoted in a state's message. The kubelet keeps up
#: to 4096 bytes per container (and 80 log lines with ``FallbackToLogsOnError``); the error is usually at
#: the end, so the tail is kept. 1000 characters stay readable in a task log line and keep trigger events
#: (stored in Airflow's database) small.
MAX_QUOTED_CHARS = 1000

_JOB_FAILED_CONDITIONS = ("Failed", "FailureTarget")  # final first: its reason/message are the settled ones
_JOB_SUCCEEDED_CONDITIONS = ("Complete", "SuccessCriteriaMet")

# One sentence on what to do next, for the reasons whose cause is not obvious from the word alone.
_HINTS: Mapping[str, str] = {
    "ErrImagePull": "check the image name and tag, and that the registry is reachable and imagePullSecrets are set",
    "ImagePullBackOff": "check the image name and tag, and that the registry is reachable and imagePullSecrets are set",
    "InvalidImageName": "fix the image reference in the pod spec",
    "ImageInspectError": "the image could not be inspected on the node; check that the image is not corrupt",
    "CreateContainerConfigError": "check that the Secrets and ConfigMaps the pod references exist",
    "CreateContainerError": "the container runtime could not create the container; see the message above",
    "StartError": "the container's command could not be started; check command, args and the image's entrypoint",
    "ContainerCannotRun": "the container's command could not be started; check command, args and the image's entrypoint",
    "OOMKilled": "the container ran out of memory; raise its memory limit or lower its usage",
    "Evicted": "the node evicted the pod under resource pressure; set resource requests or retry",
    "PreemptionByScheduler": "a higher-priority pod took its place; give the task a higher priorityClassName or retry",
    "DeadlineExceeded": "activeDeadlineSeconds was reached; raise it or make the work faster",
    "BackoffLimitExceeded": "every allowed retry failed; see the failing pod's exit code and logs",
}


@dataclass(frozen=True, slots=True)
class ObjectState:
    """The meaning of one Pod or Job at one moment.

    :param phase: ``pending``, ``running``, ``succeeded``, ``failed`` or ``suspended``.
    :param terminal: whether the outcome is final; true exactly when ``phase`` is succeeded or failed.
    :param reason: a short machine word (``BackoffLimitExceeded``, ``ErrImagePull``, ``OOMKilled``,
        ``Deleted``, ...) or ``None`` when there is nothing to say beyond the phase.
    :param message: a sentence a user can act on (which container, its exit code and termination message).
    :param exit_code: the exit code of the container that decided a failure (``0`` for a Succeeded pod),
        ``None`` when unknown.
    """

    phase: Phase
    terminal: bool
    reason: str | None
    message: str
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if self.phase not in _PHASES:
            raise ValueError(f"ObjectState.phase must be one of {sorted(_PHASES)}, got {self.phase!r}")
        if self.terminal != (self.phase in TERMINAL_PHASES):
            raise ValueError(
                f"ObjectState.terminal must be true exactly for phases {sorted(TERMINAL_PHASES)}, "
                f"got phase={self.phase!r} terminal={self.terminal!r}"
            )

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe form, e.g. for a TriggerEvent payload; :meth:`from_dict` reverses it."""
        return {
            "phase": self.phase,
            "terminal": self.terminal,
            "reason": self.reason,
            "message": self.message,
            "exit_code": self.exit_code,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ObjectState:
        """Rebuild a state from :meth:`as_dict` output.

        :raises ValueError: naming the bad field when ``data`` is not such output.
        """
        phase = data.get("phase")
        if phase not in _PHASES:
            raise ValueError(
                f"ObjectState.from_dict: 'phase' must be one of {sorted(_PHASES)}, got {phase!r}"
            )
        exit_code = data.get("exit_code")
        return cls(
            phase=cast(Phase, phase),
            terminal=phase in TERMINAL_PHASES,
            reason=_str(data.get("reason")),
            message=str(data.get("message") or ""),
            exit_code=_int(exit_code),
        )


_PHASES: frozenset[str] = frozenset(get_args(Phase))


# --------------------------------------------------------------------------------------------------
# Tolerant field access: anything of the wrong type counts as missing.


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _maps(value: object) -> list[Mapping[str, Any]]:
    if not isinstance(value, list | tuple):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    # bool is an int subclass; an exit code of True is garbage, not 1.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _quote(text: str | None) -> str | None:
    """Trim a server- or container-written message to something fit for one log line."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    if len(text) > MAX_QUOTED_CHARS:
        text = "..." + text[-MAX_QUOTED_CHARS:]
    return text


def _display_name(obj: Mapping[str, Any]) -> str:
    meta = _map(obj.get("metadata"))
    name = _str(meta.get("name")) or _str(meta.get("generateName")) or "<unnamed>"
    namespace = _str(meta.get("namespace"))
    return f"{namespace}/{name}" if namespace else name


def _true_condition(status: Mapping[str, Any], types: Iterable[str]) -> Mapping[str, Any] | None:
    """The first condition, in the order of ``types``, whose status is the string ``"True"``."""
    conditions = _maps(status.get("conditions"))
    for wanted in types:
        for condition in conditions:
            if condition.get("type") == wanted and condition.get("status") == "True":
                return condition
    return None


def _sentence(text: str) -> str:
    """End ``text`` with exactly one full stop (quoted server messages often bring their own)."""
    return text.rstrip(" .") + "."


def _check_reasons(fatal_waiting_reasons: Collection[str]) -> None:
    # A str is a Collection[str] too, and "Err" in "ErrImagePull" would then match by substring.
    if isinstance(fatal_waiting_reasons, str):
        raise TypeError(
            f"fatal_waiting_reasons must be a collection of reason names, e.g. {{'ErrImagePull'}}, "
            f"not the string {fatal_waiting_reasons!r} (split a comma-separated setting first)"
        )


def _with_hint(message: str, reason: str | None) -> str:
    hint = _HINTS.get(reason or "")
    return _sentence(message) + (f" Hint: {hint}." if hint else "")


# --------------------------------------------------------------------------------------------------
# Containers


@dataclass(frozen=True, slots=True)
class _ContainerProblem:
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
    spec = _map(pod.get("spec"))
    status = _map(pod.get("status"))
    sidecars = {
        _str(c.get("name")) for c in _maps(spec.get("initContainers")) if c.get("restartPolicy") == "Always"
    }
    init: list[Mapping[str, Any]] = []
    sidecar: list[Mapping[str, Any]] = []
    for cs in _maps(status.get("initContainerStatuses")):
        (sidecar if _str(cs.get("name")) in sidecars else init).append(cs)
    ordered: list[tuple[str, Mapping[str, Any]]] = [("init container", cs) for cs in init]
    ordered += [("container", cs) for cs in _maps(status.get("containerStatuses"))]
    ordered += [("sidecar container", cs) for cs in sidecar]
    return ordered


def _terminated_problem(kind: str, cs: Mapping[str, Any], state_key: str) -> _ContainerProblem | None:
    terminated = _map(_map(cs.get(state_key)).get("terminated"))
    if not terminated:
        return None
    exit_code = _int(terminated.get("exitCode"))
    reason = _str(terminated.get("reason"))
    if exit_code == 0 and reason in (None, "Completed"):
        return None
    if exit_code is None and reason in (None, "Completed"):
        return None
    return _ContainerProblem(
        kind=kind,
        name=_str(cs.get("name")) or "<unnamed>",
        reason=reason,
        exit_code=exit_code,
        detail=_quote(_str(terminated.get("message"))),
        waiting=False,
    )


def _first_failed_container(pod: Mapping[str, Any]) -> _ContainerProblem | None:
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


def _fatal_waiting_container(
    pod: Mapping[str, Any], fatal_waiting_reasons: Collection[str]
) -> _ContainerProblem | None:
    # Only a Pending pod fails fast, as upstream's KubernetesExecutor decides (its watcher checks the
    # waiting reasons of Pending pods only). In a Running pod the task has started: a restartable
    # init container ("sidecar") that is restarting into ImagePullBackOff does not stop it.
    if _str(_map(pod.get("status")).get("phase")) != "Pending":
        return None
    for kind, cs in _container_statuses(pod):
        waiting = _map(_map(cs.get("state")).get("waiting"))
        reason = _str(waiting.get("reason"))
        if reason is None or reason not in fatal_waiting_reasons:
            continue
        message = _str(waiting.get("message")) or ""
        if any(marker in message.lower() for marker in TRANSIENT_WAITING_MESSAGES):
            continue
        return _ContainerProblem(
            kind=kind,
            name=_str(cs.get("name")) or "<unnamed>",
            reason=reason,
            exit_code=None,
            detail=_quote(message),
            waiting=True,
        )
    return None


def _waiting_note(pod: Mapping[str, Any], *, scheduling: bool = True) -> tuple[str | None, str | None]:
    """Why a live pod is not running yet: the first waiting reason, else an Unschedulable condition."""
    for kind, cs in _container_statuses(pod):
        waiting = _map(_map(cs.get("state")).get("waiting"))
        reason = _str(waiting.get("reason"))
        if reason:
            detail = _quote(_str(waiting.get("message")))
            note = f"{kind} '{_str(cs.get('name')) or '<unnamed>'}' is waiting: {reason}"
            return reason, f"{note}: {detail}" if detail else note
    if not scheduling:
        return None, None
    status = _map(pod.get("status"))
    for condition in _maps(status.get("conditions")):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = _str(condition.get("reason")) or "Unschedulable"
            detail = _quote(_str(condition.get("message")))
            return reason, f"not scheduled: {reason}: {detail}" if detail else f"not scheduled: {reason}"
    return None, None


# --------------------------------------------------------------------------------------------------
# Pods


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
    _check_reasons(fatal_waiting_reasons)
    obj = to_dict(pod)
    state = _classify_live_pod(obj, fatal_waiting_reasons)
    if deleted and not state.terminal:
        return _deleted_state("Pod", obj, _first_failed_container(obj), was=state.phase)
    return state


def _classify_live_pod(pod: Mapping[str, Any], fatal_waiting_reasons: Collection[str]) -> ObjectState:
    name = _display_name(pod)
    status = _map(pod.get("status"))
    phase = _str(status.get("phase"))

    if phase == "Succeeded":
        # "All containers in the Pod have terminated in success": exit code 0 by definition.
        return ObjectState("succeeded", True, "Completed", f"Pod '{name}' succeeded.", exit_code=0)

    if phase == "Failed":
        problem = _first_failed_container(pod)
        pod_reason = _str(status.get("reason"))  # Evicted, DeadlineExceeded, NodeLost, Shutdown, ...
        pod_message = _quote(_str(status.get("message")))
        if pod_reason is None:
            # Since 1.26 a pod killed by a disruption (preemption, taint eviction, the eviction API,
            # kubelet shutdown) carries a DisruptionTarget condition saying so; its container only
            # shows the resulting 137.
            disruption = _true_condition(status, ("DisruptionTarget",))
            if disruption is not None:
                pod_reason = _str(disruption.get("reason")) or "DisruptionTarget"
                pod_message = pod_message or _quote(_str(disruption.get("message")))
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
            _with_hint(text, reason),
            exit_code=problem.exit_code if problem else None,
        )

    fatal = _fatal_waiting_container(pod, fatal_waiting_reasons)
    if fatal is not None:
        return ObjectState(
            "failed",
            True,
            fatal.reason,
            _with_hint(f"Pod '{name}' cannot run: {fatal.describe()}", fatal.reason),
        )

    deleting = " (deletion in progress)" if _map(pod.get("metadata")).get("deletionTimestamp") else ""
    if phase == "Running":
        # A Running pod can still have a container waiting (CrashLoopBackOff under
        # restartPolicy OnFailure): say so, with the exit code of its last crash.
        waiting_reason, note = _waiting_note(pod, scheduling=False)
        text = f"Pod '{name}' is running{deleting}"
        if note:
            last = _first_failed_container(pod)
            text += f", but {note}" + (f"; last time {last.describe()}" if last else "")
        return ObjectState("running", False, waiting_reason, _sentence(text))
    if phase == "Unknown":
        # Deprecated phase: the node stopped reporting. The pod may well still be running there, and
        # the node lifecycle controller will move it on, so this is not an outcome.
        reason = _str(status.get("reason")) or "Unknown"
        return ObjectState(
            "running",
            False,
            reason,
            f"Pod '{name}' is in phase Unknown: its node stopped reporting{deleting}.",
        )
    waiting_reason, note = _waiting_note(pod)
    text = f"Pod '{name}' is pending{deleting}"
    return ObjectState("pending", False, waiting_reason, _sentence(f"{text}: {note}" if note else text))


#: ``status.reason`` values with which the kubelet or the node lifecycle says the cluster, not the pod's
#: own work, ended a pod (node-pressure eviction, critical-pod preemption, node shutdown, node loss).
DISRUPTION_POD_REASONS: frozenset[str] = frozenset({"Evicted", "Preempting", "NodeShutdown", "NodeLost"})


def pod_disruption(pod: Mapping[str, Any] | Any) -> tuple[str, str | None, str | None] | None:
    """Whether the cluster disrupted this pod: ``(reason, message, node name)``, else None.

    A disruption ``status.reason`` (:data:`DISRUPTION_POD_REASONS`) first, else a True ``DisruptionTarget``
    condition (Kubernetes 1.26+: ``PreemptionByScheduler``, ``EvictionByEvictionAPI``,
    ``DeletionByTaintManager``, ``DeletionByPodGC``, ``TerminationByKubelet``), which is set before the
    pod is deleted, so it is also on the last state of a pod that vanished. Says nothing of the pod's phase.
    """
    obj = to_dict(pod)
    status = _map(obj.get("status"))
    node = _str(_map(obj.get("spec")).get("nodeName"))
    reason = _str(status.get("reason"))
    if reason in DISRUPTION_POD_REASONS:
        return reason, _str(status.get("message")), node
    condition = _true_condition(status, ("DisruptionTarget",))
    if condition is not None:
        return _str(condition.get("reason")) or "DisruptionTarget", _str(condition.get("message")), node
    return None


def _deleted_state(
    kind: str, obj: Mapping[str, Any], problem: _ContainerProblem | None, *, was: str
) -> ObjectState:
    text = f"{kind} '{_display_name(obj)}' was deleted while {was}, before it finished"
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
        _sentence(text) + f" Likely causes: {why}; nothing will finish this work, so retry it.",
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
        "name": _str(_map(obj.get("metadata")).get("name")),
        "phase": state.phase,
        "exit_code": state.exit_code,
        "reason": state.reason,
    }


# --------------------------------------------------------------------------------------------------
# Jobs


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
    _check_reasons(fatal_waiting_reasons)
    obj = to_dict(job)
    pod_dicts = _own_pods(obj, pods)
    name = _display_name(obj)
    spec = _map(obj.get("spec"))
    status = _map(obj.get("status"))

    failed = _true_condition(status, _JOB_FAILED_CONDITIONS)
    if failed is not None:
        reason = _str(failed.get("reason")) or "Failed"
        text = f"Job '{name}' failed ({reason})"
        condition_message = _quote(_str(failed.get("message")))
        if condition_message:
            text += f": {condition_message}"
        culprit_name, problem = _job_culprit(pod_dicts, fatal_waiting_reasons)
        if problem is not None:
            text += f"; pod '{culprit_name}': {problem.describe()}"
        return ObjectState(
            "failed", True, reason, _with_hint(text, reason), exit_code=problem.exit_code if problem else None
        )

    succeeded = _true_condition(status, _JOB_SUCCEEDED_CONDITIONS)
    if succeeded is not None:
        reason = _str(succeeded.get("reason")) or "Complete"
        text = f"Job '{name}' succeeded ({reason})"
        condition_message = _quote(_str(succeeded.get("message")))
        return ObjectState(
            "succeeded",
            True,
            reason,
            _sentence(f"{text}: {condition_message}" if condition_message else text),
        )

    suspended = _true_condition(status, ("Suspended",))
    if suspended is not None or spec.get("suspend") is True:
        if deleted:
            return _deleted_state("Job", obj, None, was="suspended")
        reason = (_str(suspended.get("reason")) if suspended else None) or "Suspended"
        return ObjectState(
            "suspended",
            False,
            reason,
            f"Job '{name}' is suspended: it runs no pods until spec.suspend is set to false.",
        )

    for pod in pod_dicts:
        problem = _fatal_waiting_container(pod, fatal_waiting_reasons)
        if problem is not None and _str(_map(pod.get("status")).get("phase")) not in ("Succeeded", "Failed"):
            text = f"Job '{name}' cannot run: pod '{_display_name(pod)}': {problem.describe()}"
            return ObjectState("failed", True, problem.reason, _with_hint(text, problem.reason))

    return _live_job_state(obj, pod_dicts, deleted=deleted, fatal_waiting_reasons=fatal_waiting_reasons)


def _live_job_state(
    job: Mapping[str, Any],
    pods: list[Mapping[str, Any]],
    *,
    deleted: bool,
    fatal_waiting_reasons: Collection[str],
) -> ObjectState:
    name = _display_name(job)
    status = _map(job.get("status"))
    active = _int(status.get("active")) or 0
    counts = ", ".join(
        f"{key} {_int(status.get(key)) or 0}" for key in ("active", "ready", "succeeded", "failed")
    )
    live = [
        (pod, state) for pod in pods if not (state := _classify_live_pod(pod, fatal_waiting_reasons)).terminal
    ]
    started = active > 0 or _str(status.get("startTime")) is not None or bool(live)
    if any(state.phase == "running" for _, state in live):
        phase: Phase = "running"
    elif live:
        # Every pod the Job has right now is still pending (unschedulable, pulling, ...).
        phase = "pending"
    else:
        phase = "running" if started else "pending"

    if deleted:
        return _deleted_state("Job", job, None, was=phase)

    deleting = " (deletion in progress)" if _map(job.get("metadata")).get("deletionTimestamp") else ""
    if phase == "pending":
        pending_pods = [(pod, state) for pod, state in live if state.phase == "pending"]
        if pending_pods:
            pod, state = pending_pods[0]
            return ObjectState(
                "pending",
                False,
                state.reason,
                _sentence(f"Job '{name}' is pending{deleting} ({counts}); {state.message}"),
            )
        return ObjectState("pending", False, None, f"Job '{name}' has not started a pod yet{deleting}.")
    return ObjectState("running", False, None, f"Job '{name}' is running{deleting} ({counts}).")


def _own_pods(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any] | Any] | None
) -> list[Mapping[str, Any]]:
    """The given pods as dicts, minus those whose controller is not this Job.

    Guards against pods of an older Job of the same name (pod discovery by the ``job-name`` label
    alone finds those too) lending their exit code to this one.
    """
    if pods is None:
        return []
    job_uid = _str(_map(job.get("metadata")).get("uid"))
    result: list[Mapping[str, Any]] = []
    for pod in pods:
        obj = to_dict(pod)
        if job_uid is not None:
            owners = _maps(_map(obj.get("metadata")).get("ownerReferences"))
            controller = next((ref for ref in owners if ref.get("controller") is True), None)
            if controller is not None and _str(controller.get("uid")) not in (None, job_uid):
                continue
        result.append(obj)
    return result


def _job_culprit(
    pods: list[Mapping[str, Any]], fatal_waiting_reasons: Collection[str]
) -> tuple[str, _ContainerProblem | None]:
    """The pod that best explains a Job failure: the most recently created failed one, else a stuck one."""
    failed: list[tuple[datetime.datetime, str, _ContainerProblem]] = []
    for pod in pods:
        problem = _first_failed_container(pod)
        if problem is not None:
            failed.append((_created(pod), _display_name(pod), problem))
    if failed:
        _, pod_name, problem = max(failed, key=lambda item: item[0])
        return pod_name, problem
    for pod in pods:
        stuck = _fatal_waiting_container(pod, fatal_waiting_reasons)
        if stuck is not None:
            return _display_name(pod), stuck
    return "", None


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _created(pod: Mapping[str, Any]) -> datetime.datetime:
    raw = _str(_map(pod.get("metadata")).get("creationTimestamp"))
    if raw is None:
        return _EPOCH
    try:
        value = datetime.datetime.fromisoformat(raw)
    except ValueError:
        return _EPOCH
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)

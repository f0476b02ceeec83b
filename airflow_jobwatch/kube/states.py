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
* A Job that *vanished* (gone at a relist, its deletion never seen) is not a deleted one: what
  happened between the last state we saw and its removal is unknown. :func:`vanished_job_state`
  reports the last state when that was already terminal, what its pods' final states prove for a
  simple Job, and otherwise reason ``FinalStateUnknown``, not terminal, and no advice to run it again.
* A pod can be *disrupted*: stopped by the cluster rather than by its own code (scheduler preemption,
  eviction, node shutdown, node loss, garbage collection). :func:`pod_disruption` recognises it from
  the ``DisruptionTarget`` condition (Kubernetes 1.26+) or, failing that, ``status.reason``, and says
  in the user's words what happened and whether any container ever started (a pod disrupted before
  it started cannot have run the task). The shapes it reads are recorded with their Kubernetes
  source files in ``tests/fixtures/real-apiserver/README.md``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from airflow_jobwatch.kube.objects import to_dict

__all__ = [
    "DEFAULT_FATAL_WAITING_REASONS",
    "DISRUPTION_REASONS",
    "TERMINAL_PHASES",
    "TRANSIENT_WAITING_MESSAGES",
    "Disruption",
    "ObjectState",
    "Phase",
    "classify_job",
    "classify_pod",
    "pod_disruption",
    "pod_summary",
    "vanished_job_state",
]

#: The reason of a Job that vanished while nobody watched, whose end was not seen and cannot be derived
#: (client-go's name for the same tombstone is ``DeletedFinalStateUnknown``).
FINAL_STATE_UNKNOWN = "FinalStateUnknown"

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
    "EvictionByEvictionAPI": "a node drain or the cluster autoscaler evicted it; a PodDisruptionBudget can hold "
    "such evictions back",
    "DeletionByTaintManager": "its node got a NoExecute taint (often: the node became unreachable); retry",
    "DeletionByPodGC": "its node was removed from the cluster (scale-down or a lost spot instance); retry",
    "TerminationByKubelet": "the node's kubelet stopped it; retry",
    "Preempting": "the kubelet made room for a critical pod; retry",
    "NodeShutdown": "its node shut down (a spot or preemptible instance being reclaimed, or maintenance); retry",
    "NodeLost": "its node stopped reporting; retry",
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
# Disruptions

#: ``DisruptionTarget`` condition reasons and what each means (k8s.io/api core/v1 types.go; who
#: writes them is recorded in tests/fixtures/real-apiserver/README.md).
DISRUPTION_REASONS: Mapping[str, str] = {
    "PreemptionByScheduler": "preempted by the scheduler",
    "EvictionByEvictionAPI": "evicted through the Eviction API (a node drain, the cluster autoscaler or a user)",
    "DeletionByTaintManager": "deleted by the taint manager: its node has a NoExecute taint it does not tolerate",
    "DeletionByPodGC": "deleted by the pod garbage collector: its node no longer exists",
    "TerminationByKubelet": "stopped by the kubelet",
}

#: ``status.reason`` values that mean a disruption even without the condition (clusters older than
#: 1.26, or a kubelet that did not add it). ``Terminated`` counts only with the node-shutdown message,
#: ``Shutdown`` is what kubelets 1.20-1.21 wrote for the same thing.
_DISRUPTION_STATUS_REASONS = frozenset({"Evicted", "Preempting", "NodeShutdown", "NodeLost", "Shutdown"})
_NODE_SHUTDOWN_MESSAGE = "in response to imminent node shutdown"
_LOW_ON_RESOURCE = re.compile(r"low on resource: ([A-Za-z0-9._/-]+)")


@dataclass(frozen=True, slots=True)
class Disruption:
    """A pod stopped by the cluster rather than by its own code.

    :param reason: one word: the ``DisruptionTarget`` reason (``PreemptionByScheduler``,
        ``EvictionByEvictionAPI``, ``DeletionByTaintManager``, ``DeletionByPodGC``), or for the
        kubelet's own stops the more precise ``status.reason`` (``Evicted``, ``Preempting``,
        ``NodeShutdown``; plain ``TerminationByKubelet`` when it gives none); without the condition
        ``status.reason`` (``Evicted``, ``Preempting``, ``NodeShutdown``, ``NodeLost``); ``Deleted``
        for a pod that vanished before finishing with no disruption recorded on it.
    :param message: what happened, in the user's words ("preempted by the scheduler on node n1").
    :param started: whether any of its containers ever started, judged from this object alone (a
        caller that saw the pod running earlier knows better).
    :param node: the node it was on, when known.
    :param detail: the server's own message (condition or status message), trimmed, or ``None``.
    """

    reason: str
    message: str
    started: bool
    node: str | None = None
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe form (for TriggerEvent payloads and logs); :meth:`from_dict` reverses it."""
        return {
            "reason": self.reason,
            "message": self.message,
            "started": self.started,
            "node": self.node,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Disruption:
        """Rebuild from :meth:`as_dict` output.

        :raises ValueError: naming the field when ``reason`` is missing.
        """
        reason = _str(data.get("reason"))
        if reason is None:
            raise ValueError(
                f"Disruption.from_dict: 'reason' must be a non-empty string, got {data.get('reason')!r}"
            )
        return cls(
            reason=reason,
            message=str(data.get("message") or reason),
            started=data.get("started") is True,
            node=_str(data.get("node")),
            detail=_str(data.get("detail")),
        )


def containers_started(pod: Mapping[str, Any]) -> bool:
    """Whether any container (init containers included) of the pod ever started, from its status alone.

    The one predicate for it: the executor's watcher and the disruption rules below both call it. What
    the pod's status cannot show (it was seen running earlier, then its last updates were lost) is the
    caller's to add: the executor never treats a pod it saw running as never started.

    A container that never started shows ``waiting`` (ContainerCreating, PodInitializing, an image
    pull), or, once the pod is terminal, ``terminated`` with reason ``ContainerStatusUnknown`` and no
    ``startedAt`` (the kubelet's placeholder). Anything else (``running``, a ``terminated`` with a
    start time, a ``lastState``, a restart, phase Running/Succeeded) means it ran.
    """
    status = _map(pod.get("status"))
    if _str(status.get("phase")) in ("Running", "Succeeded"):
        return True
    for _kind, cs in _container_statuses(pod):
        if cs.get("started") is True or (_int(cs.get("restartCount")) or 0) > 0:
            return True
        state = _map(cs.get("state"))
        if state.get("running") is not None:
            return True
        terminated = _map(state.get("terminated"))
        if terminated and (
            _str(terminated.get("startedAt")) or _str(terminated.get("reason")) != "ContainerStatusUnknown"
        ):
            return True
        if _map(_map(cs.get("lastState")).get("terminated")):
            return True
    return False


_containers_started = containers_started


def _on_node(node: str | None) -> str:
    return f" on node {node}" if node else ""


def _kubelet_words(status_reason: str | None, detail: str | None, node: str | None) -> tuple[str, str]:
    """(reason, words) for a pod the kubelet stopped, refined by ``status.reason``."""
    text = detail or ""
    if status_reason == "Evicted":
        found = _LOW_ON_RESOURCE.search(text)
        if found:
            return "Evicted", f"evicted{_on_node(node)}: the node was low on {found.group(1).rstrip('.')}"
        return "Evicted", f"evicted by the kubelet{_on_node(node)}"
    if status_reason == "Preempting":
        return "Preempting", f"preempted by the kubelet{_on_node(node)} to admit a critical pod"
    if status_reason in ("NodeShutdown", "Shutdown") or _NODE_SHUTDOWN_MESSAGE in text:
        return "NodeShutdown", f"stopped because node {node or '(unknown)'} shut down"
    return "TerminationByKubelet", f"stopped by the kubelet{_on_node(node)}"


def pod_disruption(pod: Mapping[str, Any] | Any, *, deleted: bool = False) -> Disruption | None:
    """Whether the cluster disrupted this pod, and how, in the user's words; ``None`` if it did not.

    Read, in order: a ``DisruptionTarget`` condition with status ``"True"`` (set before the pod is
    stopped, so it can show up while the pod is still Running or Pending, with a
    ``deletionTimestamp``); ``status.reason`` ``Evicted`` / ``Preempting`` / ``NodeShutdown`` /
    ``NodeLost`` (and ``Terminated`` with the node-shutdown message); and, with ``deleted=True``, a pod
    that vanished before reaching a terminal phase (reason ``Deleted``: someone else deleted it, or
    its node went away). A pod that finished on its own (Succeeded, or Failed with no disruption
    sign) is not disrupted.

    :param pod: the Pod as API JSON or a ``kubernetes`` / ``kubernetes_asyncio`` ``V1Pod``.
    :param deleted: this is the last state we will see of the pod (DELETED event or tombstone).
    :raises TypeError: when ``pod`` is neither a mapping nor a client model.
    """
    obj = to_dict(pod)
    status = _map(obj.get("status"))
    phase = _str(status.get("phase"))
    node = _str(_map(obj.get("spec")).get("nodeName"))
    started = containers_started(obj)
    status_reason = _str(status.get("reason"))
    status_message = _quote(_str(status.get("message")))
    condition = _true_condition(status, ("DisruptionTarget",))
    if phase == "Succeeded":
        return None  # it finished its work; whatever happened next does not matter
    if condition is not None:
        cond_reason = _str(condition.get("reason")) or "DisruptionTarget"
        detail = _quote(_str(condition.get("message"))) or status_message
        if cond_reason == "TerminationByKubelet":
            reason, words = _kubelet_words(status_reason, status_message or detail, node)
        elif cond_reason == "PreemptionByScheduler":
            reason, words = (
                cond_reason,
                f"preempted by the scheduler{_on_node(node)} to make room for a higher-priority pod",
            )
        elif cond_reason in DISRUPTION_REASONS:
            reason, words = cond_reason, DISRUPTION_REASONS[cond_reason] + _on_node(node)
        else:
            reason, words = cond_reason, f"disrupted ({cond_reason}){_on_node(node)}"
        return Disruption(reason, words, started, node, detail)
    if status_reason in _DISRUPTION_STATUS_REASONS or (
        status_reason == "Terminated" and _NODE_SHUTDOWN_MESSAGE in (status_message or "")
    ):
        if status_reason == "NodeLost":
            words = f"lost: node {node or '(unknown)'} stopped reporting"
            return Disruption("NodeLost", words, started, node, status_message)
        reason, words = _kubelet_words(status_reason, status_message, node)
        return Disruption(reason, words, started, node, status_message)
    if deleted and phase != "Failed":
        words = "deleted before it finished, by someone else or with its node" + (
            f" (it was on node {node})" if node else ""
        )
        return Disruption("Deleted", words, started, node, None)
    return None


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
        disruption = pod_disruption(obj, deleted=True)
        if disruption is not None and disruption.reason != "Deleted":
            # Deleted by whoever disrupted it (the Eviction API, the taint manager, the pod GC):
            # name the disruption rather than a bare deletion.
            problem = _first_failed_container(obj)
            text = f"Pod '{_display_name(obj)}' was deleted while {state.phase}: {disruption.message}"
            if disruption.detail:
                text += f" ({disruption.detail.rstrip(' .')})"
            if problem is not None:
                text += f"; {problem.describe()}"
            return ObjectState(
                "failed",
                True,
                disruption.reason,
                _with_hint(text, disruption.reason),
                exit_code=problem.exit_code if problem else None,
            )
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
    name = _display_name(obj)
    spec = _map(obj.get("spec"))
    simple = (
        (_int(spec.get("completions")) or 1) == 1
        and _str(spec.get("completionMode")) in (None, "NonIndexed")
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
                f"Job '{name}' succeeded: its pod '{_display_name(won)}' succeeded (the Job itself "
                "vanished while the watch was reconnecting, and its pod's final state says how it ended).",
                exit_code=0,
            )
        backoff = _int(spec.get("backoffLimit"))
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
                _sentence(text),
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

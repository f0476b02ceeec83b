"""Disruptions: a pod stopped by the cluster rather than by its own code (scheduler preemption,
eviction, node shutdown, node loss, garbage collection), said in the user's words.

Part of the state classification (:mod:`airflow_jobwatch.kube.meaning.states` is its facade and states its
rules). The shapes read here are recorded with their Kubernetes source files in
``tests/fixtures/real-apiserver/README.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_jobwatch.kube.meaning.containers import containers_started
from airflow_jobwatch.kube.meaning.objects import to_dict
from airflow_jobwatch.kube.meaning.state_words import as_map, as_str, quote_message, true_condition

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
        reason = as_str(data.get("reason"))
        if reason is None:
            raise ValueError(
                f"Disruption.from_dict: 'reason' must be a non-empty string, got {data.get('reason')!r}"
            )
        return cls(
            reason=reason,
            message=str(data.get("message") or reason),
            started=data.get("started") is True,
            node=as_str(data.get("node")),
            detail=as_str(data.get("detail")),
        )


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
    status = as_map(obj.get("status"))
    phase = as_str(status.get("phase"))
    node = as_str(as_map(obj.get("spec")).get("nodeName"))
    started = containers_started(obj)
    status_reason = as_str(status.get("reason"))
    status_message = quote_message(as_str(status.get("message")))
    condition = true_condition(status, ("DisruptionTarget",))
    if phase == "Succeeded":
        return None  # it finished its work; whatever happened next does not matter
    if condition is not None:
        cond_reason = as_str(condition.get("reason")) or "DisruptionTarget"
        detail = quote_message(as_str(condition.get("message"))) or status_message
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

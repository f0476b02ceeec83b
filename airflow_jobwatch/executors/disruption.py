"""What a worker pod's disruption is called in the task's own words.

``kube/states.pod_disruption`` recognises a disruption (reason, node, the server's message); this module only words it
for the task's failure message and its log: "preempted by the scheduler on node n1", "evicted on node n1:
the node was low on memory". No Airflow, no Kubernetes client: the watcher child imports it.
"""

from __future__ import annotations

import re
from typing import Any

# What did it, per reason (the DisruptionTarget condition's reasons, then status.reason values).
_PHRASES = {
    "PreemptionByScheduler": "preempted by the scheduler",
    "Preempting": "preempted by the kubelet to admit a critical pod",
    "EvictionByEvictionAPI": "evicted through the Eviction API (a node drain, or an autoscaler scaling down)",
    "DeletionByTaintManager": "deleted by the taint manager (its node got a NoExecute taint)",
    "DeletionByPodGC": "deleted by the pod garbage collector (its node is gone)",
    "TerminationByKubelet": "terminated by the kubelet (node pressure or node shutdown)",
    "Evicted": "evicted",
    "NodeShutdown": "stopped by the shutdown of its node",
    "NodeLost": "lost with its node",
}
# The kubelet's node-pressure eviction message: "The node was low on resource: memory. Threshold ..."
_LOW_ON = re.compile(r"the node was low on resource: ([\w.\-/]+)", re.IGNORECASE)
# Longest part of the server's message quoted after the phrase.
MAX_DETAIL_CHARS = 300


def describe_disruption(reason: str, message: str | None, node: str | None) -> str:
    """One phrase for the task log: what disrupted the pod, where, and the server's why when it adds one.

    :param reason: the disruption's reason (``PreemptionByScheduler``, ``Evicted``, ...).
    :param message: the condition's or the pod's message, if any.
    :param node: the node the pod ran on, if known.
    """
    text = _PHRASES.get(reason, f"disrupted ({reason})")
    if node:
        text += f" on node {node}"
    detail = (message or "").strip()
    low_on = _LOW_ON.search(detail)
    if low_on:
        detail = f"the node was low on {low_on.group(1).rstrip('.')}"
    elif len(detail) > MAX_DETAIL_CHARS:
        detail = detail[: MAX_DETAIL_CHARS - 3] + "..."
    return f"{text}: {detail}" if detail else text


def disruption_parts(pod: Any) -> tuple[str, str | None, str | None] | None:
    """``(reason, the server's message, node)`` of a pod the cluster disrupted, else ``None``.

    The recognition is ``kube/states.pod_disruption``'s (the one place that decides); a pod that merely
    vanished (``Deleted``, no disruption recorded on it) is not a disruption here.
    """
    from airflow_jobwatch.kube.meaning.states import pod_disruption

    found = pod_disruption(pod)
    if found is None or found.reason == "Deleted":
        return None
    return found.reason, found.detail, found.node


__all__ = ["describe_disruption", "disruption_parts"]

"""Capacity and disruptions, on demand: scheduler preemption, the Eviction API, taint-manager deletion,
node shutdown, and a namespace ResourceQuota on pod count.

Each one writes what the real component writes, in the same order, because clients tell disruptions
apart by exactly these shapes (recorded with their source files in
``tests/fixtures/real-apiserver/README.md``):

* the ``DisruptionTarget`` condition (status ``"True"``, a reason and a message) is added to the pod's
  status *first*, then the pod is deleted (gracefully: the kubelet stops its containers and reports the
  final phase; a pod not bound to a node goes at once);
* the kubelet's own stops (eviction under pressure, node shutdown, admission of a critical pod) are in
  :mod:`.kubelet` (``Kubelet.stop_pod``);
* a create over a pod-count quota is refused by the ``ResourceQuota`` admission plugin with 403
  Forbidden and the message ``pods "NAME" is forbidden: exceeded quota: QUOTA, requested: pods=1,
  used: pods=N, limited: pods=N``.
"""

from __future__ import annotations

from typing import Any

from . import events
from .errors import ApiError, not_found
from .store import clone, now_rfc3339

# pkg/scheduler/framework/preemption/preemption.go (prepareCandidate): the victim's condition message.
PREEMPTION_MESSAGE = "{scheduler}: preempting to accommodate a higher priority pod"
# pkg/registry/core/pod/storage/eviction.go (addConditionAndDeletePod).
EVICTION_API_MESSAGE = "Eviction API: evicting"
# pkg/controller/tainteviction/taint_eviction.go (addConditionAndDeletePod).
TAINT_MANAGER_MESSAGE = "Taint manager: deleting due to NoExecute taint"
# plugin/pkg/admission/resourcequota/controller.go (checkRequest), wrapped by admission.NewForbidden.
QUOTA_MESSAGE = 'pods "{name}" is forbidden: exceeded quota: {quota}, requested: pods=1, used: pods={used}, limited: pods={hard}'


def add_disruption_condition(sb: Any, namespace: str, name: str, reason: str, message: str) -> dict[str, Any]:
    """Add (or replace) the pod's ``DisruptionTarget`` condition in one status write; return the pod.

    A pod already Succeeded or Failed is left as it is, as the real writers skip terminal pods.
    """
    entry = sb.store.get("pods", namespace, name)
    if entry is None:
        raise not_found("pods", name)
    old = entry.obj
    status = old.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return dict(old)
    new = clone(old)
    conditions = [
        c for c in new.setdefault("status", {}).get("conditions") or [] if c.get("type") != "DisruptionTarget"
    ]
    conditions.append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(),
            "reason": reason,
            "message": message,
        }
    )
    new["status"]["conditions"] = conditions
    sb.store.commit("pods", "MODIFIED", new, old)
    return dict(new)


def _delete(sb: Any, pod: dict[str, Any], grace: int | None) -> None:
    meta = pod["metadata"]
    sb.api.delete(
        "pods", meta.get("namespace", ""), meta["name"], grace=grace, preconditions={"uid": meta["uid"]}
    )


def preempt(sb: Any, namespace: str, name: str, *, grace_seconds: int | None = None) -> None:
    """The scheduler preempts the pod for a higher-priority one: condition, event, graceful delete."""
    entry = sb.store.get("pods", namespace, name)
    if entry is None:
        raise not_found("pods", name)
    scheduler = (entry.obj.get("spec") or {}).get("schedulerName") or "default-scheduler"
    pod = add_disruption_condition(
        sb, namespace, name, "PreemptionByScheduler", PREEMPTION_MESSAGE.format(scheduler=scheduler)
    )
    node = (pod.get("spec") or {}).get("nodeName") or ""
    events.record(
        sb,
        "pods",
        pod,
        "Preempted",
        f"Preempted by pod sandbox-high-priority on node {node}".rstrip(),
        component="default-scheduler",
    )
    _delete(sb, pod, grace_seconds)


def evict_through_api(sb: Any, namespace: str, name: str, body: Any = None) -> dict[str, Any]:
    """``POST pods/NAME/eviction``: condition ``EvictionByEvictionAPI``, then delete with the eviction's
    ``deleteOptions``; answers the recorded ``201`` Status. No PodDisruptionBudgets exist here, so an
    eviction is never refused with 429."""
    if body is not None:
        if not isinstance(body, dict):
            raise ApiError(400, "the object provided is unrecognized or invalid JSON: expected an Eviction")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name not in (None, name):
            raise ApiError(400, f"name in URL does not match name in Eviction object: {body_name} != {name}")
    options = (body or {}).get("deleteOptions") or {}
    grace = options.get("gracePeriodSeconds")
    entry = sb.store.get("pods", namespace, name)
    if entry is None:
        raise not_found("pods", name)
    pod = add_disruption_condition(sb, namespace, name, "EvictionByEvictionAPI", EVICTION_API_MESSAGE)
    _delete(sb, pod, int(grace) if grace is not None else None)
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def taint_evict(sb: Any, namespace: str, name: str) -> None:
    """The taint manager deletes a pod that does not tolerate its node's NoExecute taint."""
    pod = add_disruption_condition(sb, namespace, name, "DeletionByTaintManager", TAINT_MANAGER_MESSAGE)
    events.record(
        sb,
        "pods",
        pod,
        "TaintManagerEviction",
        f"Marking for deletion Pod {namespace}/{name}",
        component="taint-eviction-controller",
    )
    _delete(sb, pod, None)


class PodQuota:
    """``ResourceQuota`` objects with ``spec.hard.pods``, one per namespace, enforced at pod create.

    ``pods`` counts the namespace's pods that are not terminal (Succeeded/Failed), as the quota
    evaluator's ``QuotaV1Pod`` does (pkg/quota/v1/evaluator/core/pods.go).
    """

    def __init__(self, sb: Any) -> None:
        self.sb = sb
        self.hard: dict[str, tuple[str, int]] = {}  # namespace -> (quota name, hard pods)

    def set(self, namespace: str, pods: int | None, *, name: str = "pod-quota") -> None:
        if pods is None:
            self.hard.pop(namespace, None)
            return
        if not isinstance(pods, int) or isinstance(pods, bool) or pods < 0:
            raise ValueError(f"set_pod_quota: pods must be an int >= 0 or None, got {pods!r}")
        self.hard[namespace] = (name, pods)

    def used(self, namespace: str) -> int:
        return sum(
            1
            for entry in self.sb.store.iter("pods", namespace)
            if (entry.obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )

    def usage(self, namespace: str) -> dict[str, Any] | None:
        """The quota as ``kubectl get resourcequota -o json`` shows its spec and status, or None."""
        if namespace not in self.hard:
            return None
        name, hard = self.hard[namespace]
        return {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": {"pods": str(hard)}},
            "status": {"hard": {"pods": str(hard)}, "used": {"pods": str(self.used(namespace))}},
        }

    def admit(self, pod: dict[str, Any]) -> None:
        """Refuse a pod create that would go over the namespace's quota (403, the real body)."""
        meta = pod["metadata"]
        namespace = meta.get("namespace", "")
        if namespace not in self.hard:
            return
        quota, hard = self.hard[namespace]
        used = self.used(namespace)
        if used + 1 > hard:
            raise ApiError(
                403,
                QUOTA_MESSAGE.format(name=meta.get("name", ""), quota=quota, used=used, hard=hard),
                reason="Forbidden",
                details={"name": meta.get("name", ""), "kind": "pods"},
            )


__all__ = [
    "EVICTION_API_MESSAGE",
    "PREEMPTION_MESSAGE",
    "QUOTA_MESSAGE",
    "TAINT_MANAGER_MESSAGE",
    "PodQuota",
    "add_disruption_condition",
    "evict_through_api",
    "preempt",
    "taint_evict",
]

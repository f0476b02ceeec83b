"""What the informers keep of each Pod and Job: only the fields something reads.

A triggerer in a namespace with 20,000 foreign Jobs and 50,000 foreign pods, or an executor watcher with
thousands of worker pods, holds every one of them in its informer's store. A full pod is 4-8 KiB of JSON and
several times that as Python objects; what :mod:`airflow_jobwatch.kube.meaning.states`, the pod summary, the
trigger's pod index and the executor's watcher read of it is a few hundred bytes. The informer therefore
stores the projection below, declared next to ``states.py`` so that a new field read there is added here
in one edit (and ``tests/unit/test_projection.py`` fails until it is: it records every field
``classify_pod`` / ``classify_job`` / ``pod_summary`` try to read and requires the projection to keep it, and
property tests require the same classification for projected and full objects).

Who reads what:

* ``metadata``: name, generateName and namespace (messages), uid and resourceVersion (the informer's store
  and ordering), labels (``controller-uid`` / ``job-name`` for the trigger's pod index, ``airflow-worker`` for
  the executor), annotations (the executor maps a pod back to its task instance by Airflow's annotations),
  ownerReferences (a pod's controlling Job), deletionTimestamp (a graceful delete in progress),
  creationTimestamp (the most recent failed pod explains a Job's failure; pods are listed in creation order).
* Pod ``spec``: which init containers are sidecars (``restartPolicy: Always``), and ``nodeName`` (a
  disruption names the node: "preempted by the scheduler on node X").
* Pod ``status``: phase, reason, message, conditions (DisruptionTarget, PodScheduled), and the container
  statuses' state and lastState (exit codes, reasons, termination messages, waiting reasons), ``started``
  and ``restartCount`` (whether a disrupted pod ever ran).
* Job ``spec``: ``suspend`` (read), the scalar sizing and limit fields (kept for messages and users of
  the cache), and the pod failure and success policies (whether a vanished Job's pods prove its outcome); Job ``status``: whole. The pod template is dropped (see :data:`JOB_FIELDS`).
* Job annotations: all but the two that can be large and that nothing reads from the cache
  (:data:`DROPPED_JOB_ANNOTATIONS`).

A spec is ``True`` (keep the value whole), a dict of key -> spec (keep those keys of a mapping, each
projected by its own spec), a one-element list ``[spec]`` (a list whose items are each projected by
``spec``), or :class:`Without` (keep a mapping whole but for some keys). A value whose type does not fit its spec (a malformed object) is kept as it is, so that
``states.py`` sees exactly what it would have seen in the full object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from airflow_jobwatch.kube.meaning.result import RESULT_ANNOTATION

__all__ = [
    "DROPPED_JOB_ANNOTATIONS",
    "EVENT_FIELDS",
    "JOB_FIELDS",
    "POD_FIELDS",
    "Spec",
    "Without",
    "project",
    "project_event",
    "project_job",
    "project_pod",
    "projector",
]


@dataclass(frozen=True, slots=True)
class Without:
    """A spec that keeps a mapping whole but for ``keys`` (whose values can be large and are not read)."""

    keys: frozenset[str]


Spec: TypeAlias = bool | dict[str, "Spec"] | list["Spec"] | Without

_CONDITION: Spec = {"type": True, "status": True, "reason": True, "message": True}

METADATA_FIELDS: dict[str, Spec] = {
    "name": True,
    "generateName": True,
    "namespace": True,
    "uid": True,
    "resourceVersion": True,
    "labels": True,
    "annotations": True,
    "ownerReferences": True,
    "deletionTimestamp": True,
    "creationTimestamp": True,
}

# started / restartCount: whether a disrupted pod's containers ever ran (states.pod_disruption).
_CONTAINER_STATUS: Spec = {
    "name": True,
    "state": True,
    "lastState": True,
    "started": True,
    "restartCount": True,
}

POD_FIELDS: dict[str, Spec] = {
    "kind": True,
    "apiVersion": True,
    "metadata": METADATA_FIELDS,
    "spec": {"initContainers": [{"name": True, "restartPolicy": True}], "nodeName": True},
    "status": {
        "phase": True,
        "reason": True,
        "message": True,
        "conditions": [_CONDITION],
        "initContainerStatuses": [_CONTAINER_STATUS],
        "containerStatuses": [_CONTAINER_STATUS],
    },
}

#: Annotations a cached Job does not keep. Both can be as large as the API allows (256 KiB of annotations
#: per object), and nothing reads them from the cache, where 50,000 ended Jobs may sit:
#:
#: * the result a task ended from the triggerer writes onto its Job (up to 128 KiB). It is read only
#:   from a Job a trigger waits for, which the trigger registry stores whole, or from the whole Job a
#:   trigger GETs at the end when the cache held it projected;
#: * ``kubectl apply``'s copy of the whole manifest (pod template included, which the projection drops).
DROPPED_JOB_ANNOTATIONS = frozenset({RESULT_ANNOTATION, "kubectl.kubernetes.io/last-applied-configuration"})

#: A Job keeps its metadata, the scalar ``spec`` fields that size and bound it, and its whole ``status``
#: (conditions and counters: a few hundred bytes). Its pod template, the bulk of a Job, is not kept. The
#: trigger registry stores the Jobs its triggers wait for whole (``Informer.keep_whole``), since their event
#: carries the whole Job (``V1Job.to_dict()``, as upstream's ``job`` key does); a Job cached projected
#: before its trigger came is read whole by one GET at the end (``JobDecisions.with_whole_job``).
JOB_FIELDS: dict[str, Spec] = {
    "kind": True,
    "apiVersion": True,
    "metadata": {**METADATA_FIELDS, "annotations": Without(DROPPED_JOB_ANNOTATIONS)},
    "spec": {
        "suspend": True,
        "parallelism": True,
        "completions": True,
        "completionMode": True,
        "backoffLimit": True,
        "backoffLimitPerIndex": True,
        "maxFailedIndexes": True,
        "activeDeadlineSeconds": True,
        "ttlSecondsAfterFinished": True,
        "podReplacementPolicy": True,
        "managedBy": True,
        # whether what a Job's pods show proves its outcome (states.vanished_job_state): a policy can
        # fail a Job at a pod's first failure, or let a disrupted pod's failure not count
        "podFailurePolicy": True,
        "successPolicy": True,
    },
    "status": True,
}


#: An Event (core/v1) keeps whom it is about, why, what it says and when: what the trigger reads of a
#: Job's ``FailedCreate`` events (triggers/refusals.py). Its ``source``, ``reportingInstance`` and
#: ``related`` are not kept.
EVENT_FIELDS: dict[str, Spec] = {
    "kind": True,
    "apiVersion": True,
    "metadata": {"name": True, "namespace": True, "uid": True, "resourceVersion": True},
    "involvedObject": {"kind": True, "name": True, "namespace": True, "uid": True},
    "reason": True,
    "message": True,
    "type": True,
    "count": True,
    "firstTimestamp": True,
    "lastTimestamp": True,
    "eventTime": True,
}


def project(value: Any, spec: Spec) -> Any:
    """``value`` reduced to what ``spec`` keeps (a new object; ``value`` is not modified)."""
    if spec is True:
        return value
    if isinstance(spec, Without):
        if not isinstance(value, dict) or spec.keys.isdisjoint(value):
            return value
        return {key: item for key, item in value.items() if key not in spec.keys}
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return value
        return {key: project(value[key], sub) for key, sub in spec.items() if key in value}
    if isinstance(spec, list):
        if not isinstance(value, list):
            return value
        (item_spec,) = spec
        return [project(item, item_spec) for item in value]
    return value


def project_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a Pod (see :data:`POD_FIELDS`)."""
    result: dict[str, Any] = project(pod, POD_FIELDS)
    return result


def project_job(job: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a Job (see :data:`JOB_FIELDS`)."""
    result: dict[str, Any] = project(job, JOB_FIELDS)
    return result


def project_event(event: dict[str, Any]) -> dict[str, Any]:
    """The stored form of an Event (see :data:`EVENT_FIELDS`)."""
    result: dict[str, Any] = project(event, EVENT_FIELDS)
    return result


def projector(kind: Literal["pods", "jobs", "events"]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The projection function for an informer of ``kind``."""
    if kind == "events":
        return project_event
    return project_pod if kind == "pods" else project_job

"""The tombstones of a namespace watch: the last state of each Job that was deleted, and of its pods.

A Job whose ``ttlSecondsAfterFinished`` is 0 is gone a moment after it completed; its DELETED event still
says how it ended. :class:`Tombstones` remembers that last state, whether its deletion was seen (a
DELETED event) or only inferred (gone at a relist: its end is unknown), and keeps learning its pods'
final states from their later events. Each tombstone keeps only what a decision reads, packed (compact
JSON, deflated), so that the 10,000 the store may hold stay small. Used by
:class:`~airflow_jobwatch.triggers.registry.NamespaceWatch`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow_jobwatch.kube.engine.informer import compare_resource_versions
from airflow_jobwatch.kube.engine.projection import JOB_FIELDS, METADATA_FIELDS, POD_FIELDS, Spec, project
from airflow_jobwatch.kube.engine.store import Packer

__all__ = ["TOMBSTONE_MAX_AGE_SECONDS", "TOMBSTONE_MAX_ENTRIES", "Tombstone", "Tombstones"]

#: How many deleted Jobs' last states are kept, and for how long. A trigger normally reads a tombstone
#: within milliseconds of the DELETED event (it is called back from it); the bound only matters for a
#: trigger that subscribes after its Job is already gone, e.g. a trigger moved to this triggerer just
#: after a TTL deletion. Ten minutes outlasts any triggerer hand-over. Any Job of the namespace gets one,
#: since a trigger moved here may still subscribe to it; each keeps only what a decision reads (see
#: ``_TOMBSTONE_JOB_FIELDS``), packed (``kube/engine/store.py``'s ``Packer``). Measured with tracemalloc
#: (``bench/bench_tombstones.py``), a finished Job with one pod, labelled and annotated as the operator
#: makes them, costs about 0.7 KiB (1.1 KiB for a Job a trigger waits for, which keeps its whole Job:
#: the event carries it), against 12.4 KiB when a tombstone held the cache's copies as dicts: the
#: 10,000-entry cap bounds them at about 7 MiB.
TOMBSTONE_MAX_ENTRIES = 10_000
TOMBSTONE_MAX_AGE_SECONDS = 600.0


#: What a tombstone keeps of a Job and of each of its pods: what ``kube/meaning/states.py`` and the pod summary
#: read, minus the labels and annotations of the Job (nothing decides on them) and the annotations of its
#: pods (Airflow's own, often the biggest part of a projected pod). Labels of a pod stay: they tie it
#: to its Job.
_TOMBSTONE_METADATA: dict[str, Spec] = {
    key: spec for key, spec in METADATA_FIELDS.items() if key not in ("labels", "annotations")
}
_TOMBSTONE_JOB_FIELDS: dict[str, Spec] = {**JOB_FIELDS, "metadata": _TOMBSTONE_METADATA}
_TOMBSTONE_POD_FIELDS: dict[str, Spec] = {
    **POD_FIELDS,
    "metadata": {**_TOMBSTONE_METADATA, "labels": True},
}


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = project(pod, _TOMBSTONE_POD_FIELDS)
    return result


def _slim_job(job: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = project(job, _TOMBSTONE_JOB_FIELDS)
    return result


def _rv(obj: dict[str, Any]) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return rv if isinstance(rv, str) else None


@dataclass(slots=True)
class _Tombstone:
    job: bytes  # packed
    job_uid: str | None
    #: pod uid -> (resourceVersion, packed copy): the freshest copy seen of each pod, from the index at
    #: the Job's end or from a later event of that pod
    pods: dict[str, tuple[str | None, bytes]]
    at: float
    #: True when the Job's DELETED event was seen; False when it vanished at a relist (end unseen)
    observed: bool

    def learn(self, pod_uid: str, pod: dict[str, Any], packer: Packer) -> None:
        """Keep ``pod`` (packed by ``packer``) unless the copy held is newer (higher resourceVersion); when
        the versions cannot be compared, the later arrival wins."""
        held = self.pods.get(pod_uid)
        rv = _rv(pod)
        if held is not None:
            order = compare_resource_versions(held[0], rv)
            if order is not None and order > 0:
                return
        self.pods[pod_uid] = (rv, packer.pack(slim_pod(pod)))


@dataclass(frozen=True)
class Tombstone:
    """A deleted Job as the watch last saw it.

    :param job: the Job's last state.
    :param pods: the freshest copy seen of each of its pods (a pod's DELETED event carries its final
        state, and it may arrive after the Job's).
    :param observed: the Job's deletion was seen (a DELETED event, which carries its final state); False
        when it vanished while the watch was away (a relist no longer listed it): its end is unknown.
    """

    job: dict[str, Any]
    pods: list[dict[str, Any]]
    observed: bool


class Tombstones:
    """The last states of one namespace's deleted (or vanished) Jobs, by Job name, bounded by
    :data:`TOMBSTONE_MAX_ENTRIES` and :data:`TOMBSTONE_MAX_AGE_SECONDS`.

    A tombstone is written from the Job's DELETED (or DELETED_UNKNOWN) event and keeps learning its
    pods' final states from their later events, for as long as it lives.
    """

    def __init__(self) -> None:
        self._tombstones: OrderedDict[str, _Tombstone] = OrderedDict()
        # Job uid -> name, for the tombstones: a pod event of a deleted Job updates its tombstone
        self._tombstone_names: dict[str, str] = {}
        # A tombstone's copies are packed as the informers' compact stores pack what they hold (compact
        # JSON, deflated with the first object of the kind as preset dictionary): a tombstone is written
        # once and read by its trigger a few times at most, so a decode per read costs less than dicts.
        self._jobs = Packer()
        self._pods = Packer()

    def get(self, name: str) -> Tombstone | None:
        """The last state of the Job of this name that was deleted (or vanished) recently, with the
        freshest copy seen of each of its pods; None if there is none."""
        self.expire()
        tomb = self._tombstones.get(name)
        if tomb is None:
            return None
        pods = [self._pods.unpack(packed) for _, packed in tomb.pods.values()]
        return Tombstone(job=self._jobs.unpack(tomb.job), pods=pods, observed=tomb.observed)

    def bury(
        self,
        name: str,
        job: dict[str, Any],
        uid: str | None,
        *,
        whole: bool,
        observed: bool,
        pods: Iterable[tuple[str, dict[str, Any]]],
    ) -> None:
        """Keep the last state of the Job ``name`` (uid ``uid``) and of its ``pods`` (pod uid, pod).

        :param whole: keep the whole Job (a trigger waits for it), else only what a decision reads.
        :param observed: its DELETED event was seen; False when it vanished at a relist.
        """
        old = self._tombstones.pop(name, None)
        if old is not None:
            self._tombstone_names.pop(old.job_uid or "", None)
        # A Job a trigger waits for keeps its whole last state (the event carries the whole Job, as
        # upstream's does); any other Job only what a decision reads.
        tomb = _Tombstone(
            job=self._jobs.pack(job if whole else _slim_job(job)),
            job_uid=uid,
            pods={},
            at=time.monotonic(),
            observed=observed,
        )
        for pod_uid, pod in pods:
            tomb.learn(pod_uid, pod, self._pods)
        self._tombstones[name] = tomb
        if uid:
            self._tombstone_names[uid] = name
        self.expire()

    def created(self, name: str, uid: str | None) -> None:
        """A Job named ``name`` was ADDED: drop the tombstone of that very Job (same uid)."""
        # A new Job under this name: any tombstone is of an older incarnation; keep it only if
        # the uid differs so a trigger waiting for the old uid still learns it was deleted.
        older = self._tombstones.get(name)
        if older is not None and older.job_uid == uid:
            del self._tombstones[name]
            self._tombstone_names.pop(older.job_uid or "", None)

    def holds(self, job_uid: str) -> bool:
        """Whether a tombstone of the Job with this uid lives."""
        return job_uid in self._tombstone_names

    def learn(self, job_uid: str, pod_uid: str, pod: dict[str, Any]) -> None:
        """Update the tombstone of the Job with uid ``job_uid``, if one lives, with its pod's new copy."""
        tomb_name = self._tombstone_names.get(job_uid)
        tomb = self._tombstones.get(tomb_name) if tomb_name is not None else None
        if tomb is not None and tomb.job_uid == job_uid:
            tomb.learn(pod_uid, pod, self._pods)

    def expire(self) -> None:
        cutoff = time.monotonic() - TOMBSTONE_MAX_AGE_SECONDS
        while self._tombstones:
            oldest = next(iter(self._tombstones.values()))
            if len(self._tombstones) > TOMBSTONE_MAX_ENTRIES or oldest.at < cutoff:
                self._tombstones.popitem(last=False)
                self._tombstone_names.pop(oldest.job_uid or "", None)
            else:
                break

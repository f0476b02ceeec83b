"""A minimal Kueue: Jobs labelled with a queue wait suspended until a capacity slot frees.

What a client of a real Kueue sees, and what this reproduces (kueue's ``pkg/controller/jobs/job``
webhook and ``pkg/controller/jobframework/reconciler.go``):

* a Job created with the ``kueue.x-k8s.io/queue-name`` label is suspended by Kueue's mutating
  webhook (``spec.suspend: true``), so the Job controller gives it the ``Suspended`` condition
  (reason ``JobSuspended``) and creates no pods;
* when its workload is admitted, Kueue sets ``spec.suspend: false`` and records the Job event
  ``Started`` "Admitted by clusterQueue CQ"; the Job controller then flips ``Suspended`` to "False"
  (reason ``JobResumed``) and starts pods;
* when it is preempted, Kueue sets ``spec.suspend: true`` again and records ``Stopped`` "Preempted
  to accommodate a workload (UID: ..., JobUID: ...) due to prioritization in the ClusterQueue";
  the Job controller deletes its running pods (not counted as failures) and sets ``Suspended``
  back to "True". The workload goes back to the queue and is admitted again when a slot frees.

One ClusterQueue with ``capacity`` slots (one admitted Job = one slot, whatever its size), admitted
first-come first-served. Workload objects, ResourceFlavors and priorities are not modelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from . import events
from .errors import ApiError
from .store import Event, clone

log = logging.getLogger(__name__)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# kueue pkg/scheduler/preemption (preemptionMessage with HumanReadablePreemptionReasons["InClusterQueue"]).
PREEMPTED_MESSAGE = (
    "Preempted to accommodate a workload (UID: {wl}, JobUID: {job}) due to prioritization in the ClusterQueue"
)
COMPONENT = "kueue-admission"


def _finished(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


class Kueue:
    """Off until :meth:`configure` gives it a capacity."""

    def __init__(self, sb: Any) -> None:
        self.sb = sb
        self.capacity: int | None = None
        self.cluster_queue = "cluster-queue"
        self.admitted: dict[str, tuple[str, str]] = {}  # job uid -> (namespace, name)
        self.held_until: dict[str, float] = {}  # job uid -> not admitted again before (preempted)
        self.admissions: dict[str, int] = {}  # "namespace/name" -> times admitted
        self._scheduled = False
        self._timers: list[asyncio.TimerHandle] = []
        self._listening = False

    # ---- configuration ---------------------------------------------------------------------------
    def configure(self, capacity: int | None, *, cluster_queue: str = "cluster-queue") -> None:
        if capacity is not None and (
            not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0
        ):
            raise ValueError(
                f"set_kueue: capacity must be an int >= 0 (admitted Jobs) or None (off), got {capacity!r}"
            )
        self.capacity = capacity
        self.cluster_queue = cluster_queue
        if capacity is not None and not self._listening:
            self.sb.store.listeners.append(self._on_event)
            self._listening = True
        self._schedule()

    def stop(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        if self._listening:
            with contextlib.suppress(ValueError):
                self.sb.store.listeners.remove(self._on_event)
            self._listening = False

    # ---- the mutating webhook --------------------------------------------------------------------
    def mutate(self, job: dict[str, Any]) -> None:
        """On create: a Job with a queue label starts suspended (Kueue's webhook ``Default``)."""
        if self.capacity is None:
            return
        if ((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL):
            job.setdefault("spec", {})["suspend"] = True

    # ---- admission -------------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        if event.resource == "jobs":
            self._schedule()

    def _schedule(self, delay: float = 0.0) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if delay > 0:
            self._timers.append(loop.call_later(delay, self._schedule))
            return
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._reconcile)

    def _reconcile(self) -> None:
        self._scheduled = False
        self._timers = [t for t in self._timers if not t.cancelled()]
        if self.capacity is None:
            return
        for uid, (ns, name) in list(self.admitted.items()):
            entry = self.sb.store.get("jobs", ns, name)
            if entry is None or entry.obj["metadata"].get("uid") != uid or _finished(entry.obj):
                del self.admitted[uid]  # done or gone: its slot frees
        now = time.monotonic()
        waiting = []
        for entry in self.sb.store.iter("jobs"):
            job = entry.obj
            meta = job["metadata"]
            if not (meta.get("labels") or {}).get(QUEUE_LABEL) or meta.get("deletionTimestamp"):
                continue
            if meta["uid"] in self.admitted or _finished(job) or not (job.get("spec") or {}).get("suspend"):
                continue
            if self.held_until.get(meta["uid"], 0.0) > now:
                continue
            waiting.append(job)
        waiting.sort(
            key=lambda j: (j["metadata"].get("creationTimestamp", ""), int(j["metadata"]["resourceVersion"]))
        )
        for job in waiting:
            if len(self.admitted) >= self.capacity:
                break
            self._admit(job)

    def _admit(self, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        new = clone(job)
        new["spec"]["suspend"] = False
        try:
            self.sb.api.commit_update("jobs", new, job)
        except ApiError as err:
            log.warning(
                "sandbox kueue: cannot admit %s/%s: %s", meta.get("namespace"), meta["name"], err.message
            )
            return
        self.admitted[meta["uid"]] = (meta.get("namespace", ""), meta["name"])
        self.held_until.pop(meta["uid"], None)
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        self.admissions[key] = self.admissions.get(key, 0) + 1
        events.record(
            self.sb,
            "jobs",
            new,
            "Started",
            f"Admitted by clusterQueue {self.cluster_queue}",
            component=COMPONENT,
        )

    def preempt(self, namespace: str, name: str, *, hold_seconds: float = 0.0) -> None:
        """Kueue preempts an admitted Job: suspended again, back in the queue after ``hold_seconds``
        (the time the higher-priority workload keeps the slot)."""
        entry = self.sb.store.get("jobs", namespace, name)
        if entry is None:
            raise LookupError(f"job {namespace}/{name} not found")
        job = entry.obj
        uid = job["metadata"]["uid"]
        if uid not in self.admitted:
            raise RuntimeError(
                f"job {namespace}/{name} is not admitted by the sandbox Kueue, so it cannot be preempted"
            )
        new = clone(job)
        new["spec"]["suspend"] = True
        self.sb.api.commit_update("jobs", new, job)
        del self.admitted[uid]
        if hold_seconds > 0:
            self.held_until[uid] = time.monotonic() + hold_seconds
            self._schedule(hold_seconds)
        events.record(
            self.sb,
            "jobs",
            new,
            "Stopped",
            PREEMPTED_MESSAGE.format(wl=uuid.uuid4(), job=uuid.uuid4()),
            component=COMPONENT,
        )
        self._schedule()

    def state(self) -> dict[str, Any]:
        """What an admin sees: capacity, admitted Jobs (``ns/name``), and how often each was admitted."""
        return {
            "capacity": self.capacity,
            "admitted": sorted(f"{ns}/{name}" for ns, name in self.admitted.values()),
            "admissions": dict(self.admissions),
        }


__all__ = ["PREEMPTED_MESSAGE", "QUEUE_LABEL", "Kueue"]

"""One record per task instance key: what the executor knows about the key's current launch.

A key (dag, task, run, try, map index) can be handed to the executor several times for the same try:
after deferral, for reschedule-mode sensors, after some clears. Each hand-over is a *launch*, named by a
launch id that the pod carries as an annotation. The record holds the key's current launch: its id, the
workload, the create still pending or in flight, the pod once created, whether that pod was seen
running, the disruptions before start and their backoff, and where the task came from (launched here or
adopted from another scheduler).

Every path of the executor is one of the transitions below; none edits part of the state by hand. The
executor's ``running`` set is exactly the keys that have a record (:meth:`TaskRecords.keys`), and a
record is removed by exactly one transition (ended, create failed, revoked, adopted away), which is
where the key's slot is freed.

At the scheduler's ``end()`` the records are simply dropped with the process: every pod is left as it is,
and the next scheduler's adoption rebuilds the records from the pods and from the launch id Airflow's
database holds for each task instance.

Pods are indexed separately (:meth:`TaskRecords.owner`): a pod of an earlier launch stays known until its
end is seen, so that it is cleaned up, but only the pod of the current launch counts for the key.

Pure Python (no Kubernetes or Airflow calls), so that its rules can be checked by a model-based test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from airflow_jobwatch.kube.engine.backoff import Backoff

PodRef = tuple[str, str]  # (namespace, name)

LAUNCHED = "launched"  # the workload was queued to this executor
ADOPTED = "adopted"  # the pod was adopted from a scheduler that is gone


@dataclass
class PendingCreate:
    """The pod of the record's launch is to be created (or its create must be retried)."""

    pod: Any = None  # the V1Pod, built once
    body: dict[str, Any] | None = (
        None  # the serialized pod, sent as is on every attempt (one name per launch)
    )
    build: Any = None  # Future of (pod, body) while it is built in the API threads
    attempts: int = 0
    backoff: Backoff | None = None  # created at the first failure
    not_before: float = 0.0
    last_error: str | None = None
    retry_reason: str | None = None  # the last failure's reason, without details (logged when it changes)
    waiting_for_quota: bool = False  # the last create was refused for a ResourceQuota
    accepted_at: float = field(default_factory=time.monotonic)  # for the launch-latency metric
    ref: PodRef | None = None  # the pod a create was sent for (its answer may be lost)
    # Database reads that found the launch not yet named (Airflow without pre-assigned ids).
    unnamed_reads: int = 0
    revoked: bool = False  # revoke_task while its create was in flight: delete the pod if it was created


class ReplacedPod(NamedTuple):
    """A pod of a launch that ended before its task ran and was replaced (see ``TaskRecord.replaced``)."""

    ref: PodRef
    may_start: bool  # still Pending on a fatal waiting reason, not yet stopped: it could yet start the try
    delete: bool  # deleted when released (``delete_worker_pods*``); else left, labelled done


@dataclass
class TaskRecord:
    """The current launch of one key. See the module docstring."""

    key: Any
    launch_id: str
    origin: str = LAUNCHED
    workload: Any = None  # the ExecuteTask; None for an adopted task (it cannot be launched again here)
    create: PendingCreate | None = None
    pod: PodRef | None = None
    seen_running: bool = False
    disruptions: list[str] = field(default_factory=list)
    launch_failures: list[str] = field(default_factory=list)  # pods that failed before the task ran
    relaunch_backoff: Backoff | None = None
    # Which pod of the launch is to be created: 0, then one more for each pod of the launch that failed before
    # its task ran (a relaunch) or that a create found already finished under the name. Part of the pod's name.
    pod_index: int = 0
    # What the task fails with if a relaunch may not be created (the task instance is no longer QUEUED on its
    # try): the failure the relaunch stood in for, in its own words.
    relaunch_failure: str | None = None
    # Pods of this launch that ended before their task ran and were replaced, kept (labelled done) until the
    # key leaves this executor or is queued again: while one exists, its name is taken, so an adopter that
    # builds the launch's pod names from index 0 on is answered 409 there and goes on to the next index,
    # instead of creating a second pod of the launch beside the replacement. A pod that failed while still
    # Pending (``may_start``: it could yet start a try) is stopped, not deleted, as soon as the launch's next
    # pod exists, so that its name stays taken too.
    replaced: list[ReplacedPod] = field(default_factory=list)

    @property
    def priority(self) -> int:
        return int(getattr(getattr(self.workload, "ti", None), "priority_weight", 0) or 0)


class TransitionError(RuntimeError):
    """A transition that the record's state does not allow (a bug in the caller)."""


class TaskRecords:
    """The records of every key this executor holds, and the index of every pod it still watches."""

    def __init__(self) -> None:
        self._records: dict[Any, TaskRecord] = {}
        # Keys whose record has a pod to create (``create`` set) -> the priority they are filed under,
        # kept by every transition that sets or clears it, so that finding them costs the pending
        # launches, not every task held; and the same keys by priority, each in queueing order, so that
        # listing them in launch order needs no sort of the keys.
        self._pending: dict[Any, int] = {}
        self._by_priority: dict[int, dict[Any, None]] = {}
        # (namespace, name) -> (key, launch id) of every pod created or adopted and not yet seen to end.
        self._pods: dict[PodRef, tuple[Any, str]] = {}
        # Replaced pods whose record let them go (see ``TaskRecord.replaced``): to be deleted by the caller.
        self._released: list[PodRef] = []
        # Replaced pods that may still start, now that their launch's next pod exists: to be stopped.
        self._stopping: list[PodRef] = []

    # ---- reading ------------------------------------------------------------------------------

    def get(self, key: Any) -> TaskRecord | None:
        return self._records.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[TaskRecord]:
        return iter(list(self._records.values()))

    def keys(self) -> set[Any]:
        """The keys that hold a slot: exactly the executor's ``running`` set."""
        return set(self._records)

    def pending(self) -> list[TaskRecord]:
        """Records whose pod is still to be created, highest priority first (in queueing order within
        one priority)."""
        records: list[TaskRecord] = []
        for priority in sorted(self._by_priority, reverse=True):
            records.extend(map(self._records.__getitem__, self._by_priority[priority]))
        return records

    def pending_count(self) -> int:
        return len(self._pending)

    def waiting_for_quota(self) -> int:
        """How many pending launches had their last create refused for a ResourceQuota."""
        creates = (self._records[key].create for key in self._pending)
        return sum(1 for create in creates if create is not None and create.waiting_for_quota)

    def owner(self, ref: PodRef) -> tuple[Any, str] | None:
        """The (key, launch id) a watched pod was created or adopted for."""
        return self._pods.get(ref)

    def pod_refs(self) -> set[PodRef]:
        return set(self._pods)

    def released(self) -> list[PodRef]:
        """The replaced pods no record keeps any longer (each given once): the caller deletes them."""
        out, self._released = self._released, []
        return out

    def stopping(self) -> list[PodRef]:
        """The replaced pods that could still start and whose launch's next pod exists (each given once): the
        caller stops them (their containers killed, the object and its name kept)."""
        out, self._stopping = self._stopping, []
        return out

    def keeps(self, key: Any, ref: PodRef) -> bool:
        """Whether ``key``'s record keeps ``ref`` as a replaced pod (see ``TaskRecord.replaced``)."""
        record = self._records.get(key)
        return record is not None and any(pod.ref == ref for pod in record.replaced)

    def is_current(self, key: Any, ref: PodRef) -> bool:
        """Whether pod ``ref`` is the pod of ``key``'s current launch: the one rule for what counts.

        A pod of an earlier launch of the key, of a revoked launch, or of a launch whose end was already
        reported, is not: its end is cleaned up and never reported.
        """
        record = self._records.get(key)
        if record is None or self._pods.get(ref) != (key, record.launch_id):
            return False
        return ref == record.pod or (
            record.pod is None and record.create is not None and ref == record.create.ref
        )

    # ---- transitions --------------------------------------------------------------------------

    def queue(self, key: Any, workload: Any, launch_id: str) -> str | None:
        """The scheduler hands over ``key`` (again): a new current launch whose pod is to be created.

        Returns the previous launch's id if the key already had one: its pod, if any, stays indexed as a
        pod of an earlier launch (cleaned up when it ends, never reported).
        """
        previous = self._records.get(key)
        if previous is not None:
            self._release(previous)
        self._records[key] = TaskRecord(
            key=key, launch_id=launch_id, workload=workload, create=PendingCreate()
        )
        self._unmark_pending(key)  # queued again: in line after those queued before it
        self._mark_pending(key)
        return previous.launch_id if previous is not None else None

    def create_sent(self, key: Any, ref: PodRef) -> None:
        """A create of the current launch's pod was sent (tracked before its answer: it may be lost)."""
        record = self._require(key)
        if record.create is not None:
            record.create.ref = ref
        self._pods[ref] = (key, record.launch_id)

    def create_not_sent(self, ref: PodRef) -> None:
        """A create that never reached the server, or found someone else's pod under the name."""
        owner = self._pods.pop(ref, None)
        record = self._records.get(owner[0]) if owner is not None else None
        if record is not None and record.create is not None and record.create.ref == ref:
            record.create.ref = None

    def created(self, key: Any, ref: PodRef) -> TaskRecord:
        """The current launch's pod exists (the create's answer, a 409 of ours, or the watch saw it)."""
        record = self._require(key)
        record.create = None
        self._unmark_pending(key)
        record.pod = ref
        # The launch's next pod exists: a replaced pod that could still start a try is stopped, its name kept.
        self._stop(record)
        self._pods[ref] = (key, record.launch_id)
        return record

    def seen_running(self, key: Any, ref: PodRef) -> None:
        """The current launch's pod was reported running: from now on it counts as having started."""
        record = self._require(key)
        if record.pod == ref:
            record.seen_running = True

    def relaunch(
        self,
        key: Any,
        ref: PodRef,
        disruption: str,
        backoff: Backoff,
        not_before: float,
        *,
        launch_failure: bool = False,
        failure: str | None = None,
        keep: bool | None = None,
        delete: bool = True,
    ) -> TaskRecord:
        """The current pod ended before the task ran; the same launch gets a new pod after ``not_before``.

        ``disruption`` says what ended it; it counts against the disruption budget, or, with
        ``launch_failure``, against the budget of pods that failed before their task ran. The launch id is
        kept: it is what the scheduler's database names for this hand-over, and the new pod replaces the
        old one within it; the new pod has the next ``pod_index``, so its name is new and still the same for
        every scheduler. ``failure`` is what the task fails with if the relaunch may not be created. ``keep``:
        the ended pod is kept until it is released (see ``TaskRecord.replaced``), with whether it may still
        start; None when there is nothing to do with it (it is neither stopped nor deleted). ``delete``:
        whether it is deleted when released once it can no longer start (one that still could is deleted).
        """
        record = self._require(key)
        self._pods.pop(ref, None)
        if keep is not None:
            record.replaced.append(ReplacedPod(ref, keep, delete))
        (record.launch_failures if launch_failure else record.disruptions).append(disruption)
        record.relaunch_backoff = backoff
        record.pod = None
        record.seen_running = False
        record.pod_index += 1
        record.relaunch_failure = failure
        record.create = PendingCreate(not_before=not_before)
        self._mark_pending(key)
        return record

    def name_taken(self, key: Any, *, keep: bool | None = None, delete: bool = True) -> None:
        """A create found a finished pod of this very launch under its name (a pod of the launch that failed
        before its task ran, which this executor did not replace itself): the next pod of the launch is made,
        under the next ``pod_index``, with nothing else changed. ``keep`` and ``delete`` as for
        :meth:`relaunch`: that pod is kept, stopped and deleted as this executor's own replaced pods are."""
        record = self._require(key)
        if record.create is None:
            raise TransitionError(f"{key} has no pod to create")
        ref = record.create.ref
        if ref is not None and self._pods.get(ref) == (key, record.launch_id):
            del self._pods[ref]
        if ref is not None and keep is not None:
            record.replaced.append(ReplacedPod(ref, keep, delete))
        record.create.ref = None
        record.create.body = None
        record.create.not_before = 0.0
        record.pod_index += 1

    def end(self, key: Any, ref: PodRef | None = None) -> TaskRecord | None:
        """The key leaves this executor: its end is reported (ended, create failed), it was revoked, or
        another scheduler adopted it. Its slot is freed here, once; a pod given is no longer indexed."""
        if ref is not None:
            self._pods.pop(ref, None)
        self._unmark_pending(key)
        record = self._records.pop(key, None)
        if record is not None:
            self._release(record)
            # Revoked while its pod runs or is being created: the caller deletes that pod, and its end is
            # not reported.
            for other in (record.pod, record.create.ref if record.create is not None else None):
                if other is not None and other != ref:
                    self._pods.pop(other, None)
        return record

    def stale_ended(self, ref: PodRef) -> tuple[Any, str] | None:
        """A pod of an earlier launch ended: forgotten (the caller cleans it up, reports nothing)."""
        return self._pods.pop(ref, None)

    def adopt(self, key: Any, ref: PodRef, launch_id: str, *, current: bool) -> None:
        """A gone scheduler's pod is taken over. ``current``: it is the key's current launch (the key gets
        a record and a slot); otherwise it is an earlier launch's pod, only cleaned up when it ends."""
        self._pods[ref] = (key, launch_id)
        if current:
            self._unmark_pending(key)
            previous = self._records.get(key)
            if previous is not None:
                self._release(previous)
            self._records[key] = TaskRecord(key=key, launch_id=launch_id, origin=ADOPTED, pod=ref)

    def _release(self, record: TaskRecord) -> None:
        """Let ``record``'s replaced pods go: deleted if ``delete_worker_pods*`` say so, and, whatever they
        say, any that could still start (it was never stopped), so that it never runs the try."""
        self._released.extend(pod.ref for pod in record.replaced if pod.may_start or pod.delete)
        record.replaced = []

    def _stop(self, record: TaskRecord) -> None:
        """Hand ``record``'s replaced pods that could still start to the caller to stop; they stay kept."""
        self._stopping.extend(pod.ref for pod in record.replaced if pod.may_start)
        record.replaced = [pod._replace(may_start=False) for pod in record.replaced]

    def _mark_pending(self, key: Any) -> None:
        """File ``key`` (its record set) as pending; one already filed keeps its place in line."""
        if key in self._pending:
            return
        priority = self._records[key].priority
        self._pending[key] = priority
        self._by_priority.setdefault(priority, {})[key] = None

    def _unmark_pending(self, key: Any) -> None:
        if key not in self._pending:
            return
        priority = self._pending.pop(key)
        bucket = self._by_priority[priority]
        del bucket[key]
        if not bucket:
            del self._by_priority[priority]

    def _require(self, key: Any) -> TaskRecord:
        record = self._records.get(key)
        if record is None:
            raise TransitionError(f"no record for {key}")
        return record


# ---- what Airflow's database and the cluster say, as decisions --------------------------------------------
#
# ``row`` is what the database holds for a task instance: ``state``, ``try_number``, ``queued_by_job_id``
# (as text) and ``external_executor_id``. Pure, so that the model-based test checks the same rules.

SUPERSEDED = "superseded"  # the database names another launch of this try: this one's end is not reported
RAN = "ran"  # the launch is this scheduler's, but its task instance is no longer QUEUED: no new pod for it
# The launch is this scheduler's and QUEUED, but the database does not name it yet (Airflow without pre-assigned
# ids stores the id this executor reports in the scheduler loop after): its first pod waits until it does.
UNNAMED = "unnamed"

UNRESOLVED = "unresolved"  # adoption: the pods could not all be listed; act on nothing, look again later
ADOPT = "adopt"  # adoption: a pod of the current launch exists; adopt it
LAUNCH = "launch"  # adoption: no pod of the current launch anywhere, the task never ran; launch it here
RESET = "reset"  # adoption: no pod of the current launch anywhere, the task ran; hand it back to be reset


def launch_held(
    row: Any,
    *,
    try_number: int,
    scheduler_job_id: str,
    launch_id: str,
    pre_assigned: bool,
    sent: bool = False,
) -> bool | str:
    """Whether this scheduler may create (or retry the create of) the launch's pod. True: the row is on the
    key's try, queued by this scheduler job, (when the scheduler pre-assigned the id) names this launch, and
    is QUEUED; or RUNNING when a create of this very pod may already have reached the API server (``sent``:
    its answer was lost; the retry meets the pod under its name and is answered 409). :data:`RAN`: all of that
    but no longer QUEUED while this pod was never sent (a relaunch, or a first create, for a task that runs,
    deferred or ended): no pod is created for it, and the task is failed saying why. False: the launch is not this scheduler's (adopted elsewhere, queued again
    under another launch, reset, or a missing row).

    Without a pre-assigned id the row names an earlier launch (or none) until the scheduler has stored the
    event that names this one, so the job and the try decide whether the launch is held; and a pod never
    sent waits (:data:`UNNAMED`) until the row names this launch. So an adopter that reads the row either
    finds this launch named, builds the same pod name and is answered 409 by this pod, or finds it not yet
    named while no pod of it exists, and this scheduler's next read finds the task adopted."""
    if (
        row is None
        or row.try_number != try_number
        or row.queued_by_job_id != scheduler_job_id
        or (pre_assigned and row.external_executor_id != launch_id)
    ):
        return False
    if row.state == "queued":
        return UNNAMED if not pre_assigned and not sent and row.external_executor_id != launch_id else True
    if sent:
        return bool(row.state == "running")
    return RAN


def launch_verdict(row: Any, *, try_number: int, launch_id: str, pre_assigned: bool) -> bool | str | None:
    """What the row says of a launch whose pod ended. True: QUEUED on this try **and** naming this launch (its
    task never ran). False: on another try, or naming this launch and not QUEUED (it ran). :data:`SUPERSEDED`:
    on this try, naming another launch, and the id was pre-assigned (the key was queued again after it).
    None: unknown (no row, or no pre-assigned id and the row names no launch or an earlier one)."""
    if row is None:
        return None
    if row.try_number != try_number:
        return False
    if row.external_executor_id == launch_id:
        return bool(row.state == "queued")
    if pre_assigned and row.external_executor_id is not None:
        return SUPERSEDED
    return None


def adoption_verdict(*, complete: bool, current_pod: bool, state: str | None) -> str:
    """What adoption does with an orphaned task instance. ``complete``: every namespace a launch of its
    scheduler could have used was listed successfully; ``current_pod``: a pod of its current launch was found.
    Unknown is not absent: an incomplete list decides nothing."""
    if not complete:
        return UNRESOLVED
    if current_pod:
        return ADOPT
    return LAUNCH if state == "queued" else RESET


__all__ = [
    "ADOPT",
    "ADOPTED",
    "LAUNCH",
    "LAUNCHED",
    "RESET",
    "SUPERSEDED",
    "UNRESOLVED",
    "PendingCreate",
    "PodRef",
    "RAN",
    "TaskRecord",
    "TaskRecords",
    "TransitionError",
    "UNNAMED",
    "adoption_verdict",
    "launch_held",
    "launch_verdict",
]

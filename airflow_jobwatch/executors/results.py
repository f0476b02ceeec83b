"""Watcher results of JobWatchExecutor: events for the scheduler, relaunches, stale pods."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.base import ExecutorBase
from airflow_jobwatch.executors.record import SUPERSEDED, TaskRecord, launch_held, launch_verdict
from airflow_jobwatch.executors.watcher import PodResult
from airflow_jobwatch.kube.engine.backoff import Backoff

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey

# A worker pod disrupted before any of its containers started cannot have run the task; it is
# launched again for the same try (up to [jobwatch] disruption_relaunches times). The reasons that name a
# disruption, as classify_pod reports them: the pod's status.reason (kubelet eviction, preemption, node
# shutdown or loss) or its DisruptionTarget condition's reason. A local list until kube/meaning/states.py's
# disruption rules (written in parallel) are merged. A pod deleted by someone is not among them: that may
# be a user stopping the task.
DISRUPTION_REASONS = frozenset(
    {
        "Evicted",
        "Preempting",
        "NodeShutdown",
        "NodeLost",
        "PreemptionByScheduler",
        "PreemptionByKubeScheduler",
        "EvictionByEvictionAPI",
        "DeletionByTaintManager",
        "DeletionByPodGC",
        "TerminationByKubelet",
        "DisruptionTarget",
    }
)

# Backoff between such relaunches: a preempting scheduler or a node under pressure needs a moment; the
# delay doubles (with jitter) up to the maximum.
RELAUNCH_BACKOFF_INITIAL_SECONDS = 2.0
RELAUNCH_BACKOFF_MAX_SECONDS = 60.0


class Results(ExecutorBase):
    """What the watcher reports about each pod, turned into the scheduler's events: running, success,
    failure; a relaunch for the same try when a pod was disrupted before it started; nothing for a pod
    of an earlier launch (cleaned up only)."""

    def _on_result(self, result: PodResult) -> None:
        key = cast("TaskInstanceKey", result.key)
        ref = (result.namespace, result.name)
        if not self.records.is_current(key, ref):
            if result.terminal:
                self._stale_pod_ended(key, result)
            return
        record = self.records.get(key)
        assert record is not None
        if record.create is not None:
            # The create's answer was lost (or has not come yet), but the pod exists: it is launched.
            self._launched(key, result.namespace, result.name)
        if result.adopted:
            # Another scheduler adopted the pod (it took this one for dead): the task is that scheduler's
            # now. As upstream's ADOPTED state: free the slot, report nothing. The record goes with it, so
            # that the task can be adopted back if that scheduler dies.
            self.records.end(key, ref)
            self._settle(key)
            self.log.warning("Task %s: pod %s/%s was %s", key, result.namespace, result.name, result.message)
            return
        if not result.terminal:
            if result.phase == "running":
                self.records.seen_running(key, ref)
                # The launch id as the event's info: the scheduler stores it as the task instance's
                # external_executor_id, which is how an adopter tells the current launch's pod.
                self.running_state(key, record.launch_id)
            return
        if self._queued_on_try.get(key) == SUPERSEDED:
            # Airflow's database names another launch of this try (the scheduler queued the key again and the
            # new launch has not reached this executor yet): this launch's end belongs to no launch the
            # scheduler waits for. Cleaned up, not reported; the slot is freed for the new launch.
            self.records.end(key, ref)
            self._settle(key)
            self._counters["stale_pods_cleaned"] += 1
            metrics.stale_launch_pod()
            self.log.info(
                "Pod %s/%s of launch %s of %s ended (%s); not reported: Airflow's database names another "
                "launch of this try, queued after it. Cleaning it up.",
                *ref,
                record.launch_id,
                key,
                result.phase,
            )
            self._clean_up_finished(result)
            return
        where = f"pod {result.namespace}/{result.name}"
        # (An adopted pod has no workload here to launch again: it fails as before.)
        never_ran = self._never_ran(record, result) if record.workload is not None else False
        disrupted = self._disrupted_before_start(record, result) if never_ran else None
        if disrupted is not None and self._relaunch_after_disruption(record, result, disrupted):
            return
        if disrupted is None and never_ran and self._requeue_after_launch_failure(record, result):
            return
        self.records.end(key, ref)
        history = record.disruptions
        if result.phase == "succeeded":
            # execute_workload exits 0 whatever the task did; the task recorded its own state through
            # the execution API. SUCCESS here means "the worker finished"; if the task instance is
            # still queued/running the scheduler treats it as killed externally (docs/executor.md).
            self._counters["success"] += 1
            self.success(key, f"{where} succeeded")
            failed = False
        else:
            self._counters["failed"] += 1
            reason = result.reason or "Failed"
            info = _failed_info(result)
            if disrupted is not None:
                info = (
                    f"the worker pod was disrupted before any of its containers started {len(history)} "
                    f"times, more than [jobwatch] disruption_relaunches = {self._disruption_relaunches} "
                    f"allows: " + "; ".join(history)
                )
            elif result.disruption:
                metrics.pod_disrupted(reason)
            self.log.warning("Task %s: %s", key, info)
            self._append_task_log(record.workload, key, info)
            self.fail(key, info)
            failed = True
        self._settle(key)
        metrics.terminal_report("failed" if failed else "success", after_watcher_gap=result.gap)
        self._report(
            key,
            pod=f"{result.namespace}/{result.name}",
            state="failed" if failed else "success",
            reason=result.reason,
            gap=result.gap,
        )
        self._clean_up_finished(result)

    def _read_queued_on_try(self, results: list[PodResult]) -> None:
        """Read, in one query, which task instances of the failed pods in ``results`` are still QUEUED on
        their try in Airflow's database **and** name the launch this executor holds: the one signal that the
        task of that launch never ran (:meth:`_never_ran`). QUEUED for another launch of the same try (the
        key was queued again, a resume waiting for a slot) is not it: that launch's pod may have run.

        Only pods that may be launched again are asked about (the current launch's pod, launched here). A
        database that cannot be read leaves the answer unknown, and the pod's status decides.
        """
        keys: dict[TaskInstanceKey, str] = {}
        pre_assigned: set[TaskInstanceKey] = set()
        for result in results:
            key = cast("TaskInstanceKey", result.key)
            record = self.records.get(key)
            if (
                result.terminal
                and record is not None
                and record.workload is not None
                and self.records.is_current(key, (result.namespace, result.name))
            ):
                launched_with = getattr(record.workload.ti, "external_executor_id", None)
                if launched_with == record.launch_id:
                    pre_assigned.add(key)
                if result.phase == "failed" or key in pre_assigned:
                    keys[key] = record.launch_id
        self._queued_on_try = {}
        if not keys:
            return
        try:
            self._queued_on_try = (
                queued_on_try(keys, frozenset(pre_assigned)) if pre_assigned else queued_on_try(keys)
            )
        except Exception as err:
            self.log.debug("Could not read the task instances' states (%s: %s)", type(err).__name__, err)

    def _never_ran(self, record: TaskRecord, result: PodResult) -> bool:
        """Whether the task of a failed pod never ran, so that its try may be launched again.

        Airflow's database decides when it can be read: the task instance is still QUEUED on this try
        (its worker never told the execution API that it runs), whatever the pod's status fields say. A
        task instance that is anything else (RUNNING, finished, cleared to another try) is never launched
        again. Unread (no database here, or it failed), a pod never launched again when this executor saw
        it running, or when any of its containers started.
        """
        if result.phase != "failed" or result.gap:
            return False
        queued = self._queued_on_try.get(record.key)
        if isinstance(queued, bool):
            return queued
        return not record.seen_running and result.started is False

    def _disrupted_before_start(self, record: TaskRecord, result: PodResult) -> str | None:
        """What disrupted a failed pod whose task never ran (:meth:`_never_ran`), or None."""
        if result.reason not in DISRUPTION_REASONS:
            return None
        return f"pod {result.namespace}/{result.name}: {result.reason}: {result.message}".rstrip(": .")

    def _requeue_after_launch_failure(self, record: TaskRecord, result: PodResult) -> bool:
        """Upstream's ``pod_launch_failure_retries``: a pod that failed before its task ran, for any reason
        other than a disruption and the excluded container reasons (default ``Error``: a container that
        started and whose worker died before reporting), is launched again for the same try, without
        spending a task retry, at most that many times per try (-1: no limit; 0: off). Only with Airflow's
        database saying the task instance is still QUEUED on this try. Returns False when not requeued.
        """
        if self._queued_on_try.get(record.key) is not True:
            return False
        limit = self._launch_failure_retries
        if limit == 0 or (result.reason or "") in self._launch_failure_excluded:
            return False
        if limit != -1 and len(record.launch_failures) >= limit:
            return False
        what = f"pod {result.namespace}/{result.name}: {result.reason or 'Failed'}: {result.message}".rstrip(
            ": ."
        )
        self._counters["launch_failure_requeues"] += 1
        self._launch_again(
            record,
            result,
            what,
            launch_failure=True,
            state="requeued",
            explain=lambda delay, count: (
                f"{what}. The task never ran (its task instance is still queued on this try): launching it "
                f"again for the same try in {delay:.1f} s, without spending a retry (requeue {count} of "
                f"{'unlimited' if limit == -1 else f'at most {limit}'}, "
                f"[kubernetes_executor] pod_launch_failure_retries)"
            ),
        )
        return True

    def _relaunch_after_disruption(self, record: TaskRecord, result: PodResult, disruption: str) -> bool:
        """Launch the record's task again for the same try after its pod was disrupted before it started.

        Such a pod cannot have run the task (its worker never started, so it never told Airflow's
        execution API that it runs): nothing is reported, the task stays queued and keeps its slot, and
        a new pod is created after a backoff; the disrupted pod is cleaned up per ``delete_worker_pods*``. Returns False past
        ``[jobwatch] disruption_relaunches``: the task then fails with a message naming every disruption.
        """
        if len(record.disruptions) + 1 > self._disruption_relaunches:
            record.disruptions.append(disruption)
            return False
        self._counters["disruption_relaunches"] += 1
        metrics.disruption_relaunch(result.reason or "Disrupted")
        self._launch_again(
            record,
            result,
            disruption,
            launch_failure=False,
            state="relaunched",
            explain=lambda delay, count: (
                f"{disruption}. No container of the pod had started, so the task never ran: launching it "
                f"again for the same try in {delay:.1f} s (relaunch {count} of at most "
                f"{self._disruption_relaunches}, [jobwatch] disruption_relaunches)"
            ),
        )
        return True

    def _launch_again(
        self,
        record: TaskRecord,
        result: PodResult,
        what: str,
        *,
        launch_failure: bool,
        state: str,
        explain: Callable[[float, int], str],
    ) -> None:
        """Launch the record's try again after a backoff (2 s doubling to 60 s, with jitter, shared by every
        relaunch of the record): the failed pod is cleaned up per ``delete_worker_pods*``, nothing is reported to the scheduler, and the
        relaunch is logged at WARNING in the scheduler and task logs and listed in the status file as
        ``state``. ``explain(delay, count)`` words it."""
        backoff = record.relaunch_backoff or Backoff(
            initial_seconds=RELAUNCH_BACKOFF_INITIAL_SECONDS,
            max_seconds=RELAUNCH_BACKOFF_MAX_SECONDS,
            reset_after_seconds=float("inf"),
        )
        now = time.monotonic()
        delay = backoff.failure(now)
        ref = (result.namespace, result.name)
        # The ended pod is labelled done at once (no adoption takes it for the launch's current pod), and kept
        # until the task leaves this executor: while it exists its name is taken, so an adopter that finds no
        # live pod of the launch and creates it from the first name on is answered 409 there and moves to the
        # next name, the one this relaunch creates, instead of making a second pod. One that could still
        # start is stopped (not deleted) once the launch's next pod exists; each is deleted at the end where
        # delete_worker_pods* say so.
        delete = self._deletes(result)
        self.records.relaunch(
            record.key,
            ref,
            what,
            backoff,
            now + delay,
            launch_failure=launch_failure,
            failure=_failed_info(result),
            keep=self._may_start(result) if delete else None,
            delete=self._deletes_failed_pods(),
        )
        count = len(record.launch_failures if launch_failure else record.disruptions)
        message = explain(delay, count)
        self.log.warning("Task %s: %s", record.key, message)
        self._append_task_log(record.workload, record.key, message, level="warning")
        self._report(
            record.key, pod=f"{result.namespace}/{result.name}", state=state, reason=result.reason, gap=False
        )
        # As upstream in the end: the failed pod is deleted or kept (labelled done) per delete_worker_pods*,
        # so that delete_worker_pods_on_failure = False keeps it for inspection; a pod that failed while
        # still Pending (it could yet start) is stopped once its replacement exists.
        if delete is not None:
            self._cleanup.append((result.namespace, result.name, False))

    def _stale_pod_ended(self, key: TaskInstanceKey, result: PodResult) -> None:
        """A pod of an earlier launch of ``key`` ended: clean it up as any finished pod, report nothing.

        Reporting it would hand the scheduler an end that belongs to no launch it waits for: with the
        task instance queued again (same try), Airflow's ``process_executor_events`` would fail it as
        "finished although the task says it's queued", and the key would leave ``running`` while its
        current pod still launches.
        """
        ref = (result.namespace, result.name)
        owner = self.records.stale_ended(ref)
        current = self.records.get(key)
        if self.records.keeps(key, ref):
            # A replaced pod that was stopped ends again (DeadlineExceeded): its record keeps it, name and all,
            # until the key leaves this executor, and releases it then.
            return
        self._counters["stale_pods_cleaned"] += 1
        metrics.stale_launch_pod()
        self.log.info(
            "Pod %s/%s of an earlier launch (%s) of %s ended (%s%s); not reported, as the current launch "
            "of that key is %s. Cleaning it up.",
            *ref,
            owner[1] if owner else "unknown",
            key,
            result.phase,
            f", {result.reason}" if result.reason else "",
            current.launch_id if current is not None else "none here (revoked, finished or not adopted)",
        )
        self._clean_up_finished(result)


def _failed_info(result: PodResult) -> str:
    """What a failed pod's task fails with: the pod, then what ended it in the task's words (the cluster ended
    it: said first), then the reason and the details."""
    where = f"pod {result.namespace}/{result.name}"
    reason = result.reason or "Failed"
    if result.disruption:
        return f"{where} was {result.disruption}; the task did not end by itself. {reason}: {result.message}"
    return f"{where} failed: {reason}: {result.message}".rstrip(": ")


@dataclass(frozen=True)
class TaskInstanceRow:
    """What Airflow's database holds for a task instance: the fields that say which launch is current."""

    state: str | None
    try_number: int
    queued_by_job_id: str | None
    external_executor_id: str | None


def task_instance_rows(
    keys: list[TaskInstanceKey], *, skip_locked: bool = False
) -> dict[TaskInstanceKey, TaskInstanceRow]:
    """For each key whose task instance is in Airflow's database (on any try), its row. One query.

    ``skip_locked``: read with ``FOR SHARE SKIP LOCKED`` where the database has row locks (PostgreSQL, MySQL
    8): a row that another transaction holds for update (a scheduler adopting it, with Airflow's ``FOR UPDATE
    SKIP LOCKED``) is left out instead of read as it was before that transaction.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.sqlalchemy import with_row_locks
    from sqlalchemy import select

    condition = TaskInstance.filter_for_tis(keys)
    if condition is None:
        return {}
    by_primary = {(k.dag_id, k.task_id, k.run_id, k.map_index): k for k in keys}
    out: dict[TaskInstanceKey, TaskInstanceRow] = {}
    # Not the scheduler's scoped session: this may run inside one of its transactions.
    with create_session(scoped=False) as session:
        query = select(
            TaskInstance.dag_id,
            TaskInstance.task_id,
            TaskInstance.run_id,
            TaskInstance.map_index,
            TaskInstance.try_number,
            TaskInstance.state,
            TaskInstance.queued_by_job_id,
            TaskInstance.external_executor_id,
        ).where(condition)
        if skip_locked:
            query = with_row_locks(query, session, skip_locked=True, key_share=False, read=True)
        rows = session.execute(query).all()
    for dag_id, task_id, run_id, map_index, try_number, state, queued_by, launch in rows:
        key = by_primary.get((dag_id, task_id, run_id, map_index))
        if key is not None:
            out[key] = TaskInstanceRow(
                state=getattr(state, "value", state),
                try_number=try_number,
                queued_by_job_id=None if queued_by is None else str(queued_by),
                external_executor_id=launch,
            )
    return out


def queued_on_try(
    launches: Mapping[TaskInstanceKey, str], pre_assigned: frozenset[TaskInstanceKey] = frozenset()
) -> dict[TaskInstanceKey, bool | str | None]:
    """For each key (mapped to the launch id this executor holds for it): what Airflow's database says of that
    launch, in one query. True: the task instance is QUEUED on the key's try **and** names that launch (its
    task never ran). False: it is on another try, or names that launch and is not QUEUED (it ran).
    :data:`SUPERSEDED`: it is on the same try and names another launch, and the id was pre-assigned by the
    scheduler (``pre_assigned``), so the key was queued again after this launch. None (or no entry): unknown;
    without a pre-assigned id the row names an earlier launch until the scheduler has read this executor's
    event naming the new one."""
    rows = task_instance_rows(list(launches))
    return {
        key: launch_verdict(
            row, try_number=key.try_number, launch_id=launches[key], pre_assigned=key in pre_assigned
        )
        for key, row in rows.items()
    }


def launches_held(
    launches: Mapping[TaskInstanceKey, tuple[str, bool, bool]], scheduler_job_id: str
) -> dict[TaskInstanceKey, bool | str | None]:
    """For each key, mapped to (the launch id this executor holds for it, whether the scheduler pre-assigned
    that id, whether a create of its pod may already have been sent): what Airflow's database says of that
    launch (:func:`~airflow_jobwatch.executors.record.launch_held`), in one query for all.

    The rows are read ``FOR SHARE SKIP LOCKED``: a row another scheduler is adopting right now (Airflow holds
    it ``FOR UPDATE`` from its read to its commit, across the adopter's pod list) is not read as this
    scheduler's from before that adoption. Such a key is None: unknown this heartbeat, neither created nor
    dropped; the next heartbeat reads the committed row. A second, plain read tells a locked row from one
    that is gone (not held).
    """
    keys = list(launches)
    rows = task_instance_rows(keys, skip_locked=True)
    left_out = [key for key in keys if key not in rows]
    locked = set(task_instance_rows(left_out)) if left_out else set()
    return {
        key: None
        if key in locked
        else launch_held(
            rows.get(key),
            try_number=key.try_number,
            scheduler_job_id=scheduler_job_id,
            launch_id=launch_id,
            pre_assigned=pre_assigned,
            sent=sent,
        )
        for key, (launch_id, pre_assigned, sent) in launches.items()
    }

"""Adoption by JobWatchExecutor of gone schedulers' pods, and the cleanup of their finished pods."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf

from airflow_jobwatch.executors.base import _explain, _getfloat
from airflow_jobwatch.executors.pods import (
    DONE_LABEL,
    JOBWATCH_LABELS,
    LAUNCH_ANNOTATION,
    UPSTREAM_LABELS,
    key_from_annotations,
    launch_id_of,
)
from airflow_jobwatch.executors.record import LAUNCH, adoption_verdict
from airflow_jobwatch.executors.results import Results
from airflow_jobwatch.executors.watcher import PodResult
from airflow_jobwatch.kube.backoff import Backoff

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey

# A gone scheduler's finished pod is cleaned up only once it finished longer ago than the time a live
# scheduler may take to adopt that scheduler's task instances: [scheduler] scheduler_health_check_threshold
# (until it counts as dead) + orphaned_tasks_check_interval (until the next adoption round) + this margin,
# for clock skew between the nodes (the pod's finishedAt) and the scheduler, and loop lag. Before that,
# its task instance may still be queued/running in the database, waiting for an adopter that must find
# the pod to report its end; deleting it would get the task reset and run again.
COMPLETED_POD_GRACE_MARGIN_SECONDS = 60.0

# A task instance adopted unresolved (its gone scheduler's pods could not all be listed) is looked for again
# after this backoff (doubling, with jitter, up to the maximum): an API server or RBAC problem is rarely fixed
# within seconds, and each attempt costs a list per namespace.
ADOPTION_RETRY_INITIAL_SECONDS = 5.0
ADOPTION_RETRY_MAX_SECONDS = 120.0


class _Where:
    """Where one adoption round may list: whether the list across all namespaces was refused."""

    cluster_refused = False


@dataclass
class _Unresolved:
    """A task instance adopted while its scheduler's pods could not all be listed: what its row said."""

    key: Any
    queued_by_job_id: Any  # the gone scheduler's job id: its pods still carry that label
    external_executor_id: str | None
    state: str | None
    executor_config: Any
    workload: Any  # rebuilt while the row was at hand (QUEUED only), to launch it if no pod exists
    backoff: Backoff
    not_before: float = 0.0


class Adoption(Results):
    """Adopting the pods of schedulers that are gone, and cleaning up the finished pods they left."""

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        """Adopt the worker pods of dead schedulers: relabel them and watch them as our own.

        Pods that finished while no scheduler watched them are reported at once (the task instance
        is still queued/running in the database, so its end was never reported). A task instance whose
        scheduler's pods could not all be listed is adopted unresolved: neither handed back for reset
        nor launched, and looked for again with backoff (:meth:`_retry_unresolved`).
        """
        by_key = {ti.key: ti for ti in tis if ti.queued_by_job_id}
        not_adopted = [ti for ti in tis if not ti.queued_by_job_id]
        for key in self._adopt(by_key):
            self._keep_unresolved(by_key.pop(key))
        # Upstream cleans up the finished pods of gone schedulers here too (_adopt_completed_pods).
        self._cleanup_completed_pods()
        self._retry_cleanup()
        # Already adopted by a previous (retried) call: do not hand them back for reset.
        not_adopted.extend(ti for key, ti in by_key.items() if key not in self.running)
        return not_adopted

    def _adopt(self, by_key: dict[TaskInstanceKey, Any]) -> set[TaskInstanceKey]:
        """Adopt the pods of the task instances in ``by_key`` (each queued by a gone scheduler), launch the
        QUEUED ones that have no pod of their current launch. Removes from ``by_key`` every task instance
        adopted or launched; returns the keys whose scheduler's pods could not all be listed (unknown: the
        caller must act on none of them)."""
        from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

        from airflow_jobwatch.kube.states import classify_pod

        assert self.supervisor is not None and self.scheduler_job_id is not None
        my_label = make_safe_label_value(self.scheduler_job_id)
        other = JOBWATCH_LABELS if self.labels == UPSTREAM_LABELS else UPSTREAM_LABELS
        # Our labels now, then the other scheme's: a pod launched before a switch of executor (or of
        # worker_pod_labels) is adopted all the same and relabelled to ours.
        relabel: dict[str, str | None] = {
            self.labels.worker: my_label,
            self.labels.executor: "True",
            other.worker: None,
            other.executor: None,
        }
        # A launch of these keys that this executor still holds without a pod (its create pending, from before
        # this scheduler was itself taken for dead and the task adopted elsewhere) is stale knowledge: the
        # database's queued_by_job_id and external_executor_id would name it again once adopted here, so the
        # fencing check would pass for it beside the pod another scheduler made. Dropped; one whose create
        # is in flight may have made a pod: unknown this round.
        in_flight: set[TaskInstanceKey] = set()
        for orphan_key in list(by_key):
            held = self.records.get(orphan_key)
            if held is None or held.pod is not None:
                continue
            if orphan_key in self._inflight:
                in_flight.add(orphan_key)
                continue
            self._building.discard(orphan_key)
            if held.create is not None and held.create.ref is not None:
                self.supervisor.untrack(*held.create.ref)
            self.records.end(orphan_key)
            self._settle(orphan_key)
            self.log.info(
                "%s is adopted from scheduler job %s: this scheduler's own pending launch %s of it is dropped",
                orphan_key,
                by_key[orphan_key].queued_by_job_id,
                held.launch_id,
            )
        # Every worker pod of each label scheme, not only those labelled with the gone schedulers' job ids: a
        # task instance adopted unresolved by a scheduler that died in turn is queued by that scheduler, while
        # its pods still carry the label of the one before (nobody could relabel what nobody could list).
        gone = {make_safe_label_value(str(ti.queued_by_job_id)) for ti in by_key.values()}
        candidates: dict[TaskInstanceKey, list[tuple[str, dict[str, Any]]]] = {}
        seen: set[tuple[str, str]] = set()
        complete = True
        where = _Where()
        for scheme in (self.labels, other):
            try:
                pods = self._list_everywhere(
                    f"{scheme.executor}=True,{DONE_LABEL}!=True", list(by_key.values()), where
                )
            except Exception as err:
                complete = False
                self.log.warning(
                    "Could not list every worker pod for adoption (%s); the task instances of scheduler job(s) "
                    "%s stay adopted here, unresolved, and are looked for again: none is reset or launched on "
                    "a partial list",
                    _explain(err, verb="list", resource="pods", namespace=None),
                    ", ".join(sorted(gone)),
                )
                break
            for pod in pods:
                meta = pod.get("metadata") or {}
                key = key_from_annotations(meta.get("annotations") or {})
                ns, name = meta["namespace"], meta["name"]
                label = str((meta.get("labels") or {}).get(scheme.worker))
                if (ns, name) in seen:
                    continue
                seen.add((ns, name))
                if key is not None and key in by_key:
                    candidates.setdefault(key, []).append((label, pod))
                    continue
                if scheme != self.labels or label not in gone:
                    continue  # not one of these task instances, and not a gone scheduler's pod to clean up
                # A finished pod of a dead scheduler whose task instance is not orphaned (its end is already
                # recorded): nobody else will ever clean it up.
                finished = classify_pod(pod) if key is not None else None
                # (Another live scheduler may be adopting its task instance right now: wait as above.)
                if finished is not None and finished.terminal and not self._adoption_may_still_need(pod):
                    failed = finished.phase == "failed"
                    kc = self.kube_config
                    delete = kc.delete_worker_pods and (not failed or kc.delete_worker_pods_on_failure)
                    self._cleanup.append((ns, name, delete))
        unknown = in_flight if complete else set(by_key)
        for key, pods_of_key in candidates.items():
            if key not in unknown and not self._adopt_pods_of_key(key, pods_of_key, relabel, by_key):
                unknown.add(key)
        # "No pod" rests on a list of every namespace a launch of that scheduler could have used: only then
        # is a QUEUED task instance launched here.
        for key, ti in list(by_key.items()):
            state = getattr(ti, "state", None)
            verdict = adoption_verdict(
                complete=key not in unknown,
                current_pod=key in self.running,  # adopted above, or this executor holds it itself
                state=getattr(state, "value", state),
            )
            if verdict == LAUNCH and self._launch_queued_orphan(ti):
                by_key.pop(key)
            # RESET: left in by_key (handed back); UNRESOLVED: the caller keeps it; ADOPT: done above.
        return unknown

    def _list_everywhere(self, label_selector: str, tis: list[Any], where: _Where) -> list[dict[str, Any]]:
        """Every pod matching ``label_selector`` in every namespace a launch of ``tis`` could have used, or
        an exception: never a partial answer.

        One list across all namespaces when RBAC allows it (a ``pod_override``, a ``pod_mutation_hook`` or
        a template may have put a pod anywhere). Refused (401/403), the configured namespaces, those
        watched here, and each task instance's own: the namespace its ``pod_override`` names and the one
        its pod is built in today (template, override and hook).
        """
        from kubernetes.client.exceptions import ApiException

        if not where.cluster_refused:
            try:
                return self._list_pods(label_selector, namespaces=[None])
            except ApiException as err:
                if err.status not in (401, 403):
                    raise
                where.cluster_refused = True
                self.log.info(
                    "Listing worker pods across all namespaces is not allowed (%s %s); adoption lists the "
                    "configured namespaces and those each task instance's pod can be built in",
                    err.status,
                    err.reason,
                )
        namespaces: set[str | None] = set(self._namespaces())
        if self.supervisor is not None:
            namespaces.update(self.supervisor.namespaces())
        if None in namespaces:
            raise RuntimeError(
                "a list across all namespaces is needed ([kubernetes_executor] multi_namespace_mode)"
            )
        for ti in tis:
            namespaces.update(self._launch_namespaces(ti))
        return self._list_pods(label_selector, namespaces=sorted(namespaces, key=str))

    def _launch_namespaces(self, ti: Any) -> set[str]:
        """The namespaces a launch of ``ti`` may have used besides the configured ones: the one its
        ``pod_override`` names, and the one its pod is built in now (template, override, mutation hook)."""
        out: set[str] = set()
        try:
            override = (getattr(ti, "executor_config", None) or {}).get("pod_override")
            meta = getattr(override, "metadata", None)
            ns = getattr(meta, "namespace", None) if meta is not None else None
            if ns is None and isinstance(override, dict):
                ns = (override.get("metadata") or {}).get("namespace")
            if ns:
                out.add(str(ns))
        except Exception as err:
            self.log.debug("Could not read the executor_config of %s: %s", ti.key, err)
        workload = self._workload_of(ti)
        if workload is not None and self._pod_builder is not None:
            try:
                body = self._pod_builder.body(workload, pod_name="adoption-probe", launch_id="adoption-probe")
                out.add(str(body["metadata"]["namespace"]))
            except Exception as err:
                self.log.debug("Could not build the pod of %s to find its namespace: %s", ti.key, err)
        return out

    def _workload_of(self, ti: Any) -> Any:
        """The ExecuteTask of ``ti``, rebuilt from its row as the scheduler builds it (None if it cannot be)."""
        if isinstance(ti, _Unresolved):
            return ti.workload
        try:
            from airflow.executors.workloads import ExecuteTask

            return ExecuteTask.make(ti, generator=self.jwt_generator)
        except Exception as err:
            self.log.debug("Could not rebuild the workload of %s (%s: %s)", ti.key, type(err).__name__, err)
            return None

    def _keep_unresolved(self, ti: Any) -> None:
        """Keep a task instance adopted but unresolved: its row is read again before it is acted on."""
        if isinstance(ti, _Unresolved):
            entry = ti
        else:
            state = getattr(ti, "state", None)
            entry = _Unresolved(
                key=ti.key,
                queued_by_job_id=ti.queued_by_job_id,
                external_executor_id=getattr(ti, "external_executor_id", None),
                state=getattr(state, "value", state),
                executor_config=getattr(ti, "executor_config", None),
                workload=self._workload_of(ti) if getattr(state, "value", state) == "queued" else None,
                backoff=Backoff(
                    initial_seconds=ADOPTION_RETRY_INITIAL_SECONDS,
                    max_seconds=ADOPTION_RETRY_MAX_SECONDS,
                    reset_after_seconds=float("inf"),
                ),
            )
        now = time.monotonic()
        entry.not_before = now + entry.backoff.failure(now)
        self._unresolved[entry.key] = entry

    def _retry_unresolved(self) -> None:
        """Look again for the pods of task instances adopted unresolved, once their backoff has passed.

        Each is first read again from Airflow's database (one query for all): one that this scheduler no
        longer holds (queued by another, queued again under another launch, reset, finished) is dropped
        without acting. The others are adopted as at adoption time; the rows that still cannot be resolved
        back off again.
        """
        now = time.monotonic()
        due = {key: entry for key, entry in self._unresolved.items() if entry.not_before <= now}
        if not due:
            return
        from airflow_jobwatch.executors import results

        try:
            rows = results.task_instance_rows(list(due))
        except Exception as err:
            self.log.warning("Could not read the unresolved adopted task instances (%s); retrying later", err)
            for entry in due.values():
                self._keep_unresolved(entry)
            return
        for key, entry in list(due.items()):
            row = rows.get(key)
            held = (
                row is not None
                and row.try_number == key.try_number
                and str(row.queued_by_job_id) == self.scheduler_job_id
                and row.external_executor_id == entry.external_executor_id
                and row.state in ("queued", "running")
            )
            if not held:
                del self._unresolved[key]
                due.pop(key)
                self.log.info(
                    "%s, adopted unresolved, is no longer this scheduler's launch %s (now %s); dropped",
                    key,
                    entry.external_executor_id,
                    "gone"
                    if row is None
                    else f"{row.state}, queued by {row.queued_by_job_id}, launch {row.external_executor_id}",
                )
                continue
            assert row is not None
            entry.state = row.state
        if not due:
            return
        by_key: dict[TaskInstanceKey, Any] = dict(due)
        unknown = self._adopt(by_key)
        for key, entry in due.items():
            if key in unknown:
                self._keep_unresolved(entry)
                continue
            del self._unresolved[key]
            if key in by_key and key not in self.running:
                # Listed everywhere: no pod of its current launch exists. It can no longer be handed back
                # for reset; a RUNNING one has lost its worker and is failed by Airflow's task heartbeat
                # timeout, a QUEUED one whose workload could not be rebuilt by [scheduler] task_queued_timeout.
                self.log.warning(
                    "%s (%s) has no pod of its launch %s in any namespace; left to Airflow's timeouts",
                    key,
                    entry.state,
                    entry.external_executor_id,
                )

    def _adopt_pods_of_key(
        self,
        key: TaskInstanceKey,
        pods: list[tuple[str, dict[str, Any]]],
        relabel: dict[str, str | None],
        by_key: dict[TaskInstanceKey, TaskInstance],
    ) -> bool:
        """Adopt a dead scheduler's pods of one orphaned task instance key: relabel, track, report ends.
        False if the pod of its current launch could not be taken over (its relabel failed): unknown.

        A key may have several pods: the dead scheduler launched it again (resumed after deferral, same
        try) while the pod of the earlier launch was still ending. Which one is current is what Airflow's
        database says: the task instance's ``external_executor_id`` names its current launch, and each pod
        carries its launch's id. The newest pod with that id is current; any other is an earlier launch's,
        adopted only to be cleaned up when it ends, and never reported. No pod with that id (the scheduler
        stopped before creating it): no pod is adopted as current, and a QUEUED task instance is launched
        here (:meth:`_launch_queued_orphan`). Without an id in the database (older Airflow, or a task queued before it was
        recorded), the newest pod is current. If this executor holds the key's current launch itself,
        every adopted pod is an earlier one. A pod that has already ended is handed to :meth:`_on_result`.
        """
        from airflow_jobwatch.kube.states import classify_pod

        assert self.supervisor is not None

        def created(item: tuple[str, dict[str, Any]]) -> tuple[str, str]:
            meta = item[1].get("metadata") or {}
            return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))

        def launch_of(pod: dict[str, Any]) -> str:
            meta = pod.get("metadata") or {}
            return launch_id_of(meta.get("annotations") or {}, meta["namespace"], meta["name"])

        pods = sorted(pods, key=created)  # RFC 3339 UTC timestamps sort as strings; newest last
        expected = getattr(by_key[key], "external_executor_id", None) or None
        mine = self.records.get(key)
        if mine is not None and (expected is None or mine.launch_id == expected):
            current_name = None  # this executor holds the current launch itself
        else:
            if mine is not None:
                # This executor's launch is not the one the database names (the task was queued again
                # elsewhere): it is an earlier launch here; its pod is cleaned up when it ends.
                self.records.end(key)
                self._settle(key)
            # Pods launched by upstream's executor carry no launch id (and upstream stores its scheduler's
            # job id as external_executor_id): without any annotated pod, the newest pod is current.
            annotated = any(
                LAUNCH_ANNOTATION in ((p.get("metadata") or {}).get("annotations") or {}) for _, p in pods
            )
            matching = [
                p
                for _, p in pods
                if expected is None
                or not annotated
                or launch_of(p) == expected
                # a pod whose running event stored "namespace/name" (launched by an earlier version)
                or f"{p['metadata']['namespace']}/{p['metadata']['name']}" == expected
            ]
            current_name = (matching[-1].get("metadata") or {}).get("name") if matching else None
            if current_name is None:
                self.log.warning(
                    "No pod of %s belongs to its current launch %s (the scheduler that queued it stopped "
                    "before creating it); its earlier launches' pods are cleaned up when they end",
                    key,
                    expected,
                )
        resolved = True
        for job_id, pod in pods:
            meta = pod.get("metadata") or {}
            ns, name = meta["namespace"], meta["name"]
            annotations = meta.get("annotations") or {}
            held = self.records.get(key)
            if held is not None and (ns, name) in (held.pod, held.create.ref if held.create else None):
                continue  # this executor's own pod of the launch it holds
            try:
                self.core_v1.patch_namespaced_pod(
                    name,
                    ns,
                    {"metadata": {"labels": relabel}},
                    _request_timeout=self._request_timeout,
                )
            except Exception as err:
                self.log.warning("Could not adopt pod %s/%s: %s", ns, name, err)
                if name == current_name:
                    resolved = False  # its current launch's pod exists: never reset or launched beside it
                continue
            launch_id = launch_of(pod)
            current = name == current_name
            if not self.supervisor.watches(ns):
                # A pod_override's namespace that this process has not launched in: watched from now on, so
                # that the pod's end (current launch or earlier) is seen and it is cleaned up.
                self.supervisor.add_namespace(ns)
            self.records.adopt(key, (ns, name), launch_id, current=current)
            self.supervisor.track(ns, name, key)
            if current:
                by_key.pop(key, None)
                self._settle(key)
                self._counters["adopted"] += 1
                self.log.info("Adopted pod %s/%s of %s from scheduler job %s", ns, name, key, job_id)
            else:
                self.log.info(
                    "Adopted pod %s/%s of an earlier launch of %s from scheduler job %s: it is cleaned up "
                    "when it ends, and its end is not reported",
                    ns,
                    name,
                    key,
                    job_id,
                )
            state = classify_pod(pod, fatal_waiting_reasons=self.fatal_waiting_reasons)
            if state.terminal:
                self.supervisor.untrack(ns, name)
                self._on_result(
                    PodResult(
                        key=key,
                        namespace=ns,
                        name=name,
                        phase=state.phase,
                        terminal=True,
                        reason=state.reason,
                        message=state.message,
                        exit_code=state.exit_code,
                        annotations=annotations,
                        observed_at=time.time(),
                    )
                )
        return resolved

    def _launch_queued_orphan(self, ti: TaskInstance) -> bool:
        """Adopt a QUEUED task instance that has no pod of its current launch by launching it here.

        Its scheduler stopped before the pod existed (a create still refused by a quota, a crash, an
        ``end()`` with creates pending). Handed back, Airflow would reset it: a second try, and a task
        resuming after deferral would lose its resume and start over. Launched here instead, it runs on
        the try the database holds, and its pod carries the launch id the database names, so a later
        adopter tells it from any earlier launch's pod. A RUNNING task instance with no pod has lost its
        worker and is handed back. False when the workload cannot be rebuilt (the task instance is then
        reset, as before).
        """
        state = getattr(ti, "state", None)
        if getattr(state, "value", state) != "queued":
            return False
        if isinstance(ti, _Unresolved):
            workload = ti.workload
            if workload is None:
                return False
        else:
            try:
                from airflow.executors.workloads import ExecuteTask

                workload = ExecuteTask.make(ti, generator=self.jwt_generator)
            except Exception as err:
                self.log.warning(
                    "Could not rebuild the workload of %s to launch it here (%s: %s); it is left to be reset",
                    ti.key,
                    type(err).__name__,
                    err,
                )
                return False
        self.queued_tasks[ti.key] = workload
        self._process_workloads([workload])
        self._counters["adopted"] += 1
        self.log.warning(
            "Adopted %s, queued by scheduler job %s that stopped before creating its pod (launch %s): "
            "launching it here on the same try",
            ti.key,
            ti.queued_by_job_id,
            getattr(ti, "external_executor_id", None),
        )
        return True

    def _alive_other_scheduler_job_ids(self) -> set[str]:
        """Ids of the other scheduler jobs that are running and heartbeating (none if the DB can't say)."""
        try:
            from datetime import UTC, datetime, timedelta

            from airflow.jobs.job import Job
            from airflow.utils.session import create_session
            from airflow.utils.state import JobState
            from sqlalchemy import select

            threshold = conf.getint("scheduler", "scheduler_health_check_threshold", fallback=30)
            cutoff = datetime.now(UTC) - timedelta(seconds=threshold)
            # Not the scheduler's scoped session: this may run inside its adoption transaction.
            with create_session(scoped=False) as session:
                return {
                    str(jid)
                    for jid in session.scalars(
                        select(Job.id).where(
                            Job.job_type == "SchedulerJob",
                            Job.state == JobState.RUNNING,
                            Job.latest_heartbeat >= cutoff,
                        )
                    )
                    if str(jid) != self.scheduler_job_id
                }
        except Exception as err:
            self.log.debug("Could not read the alive scheduler jobs (%s); excluding only this one", err)
            return set()

    def _cleanup_completed_pods(self) -> None:
        """Find and clean up at once (adoption calls this); ``sync()`` does the search in a thread."""
        try:
            pods = self._find_completed_pods()
        except Exception as err:
            self.log.warning("Could not list finished worker pods of gone schedulers: %s", err)
            return
        self._queue_completed_cleanup(pods)

    def _find_completed_pods(self) -> list[dict[str, Any]]:
        """Clean up the Succeeded worker pods that schedulers which are gone left behind.

        Upstream's ``_adopt_completed_pods``, with the same selection: ``Succeeded`` pods with
        ``kubernetes_executor=True``, not marked done, whose ``airflow-worker`` is neither this
        scheduler nor a live one (so HA schedulers do not fight over each other's pods). Upstream
        relabels them so that its watcher deletes them; here they are deleted (or, with
        ``delete_worker_pods = False``, labelled done) directly. Their task instances need no event:
        a Succeeded worker pod means the task already recorded its own end through the execution API
        (an orphaned one is handed to :meth:`try_adopt_task_instances` by the scheduler).
        Failed pods are kept for inspection, as upstream keeps them.
        """
        from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

        assert self.scheduler_job_id is not None
        excluded = sorted(
            {
                make_safe_label_value(j)
                for j in {self.scheduler_job_id, *self._alive_other_scheduler_job_ids()}
            }
        )
        scheme = self.labels
        selector = f"{scheme.executor}=True,{scheme.worker} notin ({','.join(excluded)}),{DONE_LABEL}!=True"
        return self._list_pods(selector, field_selector="status.phase=Succeeded")

    def _adoption_may_still_need(self, pod: dict[str, Any]) -> bool:
        """Whether a gone scheduler's finished pod may still be needed by a live scheduler's adoption.

        Its task instance may still be queued/running in the database (the worker exited without
        recording an end, or the scheduler died before reading it): then some live scheduler adopts it
        within ``scheduler_health_check_threshold`` + ``orphaned_tasks_check_interval`` of the dead
        scheduler's last heartbeat, which was no later than shortly after the pod finished. Until that
        has passed (plus ``COMPLETED_POD_GRACE_MARGIN_SECONDS``), the pod is left where the adopter
        looks for it. A pod with no completion time is not held back.
        """
        from datetime import UTC, datetime

        from airflow_jobwatch.cli.cleanup import completion_time

        finished = completion_time(pod)
        if finished is None:
            return False
        if finished.tzinfo is None:
            finished = finished.replace(tzinfo=UTC)
        grace = (
            _getfloat("scheduler", "scheduler_health_check_threshold", 30.0)
            + _getfloat("scheduler", "orphaned_tasks_check_interval", 300.0)
            + COMPLETED_POD_GRACE_MARGIN_SECONDS
        )
        return (datetime.now(UTC) - finished).total_seconds() < grace

    def _queue_completed_cleanup(self, pods: list[dict[str, Any]]) -> None:
        tracked = self.supervisor.tracked() if self.supervisor is not None else {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            ref = (meta.get("namespace", ""), meta.get("name", ""))
            if ref in tracked:
                continue  # adopted by us meanwhile: its report cleans it up
            if self._adoption_may_still_need(pod):
                continue  # a later round cleans it up, if no adopter has taken it by then
            self.log.info(
                "Cleaning up finished pod %s/%s of scheduler job %s, which is gone",
                *ref,
                (meta.get("labels") or {}).get(self.labels.worker),
            )
            self._counters["completed_pods_cleaned"] += 1
            self._cleanup.append((ref[0], ref[1], self.kube_config.delete_worker_pods))

"""Adoption's matching: a gone scheduler's pods to the task instances it left, and what is done with each.

One adoption round lists every worker pod (:mod:`.adoption_listing`), matches them to the orphaned task
instances by the key and the launch id their annotations carry, adopts the pod of each one's current
launch, launches here the QUEUED ones that have none, and leaves the unknown ones to the caller.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow_jobwatch.executors.adoption_listing import AdoptionListing, Unresolved, Where
from airflow_jobwatch.executors.base import explain
from airflow_jobwatch.executors.pods import (
    DONE_LABEL,
    JOBWATCH_LABELS,
    LAUNCH_ANNOTATION,
    UPSTREAM_LABELS,
    key_from_annotations,
    launch_id_of,
)
from airflow_jobwatch.executors.record import LAUNCH, adoption_verdict
from airflow_jobwatch.executors.watcher import PodResult

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey


class AdoptionMatching(AdoptionListing):
    """Matching a gone scheduler's pods to its orphaned task instances: adopt, launch, or leave unknown."""

    def _adopt(self, by_key: dict[TaskInstanceKey, Any]) -> set[TaskInstanceKey]:
        """Adopt the pods of the task instances in ``by_key`` (each queued by a gone scheduler), launch the
        QUEUED ones that have no pod of their current launch. Removes from ``by_key`` every task instance
        adopted or launched; returns the keys whose scheduler's pods could not all be listed (unknown: the
        caller must act on none of them)."""
        from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

        from airflow_jobwatch.kube.meaning.states import classify_pod

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
        where = Where()
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
                    explain(err, verb="list", resource="pods", namespace=None),
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
        from airflow_jobwatch.kube.meaning.states import classify_pod

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
        if isinstance(ti, Unresolved):
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
        row_launch = getattr(ti, "external_executor_id", None)
        if row_launch and not getattr(workload.ti, "external_executor_id", None):
            # Airflow 3.1, 3.2.0, 3.2.1: the workload carries no id, but the row names the launch its scheduler
            # reported. Launched under that id, the pod gets the name the late scheduler's create would have:
            # whichever comes second is answered 409.
            self._adopted_launch_ids[ti.key] = str(row_launch)
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

"""Creating worker pods: the launch queue of JobWatchExecutor."""

from __future__ import annotations

import re
import time
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.base import ExecutorBase, api_message, explain
from airflow_jobwatch.executors.pods import (
    DONE_LABEL,
    key_from_annotations,
    launch_id_of,
    launch_pod_name,
)
from airflow_jobwatch.executors.record import RAN, UNNAMED, PendingCreate, TaskRecord
from airflow_jobwatch.kube.engine.backoff import Backoff, parse_retry_after

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey

# Pod creation retries (403 quota, 409 conflict, 429, 5xx, connection errors): first delay, and
# the bound of the exponential backoff. A task waiting here stays queued; the scheduler's
# [scheduler] task_queued_timeout (600 s by default) is the final bound: it revokes the task.
CREATE_BACKOFF_INITIAL_SECONDS = 1.0
CREATE_BACKOFF_MAX_SECONDS = 60.0

# A launch whose id the database does not name yet (Airflow without pre-assigned ids) reports its id again after
# this many reads that found it unnamed: the scheduler stores a report in the loop after it is made, so more
# than one such read means that report was lost (its row was locked when the scheduler wrote it) or
# overwritten (a late scheduler's report of its own launch, after this scheduler adopted the task).
UNNAMED_REPORT_AGAIN_AFTER_READS = 3


class _Conflict(Exception):
    """A create answered 409 AlreadyExists; ``verdict`` is what the existing pod turned out to be: ``ours``
    (this launch's pod, created by an earlier attempt or by another scheduler), ``finished`` (a pod of this
    launch that already failed: the launch's next pod is due), ``not_held`` (this launch's pod, but the
    launch is no longer this scheduler's), ``someone_else`` (not this launch's pod) or ``retry`` (could not
    tell)."""

    def __init__(self, verdict: str, error: str, *, may_start: bool = False) -> None:
        super().__init__(f"{verdict}: {error}")
        self.verdict = verdict
        self.error = error
        # ``finished``: the pod is still Pending (labelled done), so it could yet start.
        self.may_start = may_start


class LaunchQueue(ExecutorBase):
    """The launch queue: builds each pending launch's pod and creates it from the API threads, retrying
    quota, 409, 429, 5xx and connection errors with backoff while the task stays queued."""

    def _launch_pending(self) -> None:
        """Hand pending workloads' creates to the creator threads; handle the answers that came back.

        The creates themselves run in a small thread pool (``[jobwatch] pod_creation_concurrency``), so a
        slow API server (or a create that takes its whole 30 s timeout) never holds the scheduler loop:
        ``sync()`` only builds pods, submits them and reads finished answers.
        """
        keep_going = self._collect_creates()
        now = time.monotonic()
        if not keep_going or now < self._create_paused_until or not self.records.pending_count():
            return
        cap = max(1, self.kube_config.worker_pods_creation_batch_size, self._create_concurrency)
        # First the launches whose pod is being built: a finished build is submitted as a create. Then the
        # launches waiting for a place in the cap, in launch order, until the cap is full: a heartbeat costs
        # the launches it starts, not the thousands that wait behind them.
        building: list[TaskRecord] = []
        for key in list(self._building):
            record = self.records.get(key)
            launch = record.create if record is not None else None
            if record is None or launch is None or launch.build is None:
                self._building.discard(key)  # revoked, queued again or already created meanwhile
                continue
            if launch.build.done():
                building.append(record)
        in_flight = len(self._inflight) + len(self._building)
        due: list[TaskRecord] = []
        for record in self.records.pending():
            if in_flight + len(due) >= cap:
                break
            launch = record.create
            if (
                launch is None
                or launch.build is not None
                or record.key in self._inflight
                or record.key in self._unreported_launches
            ):
                continue
            if launch.not_before <= now:
                due.append(record)
        held = self._fence([*building, *due])
        for record in building:
            if record.key in held and record.create is not None:
                self._start_create(record, record.create)
        for record in due:
            if record.key in held and record.create is not None:
                self._start_create(record, record.create)

    def _report_launch_ids(self) -> None:
        """Report each launch id not yet reported (Airflow 3.1, 3.2.0, 3.2.1, which do not pre-assign one) as a
        queued event, whose info the scheduler stores as the task instance's ``external_executor_id``: how an
        adopter knows the launch, and so the name of its pod. A key with an event still waiting in the buffer
        waits for the scheduler to read it (an event is one per key: a second would replace the first), and
        its pod is not created before its id is reported."""
        from airflow.utils.state import TaskInstanceState

        for key, launch_id in list(self._unreported_launches.items()):
            record = self.records.get(key)
            if record is None or record.launch_id != launch_id:
                del self._unreported_launches[key]  # revoked, ended or queued again meanwhile
            elif key not in self.event_buffer:
                del self._unreported_launches[key]
                self.change_state(key, TaskInstanceState.QUEUED, launch_id, remove_running=False)

    def _fence(self, records: list[TaskRecord]) -> set[TaskInstanceKey]:
        """The keys of ``records`` whose launch this scheduler still holds in Airflow's database: only those
        may be created, retried or relaunched. One query for all of them, per heartbeat.

        A scheduler that was stalled (a long pause, SIGSTOP, a partition) may have been taken for dead: its
        task instances were then adopted by another scheduler (queued_by_job_id) or queued again under another
        launch (external_executor_id). A launch it no longer holds is dropped from its records without any
        call to the cluster and without an event. A database that cannot be read holds every create back
        until it can (the task stays queued; [scheduler] task_queued_timeout is the bound).
        """
        from airflow_jobwatch.executors import results

        if not records:
            return set()
        if self.job_id is None:
            # Not run by a scheduler job (``dag.test(use_executor=True)``): its task instances are queued by no
            # job, so no scheduler can adopt them, and there is nothing to check against.
            return {r.key for r in records}
        assert self.scheduler_job_id is not None
        launches = {
            r.key: (
                r.launch_id,
                getattr(getattr(r.workload, "ti", None), "external_executor_id", None) == r.launch_id,
                r.create is not None and r.create.ref is not None,
            )
            for r in records
        }
        try:
            held = results.launches_held(launches, self.scheduler_job_id)
        except Exception as err:
            self.log.warning(
                "Could not confirm in Airflow's database that %d pending launch(es) are still this "
                "scheduler's (%s: %s); no pod is created until it can be read",
                len(launches),
                type(err).__name__,
                err,
            )
            return set()
        for record in records:
            verdict = held.get(record.key)
            if verdict is True:
                continue
            if verdict is None and record.key in held:
                # Its row is locked by another scheduler's adoption right now: decided next heartbeat.
                self.log.info(
                    "%s: its task instance is being adopted by another scheduler right now; launch %s is "
                    "neither created nor dropped until that adoption ends",
                    record.key,
                    record.launch_id,
                )
                continue
            if verdict == UNNAMED:
                self._await_launch_id(record)
                continue
            if verdict == RAN:
                self._fail_not_queued(record)
            else:
                self._drop_launch(record)
        return {key for key, ok in held.items() if ok is True}

    def _await_launch_id(self, record: TaskRecord) -> None:
        """The launch is this scheduler's but Airflow's database does not name it yet (Airflow 3.1, 3.2.0,
        3.2.1 store the id this executor reports in the scheduler loop after the report): its pod is created
        once the row names it, so that no adopter can read the row in between and launch the task under
        another id. A report that has not arrived after a few reads is made again."""
        launch = record.create
        if launch is None:
            return
        launch.unnamed_reads += 1
        if launch.unnamed_reads % UNNAMED_REPORT_AGAIN_AFTER_READS == 0:
            self._unreported_launches.setdefault(record.key, record.launch_id)

    def _fail_not_queued(self, record: TaskRecord) -> None:
        """A pod not yet sent (a relaunch, or a first create) for a launch whose task instance is no longer
        QUEUED on its try: the task ran (or runs), so no pod is made for it. The task fails with what the
        relaunch stood in for (the disruption's or the launch failure's own words), never silently."""
        why = (
            "Airflow's database shows the task instance is no longer QUEUED on this try (its task ran), so "
            "it is not launched again"
        )
        reason = (
            f"{record.relaunch_failure}. {why}"
            if record.relaunch_failure
            else f"{why}: its pod was never created"
        )
        self._fail_launch(record.key, reason, report_reason="NotRelaunched")

    def _drop_launch(self, record: TaskRecord) -> None:
        """A launch this scheduler no longer holds: forgotten without acting (no create, no event)."""
        assert self.supervisor is not None
        key = record.key
        launch = record.create
        self._building.discard(key)
        if launch is not None and launch.ref is not None and key not in self._inflight:
            self.supervisor.untrack(*launch.ref)
        self.records.end(key)
        self._settle(key)
        self._counters["launches_dropped"] += 1
        self.log.info(
            "%s: launch %s is no longer this scheduler's in Airflow's database (adopted by another "
            "scheduler, queued again under another launch, or reset); dropped without creating its pod",
            key,
            record.launch_id,
        )

    def _start_create(self, record: TaskRecord, launch: PendingCreate) -> bool:
        """Build the pod (once), make sure its namespace is watched, track it, submit its create."""
        assert self.scheduler_job_id is not None and self.supervisor is not None
        key = record.key
        if launch.body is None and launch.build is None:
            # A pod whose shape is already made is a copy with the task's values (well under a millisecond):
            # made here, so that its create is sent in this heartbeat. A full build (template,
            # PodGenerator.construct_pod, pod_mutation_hook, serialization) can cost tens of milliseconds:
            # made in the API threads, so that a burst of open slots does not stretch one heartbeat, and its
            # create is submitted from the heartbeat after the build is done.
            assert self._pod_builder is not None
            # One name per pod of a launch, the same in every scheduler: a second create of it, by this
            # scheduler or by one that adopted the task, is answered 409 by the API server.
            pod_name = launch_pod_name(key, record.launch_id, record.pod_index)
            launch.body = self._pod_builder.ready_body(
                record.workload, pod_name=pod_name, launch_id=record.launch_id
            )
            if launch.body is None:
                launch.build = self._pool().submit(
                    self._pod_builder.body, record.workload, pod_name=pod_name, launch_id=record.launch_id
                )
                self._building.add(key)
                return True
        if launch.body is None:
            assert launch.build is not None
            if not launch.build.done():
                return True
            build, launch.build = launch.build, None
            self._building.discard(key)
            err = build.exception()
            if err is not None:
                self._fail_launch(key, f"could not build the worker pod: {type(err).__name__}: {err}")
                return False
            launch.body = build.result()
        body = launch.body
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if not self._ensure_watched(key, namespace):
            return False
        # Tracked from the moment the create is sent, not when it is answered: if the answer is lost
        # (a timeout on a create the server carried out), the pod's events are still reported, and a
        # short task that ends before the retry is not dropped as "not ours".
        self.supervisor.track(namespace, name, key, confirmed=False)
        self.records.create_sent(key, (namespace, name))
        future = self._pool().submit(self._create_call, key, namespace, name, body)
        self._inflight[key] = (launch, namespace, name, future)
        return True

    def _create_call(self, key: TaskInstanceKey, namespace: str, name: str, body: dict[str, Any]) -> Any:
        """One create, in an API thread. A 409 is looked into here too (a GET, maybe a PATCH), so that
        neither ever runs on the scheduler loop; what it found is raised as a :class:`_Conflict`."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core_v1.create_namespaced_pod(namespace, body, **self._create_args)
        except ApiException as err:
            if err.status != HTTPStatus.CONFLICT:
                raise
            error = f"{err.status} {err.reason}: {api_message(err)}"
        raise self._resolve_conflict(key, namespace, name, error)

    def _collect_creates(self) -> bool:
        """Handle the creates that were answered. Returns False if creation must pause this loop."""
        keep_going = True
        for key, (launch, namespace, name, future) in list(self._inflight.items()):
            if not future.done():
                continue
            del self._inflight[key]
            if future.cancelled():
                # Never sent (the API threads were shut down by end()): the task instance stays queued in
                # the database and the next scheduler finds no pod for it (reset, launched again).
                assert self.supervisor is not None
                self.supervisor.untrack(namespace, name)
                self.records.create_not_sent((namespace, name))
                continue
            record = self.records.get(key)
            if record is None or record.create is not launch:
                # Revoked, or already seen by the watch (launched, maybe even reported) meanwhile.
                if launch.revoked and future.exception() is None:
                    self._cleanup.append((namespace, name, True))
                continue
            keep_going = self._finish_create(key, launch, namespace, name, future.exception()) and keep_going
        return keep_going

    def _finish_create(
        self,
        key: TaskInstanceKey,
        launch: PendingCreate,
        namespace: str,
        name: str,
        error: BaseException | None,
    ) -> bool:
        """The answer to one create. Returns False if pod creation must pause (429, API unreachable)."""
        from kubernetes.client.exceptions import ApiException

        assert self.supervisor is not None
        if error is None:
            self._launched(key, namespace, name)
            return True
        err = error
        if isinstance(err, _Conflict):
            metrics.pod_create_error(HTTPStatus.CONFLICT)
            return self._on_conflict(key, launch, namespace, name, err)
        if isinstance(err, ApiException):
            status = err.status or 0
            metrics.pod_create_error(status)
            message = api_message(err)
            retry_after = _retry_after(err)
            transient = (
                (status == HTTPStatus.FORBIDDEN and "exceeded quota" in message)
                or status == HTTPStatus.TOO_MANY_REQUESTS
                or status >= 500
                or status == 0
            )
            if not transient:
                self.supervisor.untrack(namespace, name)
                self.records.create_not_sent((namespace, name))
                self._fail_launch(
                    key,
                    f"the API server rejected the worker pod {namespace}/{name}: "
                    + explain(err, verb="create", resource="pods", namespace=namespace),
                )
                return True
            self._retry_launch(key, launch, f"{status} {err.reason}: {message}", retry_after)
            if status == HTTPStatus.TOO_MANY_REQUESTS or retry_after is not None:
                self._create_paused_until = max(self._create_paused_until, launch.not_before)
                return False
            return True
        # connection refused/reset, timeouts, TLS: the API is unreachable
        metrics.pod_create_error(0)
        self._retry_launch(key, launch, f"{type(err).__name__}: {err}", None)
        return False  # the next create would fail the same way; wait for the backoff

    def _resolve_conflict(self, key: TaskInstanceKey, namespace: str, name: str, error: str) -> _Conflict:
        """What a 409 AlreadyExists is (runs in an API thread). The name is fixed per pod of a launch, so the
        existing pod is this launch's (an earlier attempt's whose answer was lost, or another scheduler's
        create of the same launch) or a stranger.

        This launch's (its annotations name this key and this launch id) and live -> created; relabelled
        here if another scheduler's label is on it, only after Airflow's database confirms the launch is still
        this scheduler's. This launch's and already failed or marked done -> the launch's next pod is made.
        Anything else -> the task fails saying whose pod holds the name; that pod is left untouched. Unknown
        (the GET, the database or the PATCH failed, or the pod has just gone) -> retried later with backoff.
        """
        assert self.scheduler_job_id is not None
        try:
            pod = self._read_pod(namespace, name)
        except Exception as err:
            return _Conflict("retry", f"{error}; reading the existing pod failed: {err}")
        if pod is None:
            return _Conflict("retry", f"{error}; the existing pod is gone now")
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        record = self.records.get(key)
        launch_id = record.launch_id if record is not None else None
        theirs = launch_id_of(annotations, namespace, name)
        if key_from_annotations(annotations) != key or theirs != launch_id:
            return _Conflict(
                "someone_else",
                f"{error}; it is not the pod of launch {launch_id} of this task instance (it names "
                + (f"launch {theirs} of {key_from_annotations(annotations)}" if annotations else "no task")
                + ")",
            )
        labels = meta.get("labels") or {}
        phase = (pod.get("status") or {}).get("phase")
        if labels.get(DONE_LABEL) == "True" or phase == "Failed":
            return _Conflict(
                "finished",
                f"{error}; that pod of this launch has already ended",
                may_start=phase not in ("Failed", "Succeeded"),
            )
        from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

        mine = make_safe_label_value(self.scheduler_job_id)
        if labels.get(self.labels.worker) != mine:
            # Another scheduler's label: it created this launch's pod (it adopted the task while this
            # scheduler was taken for dead, or this scheduler adopted it back). Taken over only while the
            # database says the launch is this scheduler's; a stale scheduler never relabels the pod away.
            if self.job_id is not None and record is not None:
                from airflow_jobwatch.executors import results

                pre_assigned = getattr(getattr(record.workload, "ti", None), "external_executor_id", None)
                try:
                    held = results.launches_held(
                        {key: (record.launch_id, pre_assigned == record.launch_id, True)},
                        self.scheduler_job_id,
                    ).get(key)
                except Exception as err:
                    return _Conflict("retry", f"{error}; reading Airflow's database failed: {err}")
                if held is None:
                    return _Conflict("retry", f"{error}; its task instance is being adopted right now")
                if held is not True:
                    return _Conflict("not_held", error)
            try:
                self.core_v1.patch_namespaced_pod(
                    name,
                    namespace,
                    {"metadata": {"labels": {self.labels.worker: mine}}},
                    _request_timeout=self._request_timeout,
                )
            except Exception as err:
                return _Conflict("retry", f"{error}; relabelling our pod failed: {err}")
        return _Conflict("ours", error)

    def _on_conflict(
        self, key: TaskInstanceKey, launch: PendingCreate, namespace: str, name: str, conflict: _Conflict
    ) -> bool:
        """Act on what :meth:`_resolve_conflict` found (on the scheduler loop, without an API call)."""
        assert self.supervisor is not None
        if conflict.verdict == "ours":
            # An earlier attempt did create it (its answer was lost): that is a success.
            self._launched(key, namespace, name)
            return True
        if conflict.verdict == "retry":
            self._retry_launch(key, launch, conflict.error, None)
            return True
        self.supervisor.untrack(namespace, name)
        record = self.records.get(key)
        if conflict.verdict == "finished" and record is not None:
            # That pod is kept as the pods this executor replaces itself are (TaskRecord.replaced), so that it
            # is stopped and deleted by whichever scheduler holds the launch now, even if the one that
            # replaced it is gone.
            deletes = self._deletes_failed_pods()
            self.records.name_taken(
                key, keep=conflict.may_start if conflict.may_start or deletes else None, delete=deletes
            )
            self._counters["create_retries"] += 1
            self.log.warning(
                "%s: pod %s/%s of its launch %s has already ended (%s); creating the launch's next pod",
                key,
                namespace,
                name,
                record.launch_id,
                conflict.error,
            )
            return True
        self.records.create_not_sent((namespace, name))
        if conflict.verdict == "not_held" and record is not None:
            self._drop_launch(record)
            return True
        # The name is this launch's and only this launch's: another name would be one that no other
        # scheduler could know, and a second pod of the launch could be created beside it.
        self._fail_launch(
            key,
            f"pod {namespace}/{name}, the name of this launch's pod, is already taken: {conflict.error}. "
            "That pod was left unchanged; delete it if it is not needed, then clear the task",
        )
        return True

    def _ensure_watched(self, key: TaskInstanceKey, namespace: str) -> bool:
        """Make sure a pod in ``namespace`` will be watched, or fail the task at once saying why.

        A ``pod_override`` may put a pod outside the configured namespaces. With an explicit
        ``multi_namespace_mode_namespace_list`` that namespace is forbidden (the deployment declared
        where workers may run, and RBAC is usually granted there only); otherwise the namespace gets
        its own watcher, so the pod's end is never missed.
        """
        assert self.supervisor is not None
        if self.supervisor.watches(namespace):
            return True
        kc = self.kube_config
        if kc.multi_namespace_mode and kc.multi_namespace_mode_namespace_list:
            listed = ", ".join(str(n) for n in self._namespaces())
            self._fail_launch(
                key,
                f"the task's pod_override puts its pod in namespace {namespace!r}, which is not in "
                f"[kubernetes_executor] multi_namespace_mode_namespace_list ({listed}); the executor "
                "watches only those. Add the namespace to the list, or remove it from pod_override.",
            )
            return False
        self.supervisor.add_namespace(namespace)
        return True

    def _retry_launch(
        self, key: TaskInstanceKey, launch: PendingCreate, error: str, retry_after: float | None
    ) -> None:
        if launch.backoff is None:
            # No reset: a task's create keeps backing off until it succeeds or the scheduler's
            # task_queued_timeout revokes it. Retry-After is honoured up to the Backoff's cap (5 min).
            launch.backoff = Backoff(
                initial_seconds=CREATE_BACKOFF_INITIAL_SECONDS,
                max_seconds=CREATE_BACKOFF_MAX_SECONDS,
                reset_after_seconds=float("inf"),
            )
        now = time.monotonic()
        delay = launch.backoff.failure(now, retry_after=retry_after)
        launch.attempts += 1
        launch.not_before = now + delay
        launch.last_error = error
        self._counters["create_retries"] += 1
        why = _retry_reason(error)
        launch.waiting_for_quota = why.startswith("exceeded quota")
        # One line per task and per change of reason: a quota that stays full for ten minutes
        # would otherwise log every attempt of every waiting task. Each attempt is still logged at DEBUG.
        changed = why != launch.retry_reason
        launch.retry_reason = why
        (self.log.warning if changed else self.log.debug)(
            "Could not create the worker pod of %s (attempt %d): %s. The task stays queued; retrying in %.1f s%s",
            key,
            launch.attempts,
            error,
            delay,
            " (further attempts failing the same way are logged at DEBUG)" if changed else "",
        )

    def _fail_launch(
        self, key: TaskInstanceKey, reason: str, *, report_reason: str = "PodCreationFailed"
    ) -> None:
        record = self.records.end(key)
        self._counters["create_failures"] += 1
        self.log.error("Failing %s: %s", key, reason)
        self._append_task_log(record.workload if record else None, key, reason)
        self.fail(key, reason)
        self._settle(key)
        self._report(key, pod=None, state="failed", reason=report_reason, gap=False)


_QUOTA = re.compile(r"exceeded quota: ([^,]+)")


def _retry_reason(error: str) -> str:
    """A retried create's reason without the details that change from attempt to attempt (pod name, usage):
    ``exceeded quota: <quota>`` for a ResourceQuota refusal, else the status or exception part."""
    quota = _QUOTA.search(error)
    if quota:
        return f"exceeded quota: {quota.group(1).strip()}"
    return error.split(":", 1)[0]


def _retry_after(err: Any) -> float | None:
    value = (err.headers or {}).get("Retry-After") if getattr(err, "headers", None) else None
    return parse_retry_after(value)

"""The sandbox Job controller, behaving like kube-controller-manager's (Kubernetes 1.31+).

It follows the order of status updates recorded from a real controller (job-success.json,
job-failure-backoff1.json), because clients that read Jobs must cope with exactly that order:

1. Pods are created from the template (``<job>-<5 chars>``, job labels, controller ownerReference,
   the ``batch.kubernetes.io/job-tracking`` finalizer), then the status shows ``startTime``/``active``.
2. A finished pod is first recorded in ``uncountedTerminatedPods`` (together with
   ``SuccessCriteriaMet`` or ``FailureTarget`` when that decides the Job), then its tracking
   finalizer is removed, then the counters (``succeeded``/``failed``) move and, once no pod is
   still terminating, the terminal condition is added: ``Complete`` (with ``completionTime``) or
   ``Failed`` (no ``completionTime``).
3. After a failed pod the next one is created after a back-off (the real controller waits 10 s,
   doubling up to 6 min; the sandbox waits :data:`BACKOFF_INITIAL` doubling up to
   :data:`BACKOFF_MAX` so tests stay short).

Also: ``parallelism``/``completions`` (NonIndexed), ``backoffLimit``, ``activeDeadlineSeconds``
(FailureTarget/Failed with DeadlineExceeded, active pods deleted), ``suspend`` (Suspended condition,
"False" with JobResumed on resume), ``podFailurePolicy`` (``Ignore`` / ``FailJob`` / ``Count`` rules on
exit codes and pod conditions such as ``DisruptionTarget``; an ignored pod is replaced without counting
against ``backoffLimit``), pod creates refused by the API (a quota's 403: a ``FailedCreate`` event and a
retry with back-off), a limited pod creation rate (:meth:`JobController.set_pod_creation_rate`:
Jobs wait their turn for pods, first come first served, as behind a busy controller's rate limiter),
``ttlSecondsAfterFinished`` (the Job and its pods deleted, with
Foreground propagation like the TTL-after-finished controller), pods that vanish without a terminal
phase (counted as failed, like a tracked pod deleted by node loss).
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import logging
import time
from collections import OrderedDict
from typing import Any

from . import events
from .errors import ApiError
from .resources import random_suffix
from .store import Event, clone, now_rfc3339

log = logging.getLogger(__name__)

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
# Back-off before re-creating a pod after failures: BACKOFF_INITIAL * 2^(failures-1), capped.
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 10.0
# Sync rounds per event-loop turn (a round syncs every Job marked dirty by the previous one).
MAX_SYNC_ROUNDS = 20


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _condition(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    now = now_rfc3339()
    return {
        "type": type_,
        "status": status,
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def _has_condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def pod_failure_rule(spec: dict[str, Any], pod: dict[str, Any]) -> tuple[str, str] | None:
    """The first ``podFailurePolicy`` rule a failed pod matches: (action, message), or None.

    Like pkg/controller/job/pod_failure_policy.go: ``onExitCodes`` looks at terminated containers
    with a non-zero exit code (optionally one ``containerName``), ``onPodConditions`` at the pod's
    conditions (``status`` defaults to "True"); the messages are the controller's.
    """
    meta = pod["metadata"]
    who = f"{meta.get('namespace', '')}/{meta['name']}"
    status = pod.get("status") or {}
    for index, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules") or []):
        action = str(rule.get("action", ""))
        on_codes = rule.get("onExitCodes")
        if isinstance(on_codes, dict):
            values = set(on_codes.get("values") or [])
            wanted = on_codes.get("containerName")
            for cs in [
                *(status.get("initContainerStatuses") or []),
                *(status.get("containerStatuses") or []),
            ]:
                if wanted and cs.get("name") != wanted:
                    continue
                code = ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
                if not isinstance(code, int) or code == 0:
                    continue
                if (on_codes.get("operator") == "In") == (code in values):
                    return action, (
                        f"Container {cs.get('name')} for pod {who} failed with exit code {code} "
                        f"matching {action} rule at index {index}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            for condition in status.get("conditions") or []:
                if condition.get("type") == pattern.get("type") and condition.get("status") == pattern.get(
                    "status", "True"
                ):
                    return action, (
                        f"Pod {who} has condition {pattern.get('type')} matching {action} rule at index {index}"
                    )
    return None


def _ordered_status(fields: dict[str, Any]) -> dict[str, Any]:
    """Job status with the real server's key order and omitempty rules (0 counters are omitted,
    ``terminating``/``ready`` always present)."""
    out: dict[str, Any] = {}
    for key in ("conditions", "startTime", "completionTime"):
        if fields.get(key):
            out[key] = fields[key]
    for key in ("active", "succeeded", "failed"):
        if fields.get(key):
            out[key] = fields[key]
    out["terminating"] = fields.get("terminating", 0)
    uncounted = {k: v for k, v in (fields.get("uncountedTerminatedPods") or {}).items() if v}
    out["uncountedTerminatedPods"] = uncounted
    out["ready"] = fields.get("ready", 0)
    return out


class JobController:
    def __init__(self, sandbox: Any) -> None:
        self.sb = sandbox
        self._dirty: set[tuple[str, str]] = set()
        self._scheduled = False
        self._timers: dict[tuple[str, str, str], asyncio.TimerHandle] = {}
        # Tracked pods (finalizer still on) that vanished without a terminal phase, per job uid.
        self._lost: dict[str, set[str]] = {}
        # Earliest time the next pod of a job may be created (failure back-off), per job uid.
        self._not_before: dict[str, float] = {}
        # Back-off of the next create after the API refused one (e.g. a quota's 403), per job uid.
        self._create_backoff: dict[str, float] = {}
        self._stopped = False
        # Pod creation rate (pods per second; None: at once). While it is set, a Job that wants a pod
        # queues for a permit, first come first served; one permit is handed out every 1/rate seconds.
        self._rate: float | None = None
        self._queue: OrderedDict[tuple[str, str, str], None] = OrderedDict()  # (ns, name, uid)
        self._permits: dict[str, int] = {}  # job uid -> permits granted and not yet used
        self._pacer: asyncio.TimerHandle | None = None
        self._last_permit_at = 0.0

    def start(self) -> None:
        self.sb.store.listeners.append(self._on_event)
        for entry in list(self.sb.store.iter("jobs")):
            self._mark(entry.obj["metadata"].get("namespace", ""), entry.obj["metadata"]["name"])

    async def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(ValueError):
            self.sb.store.listeners.remove(self._on_event)
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._pacer is not None:
            self._pacer.cancel()
            self._pacer = None

    # ---- a slow controller ---------------------------------------------------------------------------
    @property
    def pod_creation_rate(self) -> float | None:
        return self._rate

    def set_pod_creation_rate(self, rate: float | None) -> None:
        """Create at most ``rate`` pods per second in all (None: as fast as Jobs ask, the default).

        A real kube-controller-manager lags like this when many Jobs arrive at once: its work queue and
        its client's rate limit (``--kube-api-qps``) let Jobs wait seconds to minutes for their pods,
        with no event and no error. Jobs queue first come, first served; changing the rate takes
        effect at once, and None releases every waiting Job.
        """
        if rate is not None and not (isinstance(rate, (int, float)) and rate > 0):
            raise ValueError(
                f"pod_creation_rate must be a number of pods per second > 0, or None; got {rate!r}"
            )
        self._rate = None if rate is None else float(rate)
        if self._pacer is not None:
            self._pacer.cancel()
            self._pacer = None
        if self._rate is None:
            waiting, self._queue = list(self._queue), OrderedDict()
            self._permits.clear()
            for ns, name, _uid in waiting:
                self._mark(ns, name)
        else:
            self._pace()

    def _may_create(self, job: dict[str, Any]) -> bool:
        """Whether the rate lets this Job create a pod now (uses its permit); else it queues for one."""
        if self._rate is None:
            return True
        meta = job["metadata"]
        uid = meta["uid"]
        if self._permits.get(uid, 0) > 0:
            self._permits[uid] -= 1
            if not self._permits[uid]:
                del self._permits[uid]
            return True
        self._queue[(meta.get("namespace", ""), meta["name"], uid)] = None
        self._pace()
        return False

    def _pace(self) -> None:
        """Hand the first queued Job a permit every 1/rate seconds (one timer, however many wait)."""
        if self._pacer is not None or self._rate is None or not self._queue or self._stopped:
            return
        interval = 1.0 / self._rate
        delay = max(0.0, self._last_permit_at + interval - time.monotonic())
        self._pacer = asyncio.get_running_loop().call_later(delay, self._grant)

    def _grant(self) -> None:
        self._pacer = None
        while self._queue:
            (ns, name, uid), _ = self._queue.popitem(last=False)
            entry = self.sb.store.get("jobs", ns, name)
            if entry is None or entry.obj["metadata"].get("uid") != uid:
                continue  # gone or replaced while it waited: the next in line gets the permit
            self._permits[uid] = self._permits.get(uid, 0) + 1
            self._last_permit_at = time.monotonic()
            self._mark(ns, name)
            break
        self._pace()

    # ---- work queue --------------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        meta = event.obj["metadata"]
        ns = meta.get("namespace", "")
        if event.resource == "jobs":
            if event.type == "DELETED":
                self._lost.pop(meta.get("uid", ""), None)
                self._not_before.pop(meta.get("uid", ""), None)
                self._not_before.pop("create:" + meta.get("uid", ""), None)
                self._create_backoff.pop(meta.get("uid", ""), None)
                self._permits.pop(meta.get("uid", ""), None)
                return
            self._mark(ns, meta["name"])
        elif event.resource == "pods":
            for ref in meta.get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("controller"):
                    if (
                        event.type == "DELETED"
                        and TRACKING_FINALIZER in (meta.get("finalizers") or [])
                        and event.obj.get("status", {}).get("phase") not in ("Succeeded", "Failed")
                    ):
                        self._lost.setdefault(ref.get("uid", ""), set()).add(meta.get("uid", ""))
                    self._mark(ns, ref.get("name", ""))
                    if event.type != "DELETED" and TRACKING_FINALIZER in (meta.get("finalizers") or []):
                        asyncio.get_running_loop().call_soon(self._release_orphan, ns, meta["name"], ref)

    def _release_orphan(self, ns: str, pod_name: str, ref: dict[str, Any]) -> None:
        """A tracked pod whose Job is gone (Background/Orphan deletion) loses its finalizer, as the
        real controller's orphan-pod cleanup does, so that it can be deleted."""
        job = self.sb.store.get("jobs", ns, ref.get("name", ""))
        if job is not None and job.obj["metadata"].get("uid") == ref.get("uid"):
            return
        pod = self.sb.store.get("pods", ns, pod_name)
        if pod is not None:
            self._remove_finalizer(pod.obj)

    def _mark(self, ns: str, name: str) -> None:
        if self._stopped:
            return
        self._dirty.add((ns, name))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        """Sync every dirty Job; a sync's own writes mark Jobs dirty again, so loop until quiet, but
        yield to the event loop after :data:`MAX_SYNC_ROUNDS` rounds so HTTP requests keep flowing."""
        self._scheduled = False
        rounds = 0
        while self._dirty and rounds < MAX_SYNC_ROUNDS:
            rounds += 1
            batch = list(self._dirty)
            self._dirty.clear()
            for ns, name in batch:
                try:
                    self._sync(ns, name)
                except Exception:  # a controller bug must not stop the sandbox; the Job stays as is
                    log.exception("sandbox job controller: sync of %s/%s failed", ns, name)
        if self._dirty and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _timer(self, kind: str, ns: str, name: str, delay: float) -> None:
        key = (kind, ns, name)
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self._mark(ns, name)

        self._timers[key] = asyncio.get_running_loop().call_later(max(0.0, delay), fire)

    # ---- the sync loop -----------------------------------------------------------------------------
    def _owned_pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        uid = job["metadata"]["uid"]
        ns = job["metadata"].get("namespace", "")
        out = []
        for entry in self.sb.store.owned_by("pods", ns, uid):  # the store's owner index, not a scan
            for ref in entry.obj["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == uid and ref.get("controller"):
                    pod: dict[str, Any] = entry.obj
                    out.append(pod)
                    break
        return out

    def _commit_status(self, job: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        status = _ordered_status(fields)
        if status == job.get("status"):
            return job
        new: dict[str, Any] = clone(job)
        new["status"] = status
        self.sb.store.commit("jobs", "MODIFIED", new, job)
        return new

    def _remove_finalizer(self, pod: dict[str, Any]) -> None:
        current = self.sb.store.get("pods", pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
        if current is None or current.obj["metadata"].get("uid") != pod["metadata"].get("uid"):
            return
        finalizers = current.obj["metadata"].get("finalizers") or []
        if TRACKING_FINALIZER not in finalizers:
            return
        new = clone(current.obj)
        remaining = [f for f in finalizers if f != TRACKING_FINALIZER]
        if remaining:
            new["metadata"]["finalizers"] = remaining
        else:
            new["metadata"].pop("finalizers", None)
        self.sb.api.commit_update("pods", new, current.obj)

    def _delete_pod(self, pod: dict[str, Any], job: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            self.sb.api.delete(
                "pods", meta.get("namespace", ""), meta["name"], preconditions={"uid": meta["uid"]}
            )
            self._event(job, "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    def _event(self, job: dict[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
        events.record(
            self.sb,
            "jobs",
            job,
            reason,
            message,
            type_="Warning" if warning else "Normal",
            component="job-controller",
        )

    def _sync(self, ns: str, name: str) -> None:
        entry = self.sb.store.get("jobs", ns, name)
        if entry is None:
            return
        job = entry.obj
        meta = job["metadata"]
        spec = job.get("spec", {})
        status = job.get("status") or {}
        uid = meta["uid"]
        pods = self._owned_pods(job)
        tracked = [p for p in pods if TRACKING_FINALIZER in (p["metadata"].get("finalizers") or [])]

        if meta.get("deletionTimestamp"):
            # A Job being deleted lets go of its pods (the garbage collector deletes them).
            for pod in tracked:
                self._remove_finalizer(pod)
            return
        if _has_condition(status, "Complete") or _has_condition(status, "Failed"):
            for pod in tracked:
                self._remove_finalizer(pod)
            self._schedule_ttl(job)
            return

        fields: dict[str, Any] = {k: clone(v) for k, v in status.items()}
        conditions: list[dict[str, Any]] = list(fields.get("conditions") or [])
        now = time.time()

        # ---- suspend / resume ------------------------------------------------------------------
        if spec.get("suspend"):
            for pod in pods:
                if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed") and not pod[
                    "metadata"
                ].get("deletionTimestamp"):
                    self._delete_pod(pod, job)
            if not _has_condition(status, "Suspended"):
                conditions = [c for c in conditions if c.get("type") != "Suspended"]
                conditions.append(_condition("Suspended", "True", "JobSuspended", "Job suspended"))
                self._event(job, "Suspended", "Job suspended")
            fields["conditions"] = conditions
            pods = self._owned_pods(job)
        elif any(c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions):
            conditions = [c for c in conditions if c.get("type") != "Suspended"]
            conditions.append(_condition("Suspended", "False", "JobResumed", "Job resumed"))
            self._event(job, "Resumed", "Job resumed")
            fields["conditions"] = conditions
            fields["startTime"] = now_rfc3339()
        suspended = bool(spec.get("suspend"))

        # ---- count finished pods ---------------------------------------------------------------
        uncounted = fields.get("uncountedTerminatedPods") or {}
        unc_succeeded = list(uncounted.get("succeeded") or [])
        unc_failed = list(uncounted.get("failed") or [])
        policy_failure: dict[str, Any] | None = None
        for pod in tracked:
            phase = pod.get("status", {}).get("phase")
            puid = pod["metadata"]["uid"]
            if phase == "Succeeded" and puid not in unc_succeeded:
                unc_succeeded.append(puid)
            elif phase == "Failed" and puid not in unc_failed:
                if suspended and pod["metadata"].get("deletionTimestamp"):
                    # Stopped because the Job was suspended: not a failure (the real controller
                    # does not count pods it removed for suspension against backoffLimit).
                    self._remove_finalizer(pod)
                    continue
                rule = pod_failure_rule(spec, pod)
                if rule is not None and rule[0] == "Ignore":
                    # Not counted against backoffLimit and no back-off: the pod is replaced.
                    self._remove_finalizer(pod)
                    continue
                if rule is not None and rule[0] == "FailJob" and policy_failure is None:
                    policy_failure = _condition("FailureTarget", "True", "PodFailurePolicy", rule[1])
                unc_failed.append(puid)
        for puid in sorted(self._lost.pop(uid, set())):
            if puid not in unc_failed and puid not in unc_succeeded:
                unc_failed.append(puid)
        newly_failed = len(unc_failed)
        succeeded_total = int(fields.get("succeeded") or 0) + len(unc_succeeded)
        failed_total = int(fields.get("failed") or 0) + newly_failed

        def is_active(p: dict[str, Any]) -> bool:
            return p.get("status", {}).get("phase") not in ("Succeeded", "Failed") and not p["metadata"].get(
                "deletionTimestamp"
            )

        active = [p for p in pods if is_active(p)]
        terminating = [
            p
            for p in pods
            if p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]

        # ---- decide the outcome ------------------------------------------------------------------
        completions = spec.get("completions")
        backoff_limit = int(spec.get("backoffLimit", 6))
        failure = _has_condition(status, "FailureTarget")
        success = _has_condition(status, "SuccessCriteriaMet")
        if not failure and not success:
            start = _parse_time(fields.get("startTime"))
            deadline = spec.get("activeDeadlineSeconds")
            # restartPolicy OnFailure: container restarts count against the limit (the real
            # controller's pastBackoffLimitOnFailure: restarts >= backoffLimit fails the Job).
            on_failure = (spec.get("template") or {}).get("spec", {}).get("restartPolicy") == "OnFailure"
            restarts = (
                sum(
                    int(cs.get("restartCount", 0))
                    for p in active
                    for cs in p.get("status", {}).get("containerStatuses") or []
                )
                if on_failure
                else 0
            )
            if policy_failure is not None:
                failure = policy_failure
            elif failed_total > backoff_limit or (on_failure and restarts and restarts >= backoff_limit):
                failure = _condition(
                    "FailureTarget",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
            elif deadline is not None and start is not None and not suspended and now - start >= deadline:
                failure = _condition(
                    "FailureTarget",
                    "True",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                )
            elif completions is not None and succeeded_total >= completions:
                success = _condition(
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
            elif completions is None and succeeded_total > 0 and not active:
                success = _condition(
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
            if failure is not None:
                conditions.append(failure)
                self._event(job, failure["reason"], failure["message"], warning=True)
            if success is not None:
                conditions.append(success)
            fields["conditions"] = conditions
            if (
                deadline is not None
                and start is not None
                and failure is None
                and success is None
                and not suspended
            ):
                self._timer("deadline", ns, name, start + deadline - now)
        if failure is not None or success is not None:
            # The Job is decided: no more pods; running ones are stopped (FailureTarget) or finish.
            for pod in active if failure is not None else []:
                self._delete_pod(pod, job)
            if failure is not None:
                pods = self._owned_pods(job)
                active = [p for p in pods if is_active(p)]
                terminating = [
                    p
                    for p in pods
                    if p["metadata"].get("deletionTimestamp")
                    and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
                ]

        # ---- create pods -------------------------------------------------------------------------
        created = 0
        if failure is None and success is None and not suspended:
            parallelism = int(spec.get("parallelism", 1))
            want = parallelism if completions is None else min(parallelism, completions - succeeded_total)
            if completions is None and succeeded_total > 0:
                want = 0  # work-queue Jobs: once one pod succeeded, no new ones are started
            missing = want - len(active) - len(terminating)
            if newly_failed:
                delay = min(BACKOFF_INITIAL * 2 ** max(0, failed_total - 1), BACKOFF_MAX)
                self._not_before[uid] = now + delay
            not_before = self._not_before.get(uid, 0.0)
            if missing > 0 and now < not_before:
                self._timer("backoff", ns, name, not_before - now)
                missing = 0
            for _ in range(max(0, missing)):
                if self._create_pod(job):
                    created += 1
            if not fields.get("startTime"):
                fields["startTime"] = now_rfc3339()
            if created:
                pods = self._owned_pods(job)
                active = [p for p in pods if is_active(p)]

        ready = sum(
            1
            for p in active
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in p.get("status", {}).get("conditions") or []
            )
        )

        # ---- step 1: record finished pods as uncounted (and the decision) -------------------------
        fields["active"] = len(active)
        fields["ready"] = ready
        fields["terminating"] = len(terminating)
        fields["uncountedTerminatedPods"] = {"succeeded": unc_succeeded, "failed": unc_failed}
        job = self._commit_status(job, fields)

        # ---- step 2: let go of the counted pods (remove the tracking finalizer) ------------------
        counted_uids = set(unc_succeeded) | set(unc_failed)
        for pod in tracked:
            if pod["metadata"]["uid"] in counted_uids:
                self._remove_finalizer(pod)

        # ---- step 3: move them to the counters; the terminal condition once nothing terminates ---
        if counted_uids or failure is not None or success is not None:
            fields["succeeded"] = succeeded_total
            fields["failed"] = failed_total
            fields["uncountedTerminatedPods"] = {}
            if (
                failure is not None
                and not terminating
                and not _has_condition(job.get("status", {}), "Failed")
            ):
                final = dict(failure)
                final["type"] = "Failed"
                fields["conditions"] = list(fields.get("conditions") or []) + [final]
            if (
                success is not None
                and not active
                and not terminating
                and not _has_condition(job.get("status", {}), "Complete")
            ):
                final = dict(success)
                final["type"] = "Complete"
                final["lastProbeTime"] = final["lastTransitionTime"] = now_rfc3339()
                fields["conditions"] = list(fields.get("conditions") or []) + [final]
                fields["completionTime"] = now_rfc3339()
                self._event(job, "Completed", "Job completed")
            job = self._commit_status(job, fields)
            if _has_condition(job.get("status", {}), "Complete") or _has_condition(
                job.get("status", {}), "Failed"
            ):
                self._schedule_ttl(job)

    def _create_pod(self, job: dict[str, Any]) -> bool:
        meta = job["metadata"]
        if time.time() < self._not_before.get("create:" + meta["uid"], 0.0):
            return False  # a refused create is retried by its timer
        if not self._may_create(job):
            return False  # queued for a permit (set_pod_creation_rate); marked again when it gets one
        template = clone(job["spec"].get("template") or {})
        tmeta = template.get("metadata") or {}
        name = meta["name"]
        pod_meta: dict[str, Any] = {"name": f"{name}-{random_suffix()}", "generateName": f"{name}-"}
        if tmeta.get("labels"):
            pod_meta["labels"] = tmeta["labels"]
        if tmeta.get("annotations"):
            pod_meta["annotations"] = tmeta["annotations"]
        pod_meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": name,
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        pod_meta["finalizers"] = [TRACKING_FINALIZER]
        pod = {"metadata": pod_meta, "spec": template.get("spec") or {}}
        for _attempt in range(5):  # a generated name can collide; the real controller retries too
            try:
                created = self.sb.api.create("pods", meta.get("namespace", ""), clone(pod))
                self._event(job, "SuccessfulCreate", f"Created pod: {created.obj['metadata']['name']}")
                self._create_backoff.pop(meta["uid"], None)
                return True
            except ApiError as err:
                if err.code != 409:
                    # The real controller records FailedCreate and requeues the Job with back-off.
                    log.info("sandbox job controller: cannot create a pod for %s: %s", name, err.message)
                    self._event(job, "FailedCreate", f"Error creating: {err.message}", warning=True)
                    delay = min(self._create_backoff.get(meta["uid"], BACKOFF_INITIAL / 2) * 2, BACKOFF_MAX)
                    self._create_backoff[meta["uid"]] = delay
                    self._not_before["create:" + meta["uid"]] = time.time() + delay
                    self._timer("create", meta.get("namespace", ""), name, delay)
                    return False
                pod_meta["name"] = f"{name}-{random_suffix()}"
        return False

    def _schedule_ttl(self, job: dict[str, Any]) -> None:
        ttl = job.get("spec", {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        meta = job["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        if ("ttl", ns, name) in self._timers:
            return
        status = job.get("status", {})
        finished = _has_condition(status, "Complete") or _has_condition(status, "Failed") or {}
        finished_at = _parse_time(finished.get("lastTransitionTime")) or time.time()
        uid = meta["uid"]

        def expire() -> None:
            self._timers.pop(("ttl", ns, name), None)
            current = self.sb.store.get("jobs", ns, name)
            if current is None or current.obj["metadata"].get("uid") != uid:
                return
            with contextlib.suppress(ApiError):
                self.sb.api.delete("jobs", ns, name, propagation="Foreground", preconditions={"uid": uid})

        delay = max(0.0, finished_at + float(ttl) - time.time())
        self._timers[("ttl", ns, name)] = asyncio.get_running_loop().call_later(delay, expire)

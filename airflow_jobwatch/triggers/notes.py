"""What a waiting :class:`~airflow_jobwatch.triggers.job.JobTrigger` notices on the way, and says once.

The trigger decides *whether* the wait is over (``kube/meaning/states.py`` reads the Job); this module keeps
what happened *during* the wait, which no single Job object shows, and tells the task log about it:

* **Disruptions** of the Job's pods (``kube.meaning.states.pod_disruption``: preemption, eviction, node
  shutdown, ...): each is logged once, when first seen (usually as the ``DisruptionTarget`` condition
  appears, before the pod is even gone), and listed in the trigger event. With
  ``disruption_retries=N`` the operator added a ``podFailurePolicy`` that keeps disrupted pods from
  counting against ``backoffLimit``; this module bounds that: past N disruptions the wait ends failed
  (:data:`REASON_DISRUPTION_RETRIES`), naming every one.
* **Kueue.** A Job that waits suspended (not yet admitted), is resumed (admitted), or is suspended
  again (preempted by Kueue) is neither failed nor late: the trigger keeps waiting, and each change is
  logged once.
* **Pods that cannot be created.** A Job that runs no pod because the API refuses its pods (a
  ResourceQuota's 403, an admission webhook) keeps waiting too; the reason, which only the Job's
  ``FailedCreate`` events carry, comes from the namespace's shared watch of those events
  (``triggers/refusals.py``), which the trigger joins once the Job has shown no pod for
  :data:`MISSING_PODS_FIRST_CHECK_SECONDS`, and leaves when the Job has pods again. Each distinct
  reason is logged once; its numbers (a quota's usage) again at most every
  :data:`REFUSAL_REFRESH_SECONDS`. No request is sent for one Job: a Job that only waits for a slow Job
  controller costs nothing.

What is noticed lives in the trigger instance: a trigger moved to another triggerer starts counting
disruptions again from the pods it can still see (the deleted ones are gone from the API).
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import time
from collections.abc import Callable
from typing import Any

from airflow_jobwatch.kube.meaning.result import RESULT_ANNOTATION
from airflow_jobwatch.kube.meaning.states import pod_disruption
from airflow_jobwatch.triggers.refusals import Refusals

__all__ = [
    "MISSING_PODS_FIRST_CHECK_SECONDS",
    "QUEUE_LABEL",
    "REASON_DISRUPTION_RETRIES",
    "WaitNotes",
]

#: The event's ``reason`` when the wait ends because the Job's pods were disrupted more often than
#: ``disruption_retries`` allows.
REASON_DISRUPTION_RETRIES = "DisruptionRetriesExceeded"

#: Kueue's queue label on a Job (what ``KubernetesStartKueueJobOperator`` sets).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

#: How long a Job that should run pods may show none before the trigger looks for the reason in the
#: namespace's refusal events. The Job controller creates the first pod within milliseconds when nothing
#: refuses it and it is not busy, so a triggerer whose Jobs all get their pods in time never opens the
#: events watch (triggers/refusals.py).
MISSING_PODS_FIRST_CHECK_SECONDS = 5.0

# The generated pod name differs in every refused attempt; it is not part of the reason.
_POD_NAME = re.compile(r'pods "[^"]*"')
# Nor are a quota's numbers: "requested: pods=1, used: pods=7, limited: pods=8" (or requests.cpu=7500m)
# changes at every pod start and end in the namespace, while the refusal stays the same.
_QUANTITY = re.compile(r"(?<=[\w.\-/]=)[0-9][^,\s]*")

#: While a Job's pods stay refused for the same reason, its changing numbers (a quota's ``used``) are
#: said again at most this often: the task log shows the reason once, and how far the namespace is from
#: admitting the pod every few minutes, not at each of the Job controller's retries.
REFUSAL_REFRESH_SECONDS = 300.0

#: The clock of that refresh (a test sets its own).
_clock = time.monotonic


def _labels(job: dict[str, Any]) -> dict[str, Any]:
    return ((job.get("metadata") or {}).get("labels") or {}) if isinstance(job, dict) else {}


def _suspended(job: dict[str, Any]) -> bool:
    if (job.get("spec") or {}).get("suspend") is True:
        return True
    return any(
        c.get("type") == "Suspended" and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _finished(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")
        and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


class WaitNotes:
    """The notes of one trigger's wait. Called with the cached Job and its pods at every decision.

    :param log: the trigger's logger (its lines reach the task log).
    :param namespace: the Job's namespace.
    :param job_name: the Job's name.
    :param disruption_retries: disruptions allowed before the wait fails; None: no bound (listed only).
    """

    def __init__(self, *, log: Any, namespace: str, job_name: str, disruption_retries: int | None) -> None:
        self.log = log
        self.namespace = namespace
        self.job_name = job_name
        self.disruption_retries = disruption_retries
        self.disruptions: dict[str, dict[str, Any]] = {}  # pod uid -> entry, in the order seen
        self.admissions = 0
        self.preemptions = 0
        self._was_suspended: bool | None = None
        self._suspended_at: float | None = None
        self._missing_since: float | None = None
        # refusal reason (numbers left out) -> (when it was last said, the message then said)
        self._missing_reasons: dict[str, tuple[float, str]] = {}
        self._rejected_results: set[str] = set()
        self._unlisten: Callable[[], None] | None = None  # set while listening for refusals
        self._timer: asyncio.TimerHandle | None = None
        self._context: contextvars.Context | None = None
        #: How many times the trigger looked at its Job (0 until its watch is synced).
        self.observations = 0

    def bind_context(self, context: contextvars.Context) -> None:
        """Log in ``context`` (the trigger's own task's): :meth:`observe` is mostly called from the
        shared informers' callbacks, which run in the context of whichever trigger started the watch,
        and the triggerer files a log line under the task whose ids the context carries."""
        self._context = context

    def _say(self, level: str, message: str, *args: Any) -> None:
        emit = getattr(self.log, level)
        if self._context is None:
            emit(message, *args)
            return
        try:
            self._context.run(emit, message, *args)
        except RuntimeError:  # the context is entered right now (we are in the trigger's own task)
            emit(message, *args)

    # -- what the trigger calls ------------------------------------------------------------------------
    def observe(
        self,
        job: dict[str, Any],
        pods: list[dict[str, Any]],
        refusals: Callable[[], Refusals | None] | None = None,
    ) -> None:
        """Note what the Job and its pods show now (cheap: no request).

        :param refusals: gives the namespace's shared refusal watch, starting it on the first call
            (``NamespaceWatch.refusals``); None: the reason pods cannot be created is not looked for.
        """
        self.observations += 1
        self._observe_disruptions(pods)
        self._observe_suspension(job)
        self._observe_missing_pods(job, pods, refusals)

    def disruption_list(self) -> list[dict[str, Any]]:
        """The disruptions seen, oldest first, for the event payload."""
        return [dict(entry) for entry in self.disruptions.values()]

    def result_rejected(self, why: str) -> None:
        """The Job carries a stored result that does not count (``JobResult.with_stored``): say which and
        why, once per reason; how the Job ended is read from the cluster alone."""
        if why in self._rejected_results:
            return
        self._rejected_results.add(why)
        if why.startswith("there is no key"):
            why += " ([core] fernet_key is not set in this Airflow process)"
        self._say(
            "warning",
            "Job %s/%s carries a result in its %s annotation that is not used: %s. How the Job ended is "
            "read from its own status and its pods only.",
            self.namespace,
            self.job_name,
            RESULT_ANNOTATION,
            why,
        )

    def exceeded(self) -> bool:
        return self.disruption_retries is not None and len(self.disruptions) > self.disruption_retries

    def exceeded_message(self) -> str:
        listed = "; ".join(f"pod {d['pod']}: {d['message']}" for d in self.disruptions.values())
        return (
            f"Job {self.namespace}/{self.job_name} was disrupted {len(self.disruptions)} times, more than "
            f"disruption_retries={self.disruption_retries} allows: {listed}. The Job is deleted; the task "
            "fails (its own retries apply)."
        )

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._stop_listening()

    def _stop_listening(self) -> None:
        if self._unlisten is not None:
            unlisten, self._unlisten = self._unlisten, None
            unlisten()

    # -- disruptions -----------------------------------------------------------------------------------
    def _observe_disruptions(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = meta.get("uid")
            if not uid or uid in self.disruptions:
                continue
            disruption = pod_disruption(pod)
            if disruption is None:
                continue
            phase = (pod.get("status") or {}).get("phase")
            if disruption.reason == "NodeLost" and phase != "Failed":
                continue  # the node may come back; the taint manager disrupts the pod if it does not
            entry = {"pod": meta.get("name"), **disruption.as_dict()}
            self.disruptions[uid] = entry
            bound = (
                f" ({len(self.disruptions)} of {self.disruption_retries} allowed)"
                if self.disruption_retries is not None
                else ""
            )
            self._say(
                "warning",
                "Pod %s of Job %s/%s was disrupted%s: %s%s",
                meta.get("name"),
                self.namespace,
                self.job_name,
                bound,
                disruption.message,
                f" ({disruption.detail})" if disruption.detail else "",
            )

    # -- Kueue (and any other suspension) --------------------------------------------------------------
    def _observe_suspension(self, job: dict[str, Any]) -> None:
        if _finished(job):
            return
        suspended = _suspended(job)
        previous, self._was_suspended = self._was_suspended, suspended
        queue = _labels(job).get(QUEUE_LABEL)
        by = f"Kueue (queue {queue!r})" if queue else "whoever suspended it"
        if suspended and previous is not True:
            self._suspended_at = time.monotonic()
            if previous is None:  # suspended from the start: not admitted yet
                self._say(
                    "info",
                    "Job %s/%s is suspended: waiting to be admitted by %s; this is not a failure and "
                    "does not end the wait",
                    self.namespace,
                    self.job_name,
                    by,
                )
            else:
                self.preemptions += 1
                self._say(
                    "warning",
                    "Job %s/%s was suspended again (preempted by %s, %d time(s)): its pods are stopped "
                    "and it waits to be admitted again; the wait goes on",
                    self.namespace,
                    self.job_name,
                    by,
                    self.preemptions,
                )
        elif not suspended and previous is True:
            self.admissions += 1
            waited = time.monotonic() - (self._suspended_at or time.monotonic())
            self._say(
                "info",
                "Job %s/%s was admitted (resumed) after %.0f s suspended%s",
                self.namespace,
                self.job_name,
                waited,
                f" by Kueue (queue {queue!r})" if queue else "",
            )

    # -- pods that cannot be created -------------------------------------------------------------------
    def _observe_missing_pods(
        self, job: dict[str, Any], pods: list[dict[str, Any]], refusals: Callable[[], Refusals | None] | None
    ) -> None:
        status = job.get("status") or {}
        live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        missing = not _suspended(job) and not _finished(job) and not live and not (status.get("active") or 0)
        missing = missing and not (job.get("metadata") or {}).get("deletionTimestamp")
        now = time.monotonic()
        if not missing:
            self._missing_since = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._stop_listening()
            if self._missing_reasons:
                self._say("info", "Job %s/%s has its pods now", self.namespace, self.job_name)
                self._missing_reasons.clear()
            return
        if self._missing_since is None:
            self._missing_since = now
        if refusals is None or self._timer is not None or self._unlisten is not None:
            return
        uid = (job.get("metadata") or {}).get("uid")
        if not uid:
            return

        def start() -> None:
            self._timer = None
            if self._missing_since is None or self._unlisten is not None:
                return  # it got its pods meanwhile
            source = refusals()
            if source is None:
                return
            self._unlisten = source.listen(uid, self._refused)
            latest = source.reason(uid)
            if latest is not None:
                self._refused(latest)

        due = self._missing_since + MISSING_PODS_FIRST_CHECK_SECONDS
        self._timer = asyncio.get_running_loop().call_later(max(0.0, due - now), start)

    def _refused(self, message: str) -> None:
        """A ``FailedCreate`` event of the Job, from the shared watch: log a reason not logged before."""
        if self._missing_since is None:
            return
        reason = _QUANTITY.sub("N", _POD_NAME.sub('pods "..."', message))
        now = _clock()
        said = self._missing_reasons.get(reason)
        if said is None:
            self._missing_reasons[reason] = (now, message)
            self._say(
                "warning",
                "Job %s/%s cannot create its pods yet, so it keeps waiting (the Job controller retries): %s",
                self.namespace,
                self.job_name,
                message,
            )
            return
        at, text = said
        if now - at < REFUSAL_REFRESH_SECONDS or _POD_NAME.sub("", message) == _POD_NAME.sub("", text):
            return
        self._missing_reasons[reason] = (now, message)
        self._say(
            "info",
            "Job %s/%s still cannot create its pods (the numbers now): %s",
            self.namespace,
            self.job_name,
            message,
        )


async def delete_job(
    api_client: Any,
    *,
    namespace: str,
    name: str,
    uid: str | None,
    propagation_policy: str,
    grace_period_seconds: int | None,
    log: Any,
) -> None:
    """Delete the Job the wait gave up on (past ``disruption_retries``), as the operator's ``on_kill``
    would: its propagation policy and grace period, and only the very Job (uid precondition). A Job
    already gone (404) or replaced (409) is left alone; any other error is logged, since the task fails
    either way and the Job's own ``ttlSecondsAfterFinished`` or a user can still remove it."""
    from kubernetes_asyncio.client import BatchV1Api, V1DeleteOptions, V1Preconditions
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        await BatchV1Api(api_client).delete_namespaced_job(
            name,
            namespace,
            body=V1DeleteOptions(
                propagation_policy=propagation_policy,
                grace_period_seconds=grace_period_seconds,
                preconditions=V1Preconditions(uid=uid) if uid else None,
            ),
        )
        log.warning("Deleted Job %s/%s (propagation %s)", namespace, name, propagation_policy)
    except ApiException as e:
        if e.status not in (404, 409):
            log.error("Could not delete Job %s/%s after its disruptions: HTTP %s", namespace, name, e.status)

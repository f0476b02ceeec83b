"""One wait of one JobTrigger (:class:`Wait`), and when a terminal result's pods are final enough.

The wait is a small state machine over the shared watch (its diagram is :class:`Wait`'s docstring).
It never sees the trigger: it is handed what it waits for as a value (:class:`WaitTarget`), what the
cache means as an object of the :class:`Decisions` interface (the trigger's
:class:`~airflow_jobwatch.triggers.deciding.JobDecisions`), and how to join the shared watch
(:data:`Subscribe`). Each can be replaced alone: a test hands the wait a stub of one of them.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from airflow_jobwatch import metrics
from airflow_jobwatch.ending.outcomes import (
    OUTCOME_ERROR,
    OUTCOME_FAILED,
    OUTCOME_SUCCESS,
    OUTCOME_TIMEOUT,
    OUTCOME_UNKNOWN,
)
from airflow_jobwatch.kube.meaning.states import TERMINAL_PHASES
from airflow_jobwatch.triggers.notes import REASON_DISRUPTION_RETRIES, WaitNotes, delete_job
from airflow_jobwatch.triggers.registry import GET_MISSING, NamespaceWatch, Subscription

#: Default of ``poll_interval``: how often a waiting trigger re-reads the cache and, if its Job is not
#: in it, asks the API server once. Nothing is sent while the Job is cached, so this only bounds how long
#: a missed event (which the informer's relist repairs anyway) can delay the result.
DEFAULT_POLL_INTERVAL_SECONDS = 30.0

#: How long the watch is given to deliver a Job that the synced cache lacks, twice: before the trigger
#: GETs it, and again after that GET answered 404, before its final state is reported unknown.
#:
#: * Before the GET: an operator defers right after its Job's create is answered, so the trigger
#:   usually subscribes before the shared watch has delivered the new Job (milliseconds later). GETting
#:   it at once would cost one request per Job; waiting costs nothing, and the Job's ADDED event,
#:   stored whole because the trigger now listens for it, ends the wait for it.
#: * After a 404: a Job that completes and is TTL-deleted within milliseconds can be gone from the
#:   server before its events have been read off the watch stream; its DELETED event carries its final
#:   conditions.
#:
#: Two seconds covers a busy triggerer loop without delaying a real deletion noticeably.
_MISSING_GRACE_SECONDS = 2.0

#: A Job's terminal condition and its pods' final states arrive on two different watches, so the Job's
#: event can overtake the pod event that the Job controller acted on. When the Job is terminal but one of
#: its cached pods is not, the trigger gives the pod watch this long to catch up, so that the payload's
#: pod summary (and the failing container's exit code in the message) is the final one. Bounded, because
#: a pod can really still be running when the Job has met its success criteria (parallelism >
#: completions): the result is then reported with the pod as it is.
_POD_SETTLE_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class WaitTarget:
    """What one wait waits for, and the options it ends with: the trigger's arguments, as values.

    :param job_name: the Job's name.
    :param namespace: the Job's namespace.
    :param job_uid: the Job's uid, when known (another Job of the same name is then not ours).
    :param deadline: when the wait ends as ``timeout`` (aware, UTC); None: no deadline.
    :param poll_interval: the safety net's period in seconds; None: ``DEFAULT_POLL_INTERVAL_SECONDS``.
    :param propagation_policy: how a Job past its disruption retries is deleted (``on_kill``'s policy).
    :param grace_period_seconds: the grace period of that deletion (None: the server's default).
    :param api_failure_tolerance: how long the API may fail before the wait ends as ``error``; called
        when the API first fails (it may read configuration, which most waits never need).
    """

    job_name: str
    namespace: str
    job_uid: str | None
    deadline: datetime.datetime | None
    poll_interval: float | None
    propagation_policy: str
    grace_period_seconds: int | None
    api_failure_tolerance: Callable[[], float]


#: A Kubernetes object or an event payload, as JSON.
_Obj = dict[str, Any]
_Pods = list[dict[str, Any]] | None


class Decisions(Protocol):
    """What the wait asks of the cache's meaning (the trigger's ``JobDecisions`` is one).

    ``decide`` returns the terminal payload the cache implies, None while the Job is still running, and
    False when the synced cache holds no Job of ours. ``read_job`` is the only request: a GET of the Job
    (``(True, job)``, ``(True, None)`` on 404, ``(False, None)`` when the API failed); a 401/403 on it
    shows in ``access_denied``.
    """

    notes: WaitNotes
    log: Any

    @property
    def access_denied(self) -> str | None: ...

    def decide(self, watch: NamespaceWatch) -> dict[str, Any] | None | bool: ...

    def payload(
        self, outcome: str, reason: str | None, message: str, *, job: _Obj | None = ..., pods: _Pods = ...
    ) -> _Obj: ...

    def payload_never_seen(self, watch: NamespaceWatch) -> dict[str, Any]: ...

    def payload_from_state(
        self, job: dict[str, Any], pods: list[dict[str, Any]], *, deleted: bool
    ) -> dict[str, Any] | None: ...

    def current_state_note(
        self, watch: NamespaceWatch | None
    ) -> tuple[str, dict[str, Any] | None, list[dict[str, Any]]]: ...

    async def read_job(self, watch: NamespaceWatch, reason: str) -> tuple[bool, dict[str, Any] | None]: ...

    async def with_whole_job(self, watch: NamespaceWatch, payload: dict[str, Any]) -> None: ...


#: How the wait joins the shared watch of its Job's namespace: called with the callback for every change
#: of the Job or its pods, it returns the subscription (which the wait closes when it ends). It may raise:
#: the wait then ends as ``error`` (``ConfigError``), saying why.
Subscribe = Callable[[Callable[[], None]], Awaitable[Subscription]]


class Wait:
    """One wait of one JobTrigger: a small state machine, read top to bottom.

    ::

        SUBSCRIBING --cannot watch--------------------------------------------> DONE (error)
             |
             v
        WATCHING --cache says terminal, pods final----------------------------> DONE
             |   --cache says terminal, pods not yet final--> HOLDING --final, or 1 s--> DONE
             |   --Job missing from the synced cache--> AWAITING (no request)
             |         --the watch delivers it within 2 s--> back to WATCHING
             |         --still missing after 2 s--> CONFIRMING (one GET)
             |               --found terminal--------------------------------> DONE
             |               --404, no DELETED event within 2 s---------------> DONE (unknown)
             |   --API failing longer than the tolerance---------------------> DONE (error)
             |   --deadline (the cache is looked at once more first)----------> DONE (timeout, or held)
             v
        DONE: the result is a future set once; the first terminal result wins.

    Transitions come from three sources: the informers' callbacks (:meth:`on_change`), the deadline
    timer (:meth:`on_deadline`) and the safety-net loop (:meth:`_watching`), which also runs the
    CONFIRMING and API-tolerance checks.
    """

    def __init__(self, target: WaitTarget, decisions: Decisions, subscribe: Subscribe) -> None:
        self.target = target
        self.decisions = decisions
        self.subscribe = subscribe
        self.loop = asyncio.get_running_loop()
        self.result: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.watch: NamespaceWatch | None = None
        #: HOLDING: a terminal result waiting (at most _POD_SETTLE_SECONDS) for its pods to be final.
        self.held: dict[str, Any] | None = None
        self.hold_timer: asyncio.TimerHandle | None = None
        self.deadline_timer: asyncio.TimerHandle | None = None
        #: While the safety net (_watching) sleeps: resolved by on_change when the cache stops holding
        #: our Job, to wake it.
        self.poke: asyncio.Future[None] | None = None

    # -- DONE ------------------------------------------------------------------------------------------
    def done(self, payload: dict[str, Any]) -> None:
        """Set-once: whichever terminal result comes first is the one reported."""
        if not self.result.done():
            self.result.set_result(payload)
            metrics.job_detected(payload.get("job"), status=payload["outcome"])  # once per wait

    # -- WATCHING -> HOLDING / DONE --------------------------------------------------------------------
    def offer(self, payload: dict[str, Any]) -> None:
        """A terminal decision from the cache: DONE at once, unless it is a success/failure whose pods the
        pod watch has not yet shown final: then HOLDING (re-decided on every change) until they are, or
        for _POD_SETTLE_SECONDS at most. An ``unknown`` (a Job gone unseen) whose pods still show running
        is held the same way: the pod watch, which relists on its own, may yet deliver the final state
        that proves how the Job ended."""
        if self.result.done():
            return
        held = (OUTCOME_SUCCESS, OUTCOME_FAILED, OUTCOME_UNKNOWN)
        if payload["outcome"] not in held or pods_final(payload):
            self.done(payload)
            return
        self.held = payload
        if self.hold_timer is None:
            self.hold_timer = self.loop.call_later(_POD_SETTLE_SECONDS, self.release_held)

    def release_held(self) -> None:
        if self.held is not None:
            self.done(self.held)

    def on_change(self) -> None:
        """An informer callback: decide from the cache."""
        if self.watch is None or self.result.done():
            return
        decision = self.decisions.decide(self.watch)
        if isinstance(decision, dict):
            self.offer(decision)
        elif decision is False and self.poke is not None and not self.poke.done():
            # The cache holds no Job of ours under this name (e.g. another Job was created under it):
            # the safety net confirms at once what became of ours, instead of at its next poll.
            self.poke.set_result(None)

    def on_deadline(self) -> None:
        if self.result.done():
            return
        self.on_change()  # a terminal state already in the cache wins over the deadline
        if self.held is not None:
            self.done(self.held)  # ... even one still waiting for its pods to settle
            return
        t, d = self.target, self.decisions
        note, job, pods = d.current_state_note(self.watch)
        self.done(
            d.payload(
                OUTCOME_TIMEOUT,
                "Timeout",
                f"Job {t.namespace}/{t.job_name} did not finish before its deadline "
                f"{t.deadline.isoformat() if t.deadline else '?'}; {note}",
                job=job,
                pods=pods,
            )
        )

    # -- the whole run ---------------------------------------------------------------------------------
    async def run(
        self, then: Callable[[dict[str, Any], NamespaceWatch | None], Awaitable[None]] | None = None
    ) -> dict[str, Any]:
        """Wait, and return the payload; ``then(payload, watch)`` runs first, while this wait still holds
        its shared watch (the task's end uses the watch's client: a credential plugin runs once per
        credential, not once more per end)."""
        t, d = self.target, self.decisions
        d.notes.bind_context(contextvars.copy_context())  # its lines go to this task's log
        if t.deadline is not None:
            delay = (t.deadline - datetime.datetime.now(datetime.UTC)).total_seconds()
            self.deadline_timer = self.loop.call_later(max(0.0, delay), self.on_deadline)
        subscription: Subscription | None = None
        try:
            # SUBSCRIBING
            try:
                subscription = await self.subscribe(self.on_change)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.done(
                    d.payload(
                        OUTCOME_ERROR,
                        "ConfigError",
                        f"Cannot watch Job {t.namespace}/{t.job_name}: {type(e).__name__}: {e}",
                    )
                )
            else:
                self.watch = subscription.watch
                await self._watching(self.watch)
            payload = await self.result
            if payload.get("reason") == REASON_DISRUPTION_RETRIES and self.watch is not None:
                await delete_job(
                    self.watch.api_client,
                    namespace=t.namespace,
                    name=t.job_name,
                    uid=payload.get("uid"),
                    propagation_policy=t.propagation_policy,
                    grace_period_seconds=t.grace_period_seconds,
                    log=d.log,
                )
            if self.watch is not None:
                await d.with_whole_job(self.watch, payload)
            if then is not None:
                await then(payload, self.watch)
            return payload
        finally:
            d.notes.close()
            for timer in (self.deadline_timer, self.hold_timer):
                if timer is not None:
                    timer.cancel()
            if subscription is not None:
                # Only leave the shared watch; the Job itself is never touched here.
                await asyncio.shield(subscription.close())

    async def _watching(self, watch: NamespaceWatch) -> None:
        """WATCHING's safety net, every ``poll_interval`` (sooner while the API fails or the Job is
        being confirmed missing): decide from the cache, CONFIRMING, and the API-failure tolerance."""
        t, d = self.target, self.decisions
        poll = t.poll_interval or DEFAULT_POLL_INTERVAL_SECONDS
        tolerance: float | None = None  # read when the API first fails (most waits never need it)
        # AWAITING: when the next confirming GET of a Job missing from the synced cache may be sent (set
        # _MISSING_GRACE_SECONDS after the first look that missed it, then poll_interval after each GET).
        confirm_at: float | None = None
        # CONFIRMING: when a GET answered 404 (the DELETED event may still be on its way).
        missing_since: float | None = None
        # Triggers that start together (a triggerer picking up thousands at once) would otherwise wake
        # together every poll_interval, and each such burst delays every watch event behind it: the
        # first safety-net look comes after a random part of the interval, later ones +-10 % of it.
        next_poll = poll * random.random()
        while not self.result.done():
            decision = d.decide(watch)
            if isinstance(decision, dict):
                self.offer(decision)
                break
            if decision is not False:
                confirm_at = missing_since = None
            elif confirm_at is None:
                # AWAITING. Synced, yet the Job is neither cached nor tombstoned. Most often the watch
                # has not delivered it yet: the operator defers right after its create is answered. Give
                # the watch a moment, for free; the Job's events are stored whole from now on.
                confirm_at = time.monotonic() + _MISSING_GRACE_SECONDS
            elif missing_since is not None:
                if time.monotonic() - missing_since >= _MISSING_GRACE_SECONDS:
                    self.done(d.payload_never_seen(watch))
                    break
            elif time.monotonic() >= confirm_at:
                # CONFIRMING. Still missing: either it was deleted before the watch saw it (triggerer
                # restart, TTL), or the watch lags. One GET tells which (and may carry its final state).
                answered, job = await d.read_job(watch, GET_MISSING)
                if self.result.done():
                    break
                confirm_at = time.monotonic() + poll
                if answered and job is None:
                    # Gone from the server. Its DELETED event (which says how it ended) may still be
                    # on its way down the watch: give the watch a moment before calling it unknown.
                    missing_since = time.monotonic()
                elif job is not None:
                    result = d.payload_from_state(job, [], deleted=False)
                    if result is not None:
                        self.done(result)
                        break
            denied = watch.access_denied or d.access_denied
            if denied:  # A permission error is permanent: end now, with the advice
                reason = "Unauthorized" if "401 Unauthorized" in denied else "Forbidden"
                self.done(
                    d.payload(
                        OUTCOME_ERROR,
                        reason,
                        f"Cannot wait for Job {t.namespace}/{t.job_name}: {denied}",
                    )
                )
                break
            failing_for = watch.api_failing_for()
            if failing_for is not None and tolerance is None:
                tolerance = t.api_failure_tolerance()
            if failing_for is not None and tolerance is not None and failing_for >= tolerance:
                self.done(
                    d.payload(
                        OUTCOME_ERROR,
                        "ApiUnreachable",
                        f"The Kubernetes API failed for {failing_for:.0f} s (tolerance {tolerance:g} s) "
                        f"while waiting for Job {t.namespace}/{t.job_name}; last error: "
                        f"{watch.last_error or 'unknown'}",
                    )
                )
                break
            wait_for, next_poll = next_poll, poll * random.uniform(0.9, 1.1)
            if failing_for is not None and tolerance is not None:
                wait_for = min(wait_for, max(0.05, tolerance - failing_for))
            if missing_since is not None:
                wait_for = min(
                    wait_for, max(0.01, _MISSING_GRACE_SECONDS - (time.monotonic() - missing_since))
                )
            elif confirm_at is not None:
                wait_for = min(wait_for, max(0.01, confirm_at - time.monotonic()))
            # Until the result, the timeout, or the watch's health changes (it also wakes us every
            # second while the API fails): no timer of our own ticks while the watch is merely syncing.
            changed = watch.changed()
            self.poke = poke = self.loop.create_future()
            try:
                await asyncio.wait(
                    (self.result, changed, poke), timeout=wait_for, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                watch.forget(changed)
                self.poke = None
                poke.cancel()


def _uncounted_pods(status: dict[str, Any]) -> int:
    """How many ended pods the Job controller lists in ``status.uncountedTerminatedPods`` (pod uids it has
    seen end but not yet added to ``succeeded`` / ``failed``). Either key spelling: the payload's ``job``
    is the client's ``to_dict()`` shape, the cache's is API JSON. Garbage counts as none."""
    uncounted = status.get("uncounted_terminated_pods", status.get("uncountedTerminatedPods"))
    if not isinstance(uncounted, dict):
        return 0
    return sum(len(uids) for key in ("succeeded", "failed") if isinstance(uids := uncounted.get(key), list))


def pods_final(payload: dict[str, Any]) -> bool:
    """Whether a terminal payload's pods (and the Job's counters) are final enough to report.

    * Every pod in the payload's summary is in a terminal phase (as classified by kube/states).
    * The Job controller has folded every ended pod into its counters: ``uncountedTerminatedPods`` is
      empty. It lists a pod first, with ``SuccessCriteriaMet`` / ``FailureTarget`` when that pod decides
      the Job, and moves it to ``succeeded`` / ``failed`` in its next status update; until then the
      Job's counters are not the final ones.
    * The pod watch has shown at least as many ended pods as the Job counts, and one for a success (the
      pods' events can lag behind the Job's: a payload without them would lack their exit codes and
      XCom results).

    A decision that is not final yet is held (re-decided on every change) for at most
    ``_POD_SETTLE_SECONDS``.
    """
    status = (payload.get("job") or {}).get("status") or {}
    if _uncounted_pods(status):
        return False
    counted = (status.get("succeeded") or 0) + (status.get("failed") or 0)
    if payload["outcome"] == OUTCOME_SUCCESS:
        counted = max(counted, 1)  # a Job succeeds through at least one succeeded pod
    ended = sum(1 for pod in payload["pods"] if pod["phase"] in TERMINAL_PHASES)
    return ended == len(payload["pods"]) and ended >= counted

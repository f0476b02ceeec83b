"""A per-process registry of shared Job and pod informers, one pair per (cluster, namespace).

Upstream's ``KubernetesJobTrigger`` sends one GET per Job every ``poll_interval`` seconds: 500 deferred
Jobs cost 50 requests a second and see a finished Job up to ten seconds late. A triggerer does not need
that: everything it wants to know about the Jobs of a namespace is in two watch streams, one of Jobs and
one of the pods those Jobs own. This module keeps exactly one such pair per (cluster identity,
namespace) in each event loop, however many :class:`~airflow_jobwatch.triggers.job.JobTrigger` wait
there, and hands each trigger a :class:`Subscription` that

* reads the informers' current state (the trigger's first decision needs no event: a Job that ended
  before the trigger started is seen in the first list),
* calls the trigger back, synchronously and only for events about *its* Job or that Job's pods, so that
  300 triggers cost one dictionary lookup per event, not 300 evaluations,
* remembers the last state of a Job that was deleted (a Job whose ``ttlSecondsAfterFinished`` is 0 is
  gone a moment after it completed; its DELETED event still says how it ended), whether its deletion
  was seen (a DELETED event) or only inferred (gone at a relist: its end is unknown), and keeps
  learning its pods' final states from their later events (the store and its packing are
  ``triggers/tombstones.py``),
* stores the Jobs its triggers wait for whole (every version the watch delivers once a trigger listens
  for the name), and the namespace's other Jobs and all pods projected, so a waiting trigger's event
  carries the whole Job with no GET; every object is stored packed (``InformerConfig.compact_store``),
  and the pod index holds uids, so the cache costs a few hundred bytes per object,
* counts the few GETs a trigger still sends (:data:`GET_MISSING`, :data:`GET_PROJECTED`) in
  ``job_gets`` and in the ``jobwatch.triggerer.job_gets.<reason>`` counter.

The informers start with the first subscriber and stop after the last one leaves. Nothing here knows
what a Job's state *means* (that is ``kube/meaning/states.py``) or opens a watch itself (that is
``kube/engine/informer.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_jobwatch import metrics
from airflow_jobwatch.kube.engine.informer import (
    EventType,
    Informer,
    InformerConfig,
    InformerEvent,
    InformerHealth,
)
from airflow_jobwatch.triggers.refusals import Refusals
from airflow_jobwatch.triggers.tombstones import (
    Tombstone,
    Tombstones,
    slim_pod,
)

log = logging.getLogger(__name__)

__all__ = [
    "GET_MISSING",
    "GET_PROJECTED",
    "POD_LABEL_SELECTOR",
    "InformerRegistry",
    "NamespaceWatch",
    "Subscription",
    "Tombstone",
    "WatchKey",
    "get_registry",
]

#: Selects every pod a Job controller created, and nothing else. ``controller-uid`` is set by the Job
#: controller on every Kubernetes version we support (the ``batch.kubernetes.io/`` prefixed copy only
#: exists since 1.27), and a pod is matched to its Job by this uid, not by name, so a Job deleted and
#: re-created under the same name never inherits the old Job's pods.
POD_LABEL_SELECTOR = "controller-uid"
_POD_OWNER_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")

#: Why a JobTrigger GETs its Job; there is no other reason (a trigger that subscribes before its Job
#: ends sends no GET). Counted in ``NamespaceWatch.job_gets`` / ``InformerRegistry.job_gets``, the
#: ``jobwatch.triggerer.job_gets.<reason>`` counter and the triggerer status file's ``job_gets``.
#:
#: ``missing``: the synced cache has had no Job of that name (nor a tombstone of it) for
#: ``_MISSING_GRACE_SECONDS`` since the trigger first looked: the Job was deleted before the watch saw
#: it, the watch lags behind, or the Job is outside ``[jobwatch] job_label_selector``. Repeated at most
#: every ``poll_interval`` while it lasts.
GET_MISSING = "missing"
#: ``projected``: the trigger's result was decided from a copy of the Job the watch stored projected,
#: because the Job's last change came before its trigger subscribed (it had already ended: a triggerer
#: restart, a trigger moved here; or a fail-fast/timeout ending of a Job unchanged since): one GET reads
#: it whole for the event's ``job``.
GET_PROJECTED = "projected"

#: ``[jobwatch] namespace_watch_linger_seconds`` default. When the last trigger of a namespace leaves, its
#: two watches stay open this long in case another trigger arrives: a DAG whose deferred tasks follow one
#: another in one namespace then keeps one warm cache instead of paying a full LIST per task. Idle, a
#: lingering watch costs two open connections and its cache; 60 s is about one task's start-up time.
DEFAULT_LINGER_SECONDS = 60.0

#: While the API fails, how often a namespace watch wakes its triggers to check their failure tolerance.
HEALTH_CHECK_SECONDS = 1.0


def _conf_str(key: str, default: str) -> str:
    try:
        from airflow.configuration import conf
    except ImportError:  # pragma: no cover - the registry is usable without Airflow (benchmarks, tests)
        return default
    return str(conf.get("jobwatch", key, fallback=default) or default).strip()


def job_label_selector_from_conf() -> str | None:
    """``[jobwatch] job_label_selector``: restricts the per-namespace Job informer (None = every Job)."""
    return _conf_str("job_label_selector", "") or None


def linger_seconds_from_conf() -> float:
    """``[jobwatch] namespace_watch_linger_seconds`` (>= 0)."""
    raw = _conf_str("namespace_watch_linger_seconds", str(DEFAULT_LINGER_SECONDS))
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"[jobwatch] namespace_watch_linger_seconds must be a number of seconds >= 0, got {raw!r}"
        ) from None
    if value < 0:
        raise ValueError(f"[jobwatch] namespace_watch_linger_seconds must be >= 0, got {raw!r}")
    return value


@dataclass(frozen=True)
class WatchKey:
    """Identifies one shared watch: a cluster, a namespace and the credential it is opened with.

    :param cluster: ``ClusterConfig.identity()``: server, context and user *names*, for messages.
    :param namespace: the watched namespace.
    :param credential: ``ClusterConfig.credential_digest()``: a keyed digest of the credential source.
        Names alone are not enough: two kubeconfigs can use the same names with different tokens,
        and a watch opened with one user's credential must never answer another user's trigger (it
        would show Jobs the other may not read, or keep failing with a credential that expired). A
        watch is therefore shared only between triggers whose credentials are the same.
    """

    cluster: str
    namespace: str
    credential: str = field(default="", repr=False)


ClientFactory = Callable[[], Awaitable[Any]]
"""Coroutine function returning a ``kubernetes_asyncio.client.ApiClient`` for the watch's cluster."""


def _uid(obj: dict[str, Any]) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else None


def _name(obj: dict[str, Any]) -> str | None:
    name = (obj.get("metadata") or {}).get("name")
    return name if isinstance(name, str) else None


def _owner_uid(pod: dict[str, Any]) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    for key in _POD_OWNER_LABELS:
        if labels.get(key):
            return str(labels[key])
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job":
            return str(ref.get("uid"))
    return None


class NamespaceWatch:
    """One Job informer and one pod informer for one namespace of one cluster, shared by its triggers.

    All methods run in the event loop that owns the registry; informer callbacks are synchronous, so
    the index below is always consistent with what the informers have delivered.
    """

    def __init__(
        self,
        key: WatchKey,
        client_factory: ClientFactory,
        *,
        config: InformerConfig,
        job_label_selector: str | None = None,
        job_gets: Counter[str] | None = None,
    ) -> None:
        self.key = key
        self._client_factory = client_factory
        self._config = config
        self.job_label_selector = job_label_selector or None
        # Set while no trigger uses the watch and it lingers before stopping (see DEFAULT_LINGER_SECONDS).
        self.linger_task: asyncio.Task[None] | None = None
        self.idle_since: float | None = None
        self._api_client: Any = None
        self.jobs: Informer | None = None
        self.pods: Informer | None = None
        # The namespace's FailedCreate events, watched only once a trigger's Job shows no pod for a
        # while (see refusals()).
        self._refusals: Refusals | None = None
        self.refcount = 0
        # job name -> callbacks of the triggers waiting for that Job
        self._listeners: dict[str, dict[int, Callable[[], None]]] = {}
        # job name -> the uid each of those triggers waits for (None: any Job of that name)
        self._listener_uids: dict[str, dict[int, str | None]] = {}
        self._next_listener_id = 0
        # controller uid -> uids of its pods (the pods themselves are read from the pod informer's store);
        # fed only by the pod informer's events. A tuple: most Jobs have one pod, and a tuple of one is a
        # fraction of a dict's size, which counts with 50,000 ended Jobs in the namespace.
        self._pods_by_job: dict[str, tuple[str, ...]] = {}
        self._tombstones = Tombstones()
        # Job uid -> (job name, pod uid -> final copy) of pods that ended and were then deleted, kept only
        # while a trigger waits for that Job's name: a Job removed with Foreground propagation (as
        # ttlSecondsAfterFinished does) loses its pods before its own DELETED event, and the pod watch
        # can be ahead of the Job watch, so their final states (exit code, XCom) must outlive the pods.
        self._ended_pods: dict[str, tuple[str, dict[str, dict[str, Any]]]] = {}
        self._created_at = time.monotonic()
        self._last_error: str | None = None
        self._ready: asyncio.Task[None] | None = None
        self._stopping = False
        # Resolved whenever the triggers' safety nets should look again: a health change, and every
        # HEALTH_CHECK_SECONDS while the API fails or refuses us (see changed()).
        # One future per waiting trigger, all resolved at the next change. Not one shared future: each
        # waiter would add a callback to it and remove it again on every wake-up, and a future's callback
        # removal scans all its callbacks, so ten thousand waiters cost the loop O(n^2).
        self._change_waiters: set[asyncio.Future[None]] = set()
        self._reported_synced = False
        self._reported_failing = False
        self._health_checker: asyncio.Task[None] | None = None
        #: GETs of a Job its triggers sent, by reason (GET_MISSING, GET_PROJECTED); see count_job_get().
        self.job_gets: Counter[str] = Counter()
        self._registry_job_gets = job_gets

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """Whether the watch's start (its informers' first sync) finished, neither failed nor cancelled."""
        ready = self._ready
        return ready is not None and ready.done() and not ready.cancelled() and ready.exception() is None

    def ensure_started(self) -> asyncio.Task[None]:
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_task(
                self._start(), name=f"jobwatch-namespace-watch-{self.key.namespace}"
            )
        return self._ready

    async def _start(self) -> None:
        self._api_client = await self._client_factory()
        ns = self.key.namespace
        # Both stores keep each object packed (compact JSON, deflated; kube/engine/store.py), decoded on every
        # read: the triggerer's memory then follows the objects' count at a few hundred bytes each,
        # instead of several KiB of dicts each, in a namespace that keeps thousands of finished Jobs.
        # A read costs a decode (tens of microseconds), and a trigger reads only its own Job and pods.
        config = dataclasses.replace(self._config, compact_store=True)
        # Jobs: every Job of the namespace (a trigger may wait for any of them), unless the user narrowed it
        # with [jobwatch] job_label_selector; a Job outside the selector is then read by a GET every
        # poll_interval instead (JobTrigger's fallback for a Job missing from the cache).
        self.jobs = Informer(
            self._api_client,
            kind="jobs",
            namespace=ns,
            label_selector=self.job_label_selector,
            config=config,
            name=f"jobs/{ns}" + (f" l={self.job_label_selector}" if self.job_label_selector else ""),
            observer=metrics.InformerMetrics("triggerer", "jobs", ns),
        )
        self.pods = Informer(
            self._api_client,
            kind="pods",
            namespace=ns,
            label_selector=POD_LABEL_SELECTOR,
            config=config,
            name=f"job-pods/{ns}",
            observer=metrics.InformerMetrics("triggerer", "pods", ns),
        )
        # Subscribe before start(): the initial list's ADDED events then build the pod index, and
        # every later relist's reconciliation (MODIFIED / DELETED_UNKNOWN) keeps it right.
        # The Jobs triggers wait for are stored whole (their event carries the whole Job, as upstream's
        # does, with no GET at the end); the namespace's other Jobs are projected. The informer asks for
        # every version it stores (listed, watched, confirmed), so once a trigger listens for a name,
        # the next version of that Job, and every later one, is kept whole: a Job that changes after its
        # trigger subscribed (it ends, at the latest) ends whole in the cache.
        self.jobs.keep_whole = self._has_listeners
        self.jobs.subscribe(self._on_job_event, self._on_health)
        self.pods.subscribe(self._on_pod_event, self._on_health)
        await self.jobs.start()
        await self.pods.start()
        self._health_checker = asyncio.get_running_loop().create_task(
            self._check_health(), name=f"jobwatch-namespace-health-{ns}"
        )

    async def _check_health(self) -> None:
        """While the API fails (or refuses us), wake the triggers' safety nets every HEALTH_CHECK_SECONDS,
        so each checks its own failure tolerance on time; while all is well, this wakes nobody. One timer
        per namespace, instead of one per trigger."""
        while True:
            await asyncio.sleep(HEALTH_CHECK_SECONDS)
            if self.api_failing_for() is not None or self.access_denied:
                self._wake()

    def changed(self) -> asyncio.Future[None]:
        """A future of the caller's own, resolved the next time the triggers should re-check the watch's
        health (a connection, health or sync change; every HEALTH_CHECK_SECONDS while the API fails).
        A caller that stops waiting before then hands it back with :meth:`forget`."""
        waiter = asyncio.get_running_loop().create_future()
        self._change_waiters.add(waiter)
        return waiter

    def forget(self, waiter: asyncio.Future[None]) -> None:
        """Stop tracking a :meth:`changed` future (its caller woke up for another reason)."""
        self._change_waiters.discard(waiter)
        waiter.cancel()

    def _wake(self) -> None:
        waiters, self._change_waiters = self._change_waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def stop(self) -> None:
        """Stop both informers and close the client. Prompt; safe to call more than once."""
        self._stopping = True
        if self._health_checker is not None:
            self._health_checker.cancel()
            with contextlib.suppress(BaseException):
                await self._health_checker
            self._health_checker = None
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
            with contextlib.suppress(BaseException):
                await self._ready
        for informer in (self.jobs, self.pods):
            if informer is not None:
                with contextlib.suppress(Exception):
                    await informer.stop()
        if self._refusals is not None:
            with contextlib.suppress(Exception):
                await self._refusals.stop()
        if self._api_client is not None:
            with contextlib.suppress(Exception):
                await self._api_client.close()
            self._api_client = None

    def refusals(self) -> Refusals | None:
        """The shared watch of this namespace's ``FailedCreate`` events (triggers/refusals.py), started
        by the first call: a trigger calls it only once its Job has shown no pod past a grace, so a
        triggerer whose Jobs all get pods never watches events. None until the watch has its client."""
        if self._refusals is None and self._api_client is not None and not self._stopping:
            self._refusals = Refusals(self._api_client, self.key.namespace, config=self._config)
            self._refusals.start()
        return self._refusals

    @property
    def api_client(self) -> Any:
        """The shared ``kubernetes_asyncio`` ApiClient (None until started)."""
        return self._api_client

    @property
    def synced(self) -> bool:
        """Both informers have completed their first list: the cache can answer "does the Job exist"."""
        return bool(self.jobs and self.pods and self.jobs.synced and self.pods.synced)

    async def wait_synced(self, timeout: float) -> bool:  # noqa: ASYNC109 - mirrors Informer.wait_synced
        """Wait (at most ``timeout`` s) until both informers have their first list; False if not yet."""
        await asyncio.shield(self.ensure_started())
        if self.jobs is None or self.pods is None:
            return False
        return await self.jobs.wait_synced(timeout) and await self.pods.wait_synced(timeout)

    # -- reading -----------------------------------------------------------------------------------
    def job(self, name: str) -> dict[str, Any] | None:
        """The Job's current state in the cache, or None if the cache has no Job of that name."""
        if self.jobs is None:
            return None
        return self.jobs.by_name(self.key.namespace, name)

    def pods_of(self, job_uid: str | None) -> list[dict[str, Any]]:
        """The cached pods the Job controller created for the Job with this uid, and the final copies of
        those of its pods that ended and were deleted while a trigger waited for the Job."""
        if not job_uid or self.pods is None:
            return []
        pods = [pod for uid in self._pods_by_job.get(job_uid, ()) if (pod := self.pods.get(uid)) is not None]
        gone = self._ended_pods.get(job_uid)
        if gone is not None:
            pods.extend(gone[1].values())
        return pods

    def tombstone(self, name: str) -> Tombstone | None:
        """The last state of the Job of this name that was deleted (or vanished) recently, with the
        freshest copy seen of each of its pods; None if there is none."""
        return self._tombstones.get(name)

    def api_failing_for(self) -> float | None:
        """Seconds the API has been failing without a success in between, or None if it is fine.

        Measured per informer from the end of its last working list/watch (``seconds_since_sync``), or
        from the start of this watch when it never got a first list through; the worse one counts.
        """
        now = time.monotonic()
        worst: float | None = None
        for informer in (self.jobs, self.pods):
            if informer is None or not informer.failing:
                continue
            health = informer.health
            if health.consecutive_failures == 0:
                continue
            if health.last_error:
                self._last_error = health.last_error
            if health.seconds_since_sync is not None and not health.connected:
                failing = health.seconds_since_sync
            elif health.seconds_since_sync is None:
                failing = now - self._created_at
            else:
                continue
            worst = failing if worst is None else max(worst, failing)
        return worst

    @property
    def access_denied(self) -> str | None:
        """The explained 401/403 either informer is refused with right now (permanent), or None."""
        for informer in (self.jobs, self.pods):
            if informer is not None and informer.failing and (denied := informer.health.access_denied):
                return denied
        return None

    @property
    def last_error(self) -> str | None:
        """The last list/watch error either informer saw (for the trigger's ``error`` message)."""
        return self._last_error

    # -- subscriptions -----------------------------------------------------------------------------
    def listen(
        self, job_name: str, callback: Callable[[], None], *, job_uid: str | None = None
    ) -> Callable[[], None]:
        """Call ``callback`` on every event about the Job ``job_name`` or its pods; ``job_uid`` (when
        known) is the uid the caller waits for: a Job of that name with another uid is not its Job."""
        lid = self._next_listener_id
        self._next_listener_id += 1
        self._listeners.setdefault(job_name, {})[lid] = callback
        self._listener_uids.setdefault(job_name, {})[lid] = job_uid

        def remove() -> None:
            callbacks = self._listeners.get(job_name)
            if callbacks is not None:
                callbacks.pop(lid, None)
                if not callbacks:
                    self._listeners.pop(job_name, None)
            uids = self._listener_uids.get(job_name)
            if uids is not None:
                uids.pop(lid, None)
                if not uids:
                    self._listener_uids.pop(job_name, None)
            if job_name not in self._listeners:  # nobody waits for it any more
                for uid in [uid for uid, (name, _) in self._ended_pods.items() if name == job_name]:
                    del self._ended_pods[uid]

        return remove

    def _has_listeners(self, job: dict[str, Any]) -> bool:
        return _name(job) in self._listeners

    def count_job_get(self, reason: str) -> None:
        """A trigger of this watch is about to GET its Job, for ``reason`` (GET_MISSING, GET_PROJECTED)."""
        self.job_gets[reason] += 1
        if self._registry_job_gets is not None:
            self._registry_job_gets[reason] += 1
        metrics.job_get(self.key.namespace, reason)

    def _notify(self, job_name: str | None) -> None:
        if job_name is None:
            return
        for callback in list(self._listeners.get(job_name, {}).values()):
            try:
                callback()
            except Exception:  # a broken trigger must not take the shared watch down with it
                log.exception("JobTrigger callback for Job %s/%s failed", self.key.namespace, job_name)

    def _notify_all(self) -> None:
        for name in list(self._listeners):
            self._notify(name)

    # -- informer callbacks ------------------------------------------------------------------------
    def _on_job_event(self, event: InformerEvent) -> None:
        name = _name(event.obj)
        if name is None:
            return
        if event.type in (EventType.DELETED, EventType.DELETED_UNKNOWN):
            uid = _uid(event.obj)
            # A Job a trigger waits for keeps its whole last state (the event carries the whole Job, as
            # upstream's does); any other Job only what a decision reads.
            self._tombstones.bury(
                name,
                event.obj,
                uid,
                whole=name in self._listeners,
                observed=event.type is EventType.DELETED,
                pods=[(_uid(pod) or "", pod) for pod in self.pods_of(uid)],
            )
            self._ended_pods.pop(uid or "", None)  # the tombstone holds them now
        elif event.type is EventType.ADDED:
            self._tombstones.created(name, _uid(event.obj))
        self._notify(name)

    def _on_pod_event(self, event: InformerEvent) -> None:
        owner = _owner_uid(event.obj)
        pod_uid = _uid(event.obj)
        if owner is None or pod_uid is None:
            return
        labels = (event.obj.get("metadata") or {}).get("labels") or {}
        job_name = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        pods = self._pods_by_job.get(owner, ())
        if event.type in (EventType.DELETED, EventType.DELETED_UNKNOWN):
            if pod_uid in pods:
                rest = tuple(uid for uid in pods if uid != pod_uid)
                if rest:
                    self._pods_by_job[owner] = rest
                else:
                    del self._pods_by_job[owner]
            phase = (event.obj.get("status") or {}).get("phase")
            if (
                phase in ("Succeeded", "Failed")
                and job_name in self._listeners
                and not self._tombstones.holds(owner)
            ):
                self._ended_pods.setdefault(owner, (job_name, {}))[1][pod_uid] = slim_pod(event.obj)
        elif pod_uid not in pods:
            self._pods_by_job[owner] = (*pods, pod_uid)
        # While its Job's tombstone lives, a pod keeps updating it: the pod watch can lag behind the Job
        # watch, and a pod's last events (its DELETED one included) carry its final state, exit code
        # and termination message (the XCom value), which the Job's DELETED event did not have.
        self._tombstones.learn(owner, pod_uid, event.obj)
        self._notify(job_name)

    def _on_health(self, health: InformerHealth) -> None:
        if health.last_error:
            self._last_error = health.last_error
        synced = self.synced
        failing = self.api_failing_for() is not None or self.access_denied is not None
        sync_changed = synced != self._reported_synced
        if sync_changed:  # the cache can now answer (or no longer can)
            self._reported_synced = synced
            self._notify_all()  # each trigger decides from the cache at once
        if failing or self._reported_failing or (sync_changed and (not synced or self._any_job_missing())):
            # The triggers' safety nets re-check their API failure tolerance (and recover with the API),
            # and, once synced, start the grace after which they confirm a Job the first list did not
            # have (one GET each, GET_MISSING, if the watch does not deliver it meanwhile). A healthy
            # watch syncing with every Job in it, or merely reconnecting (timeoutSeconds, a resync), wakes
            # nobody: with 10,000 triggers each wake costs every one of them a loop turn.
            self._wake()
        self._reported_failing = failing

    def _any_job_missing(self) -> bool:
        """Whether a trigger waits for a Job that the synced cache does not hold (deleted, or not yet
        delivered: its trigger confirms which; a tombstone may answer for it, or be of another uid).
        A Job of the same name with another uid than the one a trigger waits for is not its Job, so it
        counts as missing (it was re-created under that name)."""
        if self.jobs is None:
            return bool(self._listener_uids)
        for name, uids in self._listener_uids.items():
            cached = self.jobs.uid_of(self.key.namespace, name)  # no decode: 10,000 listeners, one pass
            if cached is None:
                return True
            if any(uid is not None and uid != cached for uid in uids.values()):
                return True
        return False


class Subscription:
    """A trigger's handle on a shared :class:`NamespaceWatch`; ``close()`` gives it back (idempotent)."""

    def __init__(self, registry: InformerRegistry, watch: NamespaceWatch, remove: Callable[[], None]):
        self._registry = registry
        self.watch = watch
        self._remove: Callable[[], None] | None = remove

    async def close(self) -> None:
        if self._remove is None:
            return
        remove, self._remove = self._remove, None
        remove()
        await self._registry.release(self.watch)


class InformerRegistry:
    """The shared watches of one event loop (a triggerer runs all its triggers in one loop)."""

    def __init__(self, *, linger_seconds: float | None = None, job_label_selector: str | None = None) -> None:
        """:param linger_seconds: how long an unused watch stays open (None: ``[jobwatch]
            namespace_watch_linger_seconds``, read when a watch becomes idle).
        :param job_label_selector: restricts the Job informers (None: ``[jobwatch] job_label_selector``,
            read when a watch starts)."""
        self._watches: dict[WatchKey, NamespaceWatch] = {}
        self._linger_seconds = linger_seconds
        self._job_label_selector = job_label_selector
        #: Lingering watches that were picked up again by a new trigger, and ones closed after lingering.
        self.linger_reuses = 0
        self.linger_closes = 0
        #: GETs of a Job by the triggers of every watch this registry opened, by reason (GET_MISSING,
        #: GET_PROJECTED); 0 for a trigger that subscribed before its Job ended and whose Job the watch
        #: delivered.
        self.job_gets: Counter[str] = Counter()

    def _report(self, watch: NamespaceWatch, *, opened: bool) -> None:
        """Metrics and status file: the whole picture when a watch opened, else only this namespace's
        trigger count (subscribe and release run once per trigger: 10,000 triggers, 10,000 calls)."""
        if opened:
            metrics.shared_watches(self.active())
            return
        namespace = watch.key.namespace
        metrics.watch_subscribers(
            namespace, sum(w.refcount for k, w in self._watches.items() if k.namespace == namespace)
        )

    def active(self) -> dict[WatchKey, int]:
        """Subscriber count per shared watch (for tests, logs and the benchmark)."""
        return {key: watch.refcount for key, watch in self._watches.items()}

    async def subscribe(
        self,
        key: WatchKey,
        client_factory: ClientFactory,
        *,
        job_name: str,
        on_change: Callable[[], None],
        config: InformerConfig | Callable[[], InformerConfig],
        job_uid: str | None = None,
    ) -> Subscription:
        """Join (or start) the shared watch for ``key`` and be called back on changes to ``job_name``.

        ``config`` (or the function that reads it) is only used by the subscriber that starts the watch,
        so the thousands of triggers that join a running watch read no configuration. Raises what starting the watch
        raised (e.g. an unreadable kubeconfig); the failed watch is discarded so a later subscriber
        retries from scratch.
        """
        watch = self._watches.get(key)
        opened = watch is None
        if watch is None:
            # Created and registered with no await in between, so concurrent subscribers share it.
            selector = (
                self._job_label_selector
                if self._job_label_selector is not None
                else job_label_selector_from_conf()
            )
            watch = NamespaceWatch(
                key,
                client_factory,
                config=config() if callable(config) else config,
                job_label_selector=selector,
                job_gets=self.job_gets,
            )
            self._watches[key] = watch
        elif watch.linger_task is not None:
            task, watch.linger_task = watch.linger_task, None  # cleared first: the task then closes nothing
            task.cancel()
            watch.idle_since = None
            self.linger_reuses += 1
        watch.refcount += 1
        self._report(watch, opened=opened)
        remove = watch.listen(job_name, on_change, job_uid=job_uid)
        try:
            await asyncio.shield(watch.ensure_started())
        except BaseException:
            remove()
            await self.release(watch)
            raise
        return Subscription(self, watch, remove)

    async def release(self, watch: NamespaceWatch) -> None:
        """Give back one trigger's use of ``watch``: the last one keeps it lingering (warm) or closes it."""
        watch.refcount -= 1
        if watch.refcount > 0:
            self._report(watch, opened=False)
            return
        linger = self._linger_seconds if self._linger_seconds is not None else linger_seconds_from_conf()
        started_ok = watch.started
        # A watch refused with 401/403 is not kept: it could only hand its refusal to the next trigger
        # of the same credential, which had better start afresh (re-reading its token, re-running its
        # exec plugin) than inherit a dead cache. (A trigger of another credential never joins it: the
        # key carries the credential's digest.)
        if linger > 0 and started_ok and watch.access_denied is None:
            # Keep the warm cache for a while: the next trigger of this namespace joins it without a LIST.
            log.debug("Last JobTrigger left %s; keeping its informers for %.0f s", watch.key, linger)
            watch.idle_since = time.monotonic()
            watch.linger_task = asyncio.get_running_loop().create_task(
                self._linger(watch, linger), name=f"jobwatch-linger-{watch.key.namespace}"
            )
            return
        await self._close(watch)

    async def _linger(self, watch: NamespaceWatch, seconds: float) -> None:
        """Close ``watch`` after ``seconds`` unless a trigger picked it up again (which clears
        ``linger_task`` before cancelling this). Also closes it when the loop shuts down and cancels every
        task (``asyncio.run`` in the operator's worker mode), so no client session is left open."""
        me = asyncio.current_task()
        try:
            await asyncio.sleep(seconds)
        finally:
            if watch.linger_task is me and watch.refcount == 0:
                watch.linger_task = None
                self.linger_closes += 1
                await self._close(watch)

    async def _close(self, watch: NamespaceWatch) -> None:
        # Unregister before awaiting the stop, so a subscriber arriving meanwhile starts a fresh watch
        # instead of joining one that is shutting down.
        if self._watches.get(watch.key) is watch:
            del self._watches[watch.key]
        metrics.shared_watches(self.active())
        log.debug("Closing the informers of %s (no JobTrigger uses them)", watch.key)
        await watch.stop()

    async def close(self) -> None:
        """Stop every watch at once, lingering or not (tests, shutdown)."""
        for watch in list(self._watches.values()):
            if watch.linger_task is not None:
                task, watch.linger_task = watch.linger_task, None
                task.cancel()
            await self._close(watch)


_REGISTRIES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, InformerRegistry] = (
    weakref.WeakKeyDictionary()
)


def get_registry() -> InformerRegistry:
    """The registry of the running event loop (the triggerer has one loop; each test has its own)."""
    loop = asyncio.get_running_loop()
    registry = _REGISTRIES.get(loop)
    if registry is None:
        registry = _REGISTRIES[loop] = InformerRegistry()
    return registry

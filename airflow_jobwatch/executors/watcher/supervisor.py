"""The parent side of the KubernetesJobWatcher: supervises the children and turns their messages into results.

What the upstream watcher gets wrong and this side answers (see docs/executor.md):

* A dead or wedged child loses whatever happened until its replacement lists again. Pods deleted in
  that gap are simply *absent* from the replacement's first list, so only the PARENT knows to miss
  them: it remembers which pods it launched and has not yet seen finish
  (:meth:`WatcherSupervisor.track`) and hands that set to each new child, which checks every one
  missing from its first list with a GET - in the child, so that thousands of them or a slow API
  server never stall the scheduler loop. A 404 (:class:`PodGone`) means the pod is gone for good and
  it is reported ``failed``/``Deleted`` exactly once.
* A pod is tracked from the moment its create is *sent* (:meth:`WatcherSupervisor.track` with
  ``confirmed=False``), so a create whose answer is lost (a timeout on a create the server carried
  out) still has its events reported.
* No resourceVersion is handed between processes (the upstream ``ResourceVersion`` singleton was
  written in the child and read in the parent, which never worked): each child starts with a list.
* Liveness is a heartbeat written by the child's *event loop* into shared memory, so a child whose
  loop is stuck (not merely a live PID) is detected and replaced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Hashable, Iterable

from airflow_jobwatch.executors.watcher.child import CHILD_HEARTBEAT_INTERVAL_SECONDS
from airflow_jobwatch.executors.watcher.children import Child, ChildProcess, Slot, SupervisorCounters
from airflow_jobwatch.executors.watcher.inbox import MAX_MESSAGES_PER_POLL, Tracked
from airflow_jobwatch.executors.watcher.messages import PodRef, PodResult
from airflow_jobwatch.executors.watcher.slots import (
    CHILD_STARTUP_GRACE_SECONDS,
    CHILD_STOP_GRACE_SECONDS,
    HEALTHY_LIFETIME_FOR_IMMEDIATE_RESTART_SECONDS,
    RESTART_BACKOFF_RESET_AFTER_SECONDS,
)
from airflow_jobwatch.executors.watcher.status import StatusReporting
from airflow_jobwatch.kube.cluster.client import ClusterConfig
from airflow_jobwatch.kube.engine.informer import InformerConfig

log = logging.getLogger(__name__)

__all__ = [
    "CHILD_STARTUP_GRACE_SECONDS",
    "CHILD_STOP_GRACE_SECONDS",
    "HEALTHY_LIFETIME_FOR_IMMEDIATE_RESTART_SECONDS",
    "MAX_MESSAGES_PER_POLL",
    "RESTART_BACKOFF_RESET_AFTER_SECONDS",
    "SupervisorCounters",
    "WatcherSupervisor",
    "Child",
    "ChildProcess",
    "Slot",
    "Tracked",
]


class WatcherSupervisor(StatusReporting):
    """Runs one KubernetesJobWatcher child per namespace scope and turns its messages into results.

    The owner (the executor) calls :meth:`track` for each pod it created, and :meth:`poll` on every
    heartbeat; :meth:`poll` returns, for tracked pods only, the first ``running`` observation and
    exactly one terminal result, restarts dead or wedged children, and reconciles after a restart.

    :param cluster: how to reach the API server (passed to the children, never a live client).
    :param namespaces: one child per entry; ``None`` means one cluster-wide child.
    :param label_selector: selects this scheduler's worker pods.
    :param informer_config: watch timeouts and backoff of the children's informers.
    :param fatal_waiting_reasons: waiting reasons that make a Pending pod failed (ErrImagePull ...).
    :param unresponsive_after: seconds without a heartbeat from a child's event loop before it is
        presumed wedged and replaced.
    :param async_client_factory: import path of a callable returning a ``kubernetes_asyncio`` CoreV1Api
        (``[kubernetes_executor] async_client_factory``); the children build their client with it instead
        of from ``cluster``.
    :param restart_backoff_initial: first delay before restarting a failed child; doubles (with
        jitter) for each consecutive failure up to ``restart_backoff_max``.
    """

    def __init__(
        self,
        *,
        cluster: ClusterConfig,
        namespaces: Iterable[str | None],
        label_selector: str,
        informer_config: InformerConfig,
        fatal_waiting_reasons: Collection[str],
        unresponsive_after: float = 60.0,
        restart_backoff_initial: float = 0.8,
        restart_backoff_max: float = 30.0,
        name: str = "jobwatch-executor",
        async_client_factory: str | None = None,
    ) -> None:
        if unresponsive_after <= CHILD_HEARTBEAT_INTERVAL_SECONDS * 4:
            raise ValueError(
                f"unresponsive_after must be well above the child heartbeat interval "
                f"({CHILD_HEARTBEAT_INTERVAL_SECONDS} s); got {unresponsive_after!r}"
            )
        if restart_backoff_initial <= 0 or restart_backoff_max < restart_backoff_initial:
            raise ValueError(
                f"restart backoff must satisfy 0 < initial <= max; got initial={restart_backoff_initial!r}, "
                f"max={restart_backoff_max!r}"
            )
        self._unresponsive_after = unresponsive_after
        self._backoff_initial = restart_backoff_initial
        self._backoff_max = restart_backoff_max
        # A new interpreter, not fork: a forked child would inherit every file descriptor of the scheduler
        # (database connections, listening sockets of anything in-process) and fork a process that
        # runs threads. Not multiprocessing's spawn either: it re-runs the scheduler's __main__ (the
        # `airflow` console script, which imports Airflow) in the child. `python -m
        # airflow_jobwatch.executors.watcher` imports kube/ and this package, never Airflow.
        self._cluster = cluster
        self._label_selector = label_selector
        self._informer_config = informer_config
        self._fatal_waiting_reasons = frozenset(fatal_waiting_reasons)
        self._name = name
        self._async_client_factory = async_client_factory
        self._slots: dict[str | None, Slot] = {}
        for ns in namespaces:
            self._slots[ns] = self._new_slot(ns)
        if not self._slots:
            raise ValueError("WatcherSupervisor needs at least one namespace scope (None = all namespaces)")
        self._tracked: dict[PodRef, Tracked] = {}
        # Pods that left our label selector (another scheduler adopted them). The watch delivered that as a
        # deletion, after which a watch never reports the pod again; if it is adopted back, the namespace's
        # watcher is replaced, so that a fresh list sees it.
        self._left: set[PodRef] = set()
        self.counters = SupervisorCounters()
        self._started = False

    # --- namespaces -----------------------------------------------------------------------

    def watches(self, namespace: str) -> bool:
        """Whether pods in ``namespace`` are watched (by its own child or a cluster-wide one)."""
        return None in self._slots or namespace in self._slots

    def add_namespace(self, namespace: str) -> None:
        """Watch one more namespace (a ``pod_override`` put a pod there); started at once if running."""
        if self.watches(namespace):
            return
        slot = self._new_slot(namespace)
        self._slots[namespace] = slot
        log.info("Watching namespace %s too (a task's pod_override puts its pod there)", namespace)
        if self._started:
            self._start_child(slot)

    def namespaces(self) -> list[str | None]:
        return list(self._slots)

    # --- tracking -------------------------------------------------------------------------

    def track(self, namespace: str, name: str, key: Hashable, *, confirmed: bool = True) -> None:
        """Remember a pod we created (or adopted) until its terminal state has been reported.

        Call it with ``confirmed=False`` *before* sending the create, and again (``confirmed=True``)
        once the server answered: events that arrive in between (or after a create whose answer was
        lost) are reported all the same.
        """
        ref = (namespace, name)
        if ref in self._left:
            self._left.discard(ref)
            slot = self._slots.get(namespace) or self._slots.get(None)
            if slot is not None:
                slot.relist_wanted = f"pod {namespace}/{name} left the label selector and is ours again"
        tracked = self._tracked.get(ref)
        if tracked is not None and tracked.key == key:
            if confirmed and not tracked.confirmed:
                tracked.confirmed = True
                self._confirmed_after_sync(ref)
            return
        self._tracked[ref] = Tracked(key=key, namespace=namespace, name=name, confirmed=confirmed)

    def untrack(self, namespace: str, name: str) -> None:
        """Forget a pod (revoked task): nothing more will be reported for it."""
        self._tracked.pop((namespace, name), None)

    def tracked(self) -> dict[PodRef, Hashable]:
        return {ref: t.key for ref, t in self._tracked.items()}

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        for slot in self._slots.values():
            self._start_child(slot)
        self._started = True

    def stop(self, *, timeout: float = CHILD_STOP_GRACE_SECONDS) -> list[PodResult]:
        """Read what the children already sent, then stop them. Returns the last results."""
        results = self.poll(restart=False) if self._started else []
        for slot in self._slots.values():
            if slot.child is not None:
                self._stop_child(slot.child, timeout=timeout)
                slot.child = None
        self._started = False
        return results

    # --- the loop -------------------------------------------------------------------------

    def poll(self, *, restart: bool = True) -> list[PodResult]:
        """Drain the children's messages, check their health, reconcile; return reportable results."""
        results: list[PodResult] = []
        now = time.monotonic()
        for slot in self._slots.values():
            child = slot.child
            if child is not None and not child.closed:
                self._drain(slot, child, results)
            if not restart:
                continue
            if child is not None and slot.relist_wanted is not None:
                self._replace(slot, slot.relist_wanted, now, results, healthy=True)
                slot.relist_wanted = None
            elif child is not None:
                reason = self._unhealthy_reason(child, now)
                if reason is not None:
                    self._replace(slot, reason, now, results)
                elif child.synced and now - child.started_at > RESTART_BACKOFF_RESET_AFTER_SECONDS:
                    slot.backoff.reset()
            if slot.child is None and now >= slot.next_start_at:
                self._start_child(slot)
        self._update_counters()
        return results

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

import io
import logging
import multiprocessing
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Hashable, Iterable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import IO, Any

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.watcher.child import CHILD_HEARTBEAT_INTERVAL_SECONDS, FileHeartbeat
from airflow_jobwatch.executors.watcher.messages import (
    Metric,
    PodAdopted,
    PodGone,
    PodRef,
    PodResult,
    PodUpdate,
    Synced,
    WatcherSpec,
    WatcherStats,
)
from airflow_jobwatch.kube.backoff import Backoff
from airflow_jobwatch.kube.client import ClusterConfig
from airflow_jobwatch.kube.informer import InformerConfig

log = logging.getLogger(__name__)

# presumed wedged; a spawned interpreter importing kube/ takes ~0.5 s, much more on a loaded machine.
CHILD_STARTUP_GRACE_SECONDS = 30.0
# Grace given to a child asked to stop (SIGTERM) before it is SIGKILLed.
CHILD_STOP_GRACE_SECONDS = 5.0
# A replacement child that stayed healthy this long resets the restart backoff, so one crash an
# hour restarts at once while a crash loop backs off up to the maximum.
RESTART_BACKOFF_RESET_AFTER_SECONDS = 120.0
# A child that had synced and lived at least this long before it died or wedged is replaced at once
# (no backoff): that is an incident, not a crash loop, and events wait until a watcher runs again.
# A crash loop (children dying before their first sync, or within seconds) still backs off; the
# floor keeps immediate restarts to at most one per 5 s, i.e. one LIST per 5 s at worst.
HEALTHY_LIFETIME_FOR_IMMEDIATE_RESTART_SECONDS = 5.0
# Upper bound of messages read from one child per poll(), so that a burst of events (thousands of
# pods relisted at once) cannot hold the scheduler loop for long; the rest is read next poll.
MAX_MESSAGES_PER_POLL = 20_000


# ---------------------------------------------------------------------------------------------
# The parent side.
# ---------------------------------------------------------------------------------------------


@dataclass
class _Tracked:
    key: Hashable
    namespace: str
    name: str
    reported_running: bool = False
    last_phase: str = "pending"
    # False while the create has been sent but not answered: the pod may or may not exist, so a 404
    # proves nothing and such a pod is not handed to a new child as expected.
    confirmed: bool = True


class _ChildProcess:
    """A watcher child started as ``python -m airflow_jobwatch.executors.watcher``, with the part of
    ``multiprocessing.Process``'s interface the supervisor uses."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def terminate(self) -> None:
        if self.is_alive():
            self._popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class _Child:
    """One generation of the watcher for one namespace scope."""

    process: _ChildProcess
    conn: Connection
    heartbeat: Any
    started_at: float
    #: the pods handed to it at its start: it checks those its first list lacks by itself.
    expected: frozenset[PodRef] = frozenset()
    #: its stdin, for the pods launched while it was starting (see WatcherSupervisor._check_late).
    requests: IO[bytes] | None = None
    #: once synced: the pods of its first list, and the tracked pods whose create was unanswered then.
    listed: frozenset[PodRef] = frozenset()
    unconfirmed_at_sync: set[PodRef] = field(default_factory=set)
    #: requests waiting for the writer thread (a child that does not read never blocks the scheduler).
    outbox: queue.SimpleQueue[bytes | None] | None = None
    synced: bool = False
    closed: bool = False


@dataclass
class _Slot:
    """The watcher of one namespace (or of all namespaces), across child generations."""

    spec: WatcherSpec
    child: _Child | None = None
    generation: int = 0
    restarts: int = 0
    backoff: Backoff = field(default_factory=Backoff)  # restart backoff of this slot's children
    next_start_at: float = 0.0
    relists_done: int = 0  # summed over dead generations
    watches_done: int = 0
    stats: WatcherStats | None = None
    last_restart_reason: str | None = None
    # Why this slot's child must list again from scratch (a pod it saw leave the selector is ours again).
    relist_wanted: str | None = None


@dataclass
class SupervisorCounters:
    """What the demo and the benchmark print."""

    restarts: int = 0
    relists: int = 0
    watches: int = 0
    gap_deleted: int = 0
    adopted_away: int = 0  # tracked pods another scheduler adopted (they left our label selector)
    terminal_reports: int = 0
    running_reports: int = 0
    healthy: bool = True
    last_error: str | None = None
    access_denied: str | None = None  # Why the API refuses the watcher (what to grant)
    per_namespace: dict[str, dict[str, Any]] = field(default_factory=dict)


class WatcherSupervisor:
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
        self._slots: dict[str | None, _Slot] = {}
        for ns in namespaces:
            self._slots[ns] = self._new_slot(ns)
        if not self._slots:
            raise ValueError("WatcherSupervisor needs at least one namespace scope (None = all namespaces)")
        self._tracked: dict[PodRef, _Tracked] = {}
        # Pods that left our label selector (another scheduler adopted them). The watch delivered that as a
        # deletion, after which a watch never reports the pod again; if it is adopted back, the namespace's
        # watcher is replaced, so that a fresh list sees it.
        self._left: set[PodRef] = set()
        self.counters = SupervisorCounters()
        self._started = False

    def _new_backoff(self) -> Backoff:
        # reset_after: a child that stays healthy this long is no longer part of a crash loop.
        return Backoff(
            initial_seconds=self._backoff_initial,
            max_seconds=self._backoff_max,
            reset_after_seconds=RESTART_BACKOFF_RESET_AFTER_SECONDS,
        )

    def _new_slot(self, ns: str | None) -> _Slot:
        spec = WatcherSpec(
            cluster=self._cluster,
            namespace=ns,
            label_selector=self._label_selector,
            informer_config=self._informer_config,
            fatal_waiting_reasons=self._fatal_waiting_reasons,
            name=f"{self._name}-{ns or 'all-namespaces'}",
            async_client_factory=self._async_client_factory,
        )
        return _Slot(spec=spec, backoff=self._new_backoff())

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
        self._tracked[ref] = _Tracked(key=key, namespace=namespace, name=name, confirmed=confirmed)

    def _confirmed_after_sync(self, ref: PodRef) -> None:
        """A create answered only now, whose request was out when the watcher child listed: if the pod is
        not in that list, the child checks it like the pods of :meth:`_check_late`."""
        slot = self._slots.get(ref[0]) or self._slots.get(None)
        child = slot.child if slot is not None else None
        if child is None or ref not in child.unconfirmed_at_sync:
            return
        child.unconfirmed_at_sync.discard(ref)
        if ref not in child.listed:
            self._request_check(child, [ref])

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

    def child_pids(self) -> dict[str | None, int | None]:
        return {ns: (s.child.process.pid if s.child else None) for ns, s in self._slots.items()}

    def all_synced(self) -> bool:
        return all(s.child is not None and s.child.synced for s in self._slots.values())

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

    # --- internals ------------------------------------------------------------------------

    def _start_child(self, slot: _Slot) -> None:
        reader, writer = multiprocessing.Pipe(duplex=False)
        expected = self._expected(slot.spec.namespace)
        with tempfile.TemporaryFile() as hb_file:
            heartbeat = FileHeartbeat(hb_file.fileno())  # 0.0 = has not beaten yet
            payload = pickle.dumps(
                (
                    slot.spec,
                    writer.fileno(),
                    hb_file.fileno(),
                    os.getpid(),
                    expected,
                )
            )
            popen = subprocess.Popen(
                [sys.executable, "-m", "airflow_jobwatch.executors.watcher"],
                stdin=subprocess.PIPE,
                pass_fds=(writer.fileno(), hb_file.fileno()),
                close_fds=True,
            )
            assert popen.stdin is not None
            try:
                # Left open: later requests go the same way (_check_late).
                popen.stdin.write(pickle.dumps((list(sys.path), payload)))
                popen.stdin.flush()
            except OSError:  # it died at once: reported as an exited child by the next poll
                pass
        process = _ChildProcess(popen)
        # Close our copy of the write end: when the child dies, reading then ends with EOFError
        # instead of blocking forever on a half-written message.
        writer.close()
        slot.generation += 1
        slot.child = _Child(
            process=process,
            conn=reader,
            heartbeat=heartbeat,
            started_at=time.monotonic(),
            expected=expected,
            requests=popen.stdin,
        )
        log.info(
            "Started KubernetesJobWatcher for %s (generation %d, pid %s)",
            slot.spec.namespace or "all namespaces",
            slot.generation,
            process.pid,
        )

    def _expected(self, scope: str | None) -> frozenset[PodRef]:
        """The pods a new child of ``scope`` must account for: tracked, confirmed, in its scope."""
        return frozenset(
            ref
            for ref, t in self._tracked.items()
            if t.confirmed and (ref[0] == scope if scope is not None else ref[0] not in self._slots)
        )

    def _check_late(self, slot: _Slot, child: _Child, listed: frozenset[PodRef]) -> None:
        """Ask ``child`` to check the pods launched after it started that its first list lacks.

        Such a pod was not in the child's expected set, so the child would not look for it; if it was
        deleted before the list (preempted or evicted while Pending), no event ever comes and its task
        would stay running for ever. The child GETs each after a grace time (a pod created after the list
        arrives by the watch meanwhile); a 404 comes back as :class:`PodGone`. Written from a thread: a
        child that does not read must never block the scheduler's loop.
        """
        scope = slot.spec.namespace
        in_scope = [
            (ref, t)
            for ref, t in self._tracked.items()
            if (ref[0] == scope if scope is not None else ref[0] not in self._slots)
        ]
        child.listed = listed
        child.unconfirmed_at_sync = {ref for ref, t in in_scope if not t.confirmed}
        late = sorted(
            ref for ref, t in in_scope if t.confirmed and ref not in child.expected and ref not in listed
        )
        if late:
            log.info(
                "KubernetesJobWatcher for %s: %d pod(s) launched while it started are not in its first "
                "list; checking whether they still exist",
                scope or "all namespaces",
                len(late),
            )
            self._request_check(child, late)

    @staticmethod
    def _request_check(child: _Child, refs: list[PodRef]) -> None:
        """Send ``refs`` to ``child`` to check (its stdin), through a writer thread of its own."""
        stream = child.requests
        if stream is None:
            return
        if child.outbox is None:
            outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
            child.outbox = outbox

            def write() -> None:
                while (data := outbox.get()) is not None:
                    try:
                        stream.write(data)
                        stream.flush()
                    except (OSError, ValueError):
                        # The child is gone or being replaced: the next one gets these pods as expected.
                        return

            threading.Thread(target=write, name="jobwatch-watcher-requests", daemon=True).start()
        child.outbox.put(pickle.dumps(("check", refs)))

    def _unhealthy_reason(self, child: _Child, now: float) -> str | None:
        if not child.process.is_alive():
            return f"the watcher process exited with code {child.process.exitcode}"
        last_beat = child.heartbeat.value
        if last_beat == 0.0:
            # Not beaten yet: still importing and connecting (a spawned interpreter on a busy machine
            # can take seconds). Allow it a start-up grace before calling it wedged.
            silent_for = now - child.started_at
            if silent_for > max(self._unresponsive_after, CHILD_STARTUP_GRACE_SECONDS):
                return f"the watcher process has not started beating after {silent_for:.1f} s"
            return None
        silent_for = now - last_beat
        if silent_for > self._unresponsive_after:
            return f"the watcher's event loop has not beaten for {silent_for:.1f} s"
        return None

    def _replace(
        self, slot: _Slot, reason: str, now: float, results: list[PodResult], *, healthy: bool = False
    ) -> None:
        """Stop the slot's child and start another. ``healthy``: not a failure, only a fresh list wanted."""
        child = slot.child
        assert child is not None
        (log.info if healthy else log.error)(
            "KubernetesJobWatcher for %s %s (%s); replacing it. The replacement lists again "
            "and every tracked pod that vanished meanwhile is reported.",
            slot.spec.namespace or "all namespaces",
            "must list again" if healthy else "is unhealthy",
            reason,
        )
        # Make sure it is gone, then read whatever it managed to send before dying (up to EOF).
        self._stop_child(child, timeout=0.0, close=False)
        if not child.closed:
            self._drain(slot, child, results)
        try:
            child.conn.close()
        except OSError:
            pass
        child.closed = True
        slot.child = None
        if not healthy:
            slot.restarts += 1
        slot.last_restart_reason = reason
        if slot.stats is not None:
            slot.relists_done += slot.stats.relists
            slot.watches_done += slot.stats.watches
            slot.stats = None
        if healthy or (
            child.synced and now - child.started_at >= HEALTHY_LIFETIME_FOR_IMMEDIATE_RESTART_SECONDS
        ):
            # It worked (listed, watched) for a while and then died or wedged: an incident, not a crash
            # loop. Every second without a watcher delays events, so replace it at once.
            slot.backoff.reset()
            delay = 0.0
        else:
            # It died while starting or soon after: likely to fail again the same way. Back off.
            # Equal jitter (Backoff): between half the ceiling and the ceiling, so many schedulers
            # restarting after one API outage do not reconnect in step, and the delay still grows for a
            # crash loop.
            delay = slot.backoff.failure(now)
        slot.next_start_at = now + delay
        log.info("Restarting KubernetesJobWatcher in %.2f s", delay)

    def _stop_child(self, child: _Child, *, timeout: float, close: bool = True) -> None:
        proc = child.process
        if proc.is_alive():
            if timeout > 0:
                proc.terminate()
                proc.join(timeout)
            if proc.is_alive():
                proc.kill()
        proc.join(5.0)
        if child.outbox is not None:
            child.outbox.put(None)
        if child.requests is not None:
            try:
                child.requests.close()
            except (OSError, ValueError):
                pass
        if close:
            try:
                child.conn.close()
            except OSError:
                pass
            child.closed = True

    def _drain(self, slot: _Slot, child: _Child, results: list[PodResult]) -> None:
        count = 0
        while count < MAX_MESSAGES_PER_POLL:
            try:
                if not child.conn.poll(0):
                    return
                frame = child.conn.recv_bytes()
            except (EOFError, OSError):
                # The child is gone (possibly mid-message after a SIGKILL): the rest is lost, which
                # is exactly what the post-restart reconciliation is for.
                child.closed = True
                return
            # A frame is one or more pickled messages back to back (the child sends what it had queued).
            stream = io.BytesIO(frame)
            while stream.tell() < len(frame):
                try:
                    msg = pickle.load(stream)
                except Exception:
                    log.exception("Discarding an unreadable message from the KubernetesJobWatcher")
                    break  # the rest of this frame cannot be found without the broken one's end
                count += 1
                self._handle(slot, child, msg, results)

    def _handle(self, slot: _Slot, child: _Child, msg: Any, results: list[PodResult]) -> None:
        if isinstance(msg, PodUpdate):
            self._on_update(msg, results)
        elif isinstance(msg, Metric):
            # The child's informer metrics, sent here through Airflow's Stats (the child never imports it).
            metrics._send(msg.kind, msg.name, msg.value, msg.tags)
        elif isinstance(msg, Synced):
            # The child itself checks the expected pods absent from this list (PodGone / PodUpdate).
            child.synced = True
            self._check_late(slot, child, msg.keys)
        elif isinstance(msg, PodGone):
            self._on_gone(msg, results)
        elif isinstance(msg, PodAdopted):
            self._on_adopted(msg, results)
        elif isinstance(msg, WatcherStats):
            slot.stats = msg
        else:
            log.warning("Ignoring unknown message from the KubernetesJobWatcher: %r", type(msg))

    def _on_update(self, upd: PodUpdate, results: list[PodResult]) -> None:
        ref = (upd.namespace, upd.name)
        tracked = self._tracked.get(ref)
        if tracked is None:
            return  # not ours, revoked, or already reported terminal
        tracked.confirmed = True  # an event proves the pod exists
        state = upd.state
        phase = state.get("phase", "pending")
        terminal = bool(state.get("terminal"))
        tracked.last_phase = phase
        if terminal:
            del self._tracked[ref]
            self.counters.terminal_reports += 1
            result = self._result(tracked, state, upd.annotations, upd.observed_at)
            results.append(replace(result, disruption=upd.disruption) if upd.disruption else result)
        elif phase == "running" and not tracked.reported_running:
            tracked.reported_running = True
            self.counters.running_reports += 1
            results.append(self._result(tracked, state, upd.annotations, upd.observed_at))

    @staticmethod
    def _result(
        tracked: _Tracked,
        state: dict[str, Any],
        annotations: dict[str, str],
        observed_at: float,
        gap: bool = False,
    ) -> PodResult:
        return PodResult(
            key=tracked.key,
            namespace=tracked.namespace,
            name=tracked.name,
            phase=state.get("phase", "pending"),
            terminal=bool(state.get("terminal")),
            reason=state.get("reason"),
            message=state.get("message") or "",
            exit_code=state.get("exit_code"),
            annotations=annotations,
            observed_at=observed_at,
            gap=gap,
            started=state.get("containers_started"),
        )

    def _on_gone(self, msg: PodGone, results: list[PodResult]) -> None:
        """A pod handed to a new child as expected (or launched while it started) was absent from its first
        list, and a GET said 404."""
        from airflow_jobwatch.kube.states import classify_pod

        ref = (msg.namespace, msg.name)
        tracked = self._tracked.get(ref)
        if tracked is None or not tracked.confirmed:
            return
        # Gone while nobody watched. The last state we knew is all there is: let states.py say what a
        # vanished pod in that phase means.
        stub = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": ref[0], "name": ref[1]},
            "status": {"phase": "Running" if tracked.last_phase == "running" else "Pending"},
        }
        state = classify_pod(stub, deleted=True).as_dict()
        state["message"] = (
            f"{state.get('message') or 'The pod was deleted.'} (pod {ref[0]}/{ref[1]} was deleted "
            "while the KubernetesJobWatcher was not running; its final state is unknown)"
        )
        del self._tracked[ref]
        self.counters.gap_deleted += 1
        self.counters.terminal_reports += 1
        results.append(self._result(tracked, state, {}, msg.observed_at, gap=True))

    def _on_adopted(self, msg: PodAdopted, results: list[PodResult]) -> None:
        """A tracked pod left our label selector: another scheduler adopted it (its task is that one's now).

        Reported once, non-terminal, with ``adopted=True``: the owner frees the slot and tells the scheduler
        nothing, as upstream does for its ``ADOPTED`` state.
        """
        tracked = self._tracked.pop((msg.namespace, msg.name), None)
        if tracked is None:
            return  # not ours, or already reported (e.g. we labelled it done after its end)
        self._left.add((msg.namespace, msg.name))
        log.warning(
            "Pod %s/%s is now labelled for scheduler job %s: another scheduler adopted it; it is no longer "
            "watched here",
            msg.namespace,
            msg.name,
            msg.worker,
        )
        self.counters.adopted_away += 1
        state = {"phase": tracked.last_phase, "terminal": False, "reason": "Adopted"}
        state["message"] = f"adopted by scheduler job {msg.worker}"
        results.append(replace(self._result(tracked, state, {}, msg.observed_at), adopted=True))

    def _update_counters(self) -> None:
        c = self.counters
        was_healthy = c.healthy
        c.restarts = sum(s.restarts for s in self._slots.values())
        c.relists = sum(s.relists_done + (s.stats.relists if s.stats else 0) for s in self._slots.values())
        c.watches = sum(s.watches_done + (s.stats.watches if s.stats else 0) for s in self._slots.values())
        # The informer's own verdict (failing for unhealthy_after_seconds); a child being restarted is
        # counted in ``restarts``, not here.
        c.healthy = all(s.stats is None or s.stats.healthy for s in self._slots.values())
        errors = [s.stats.last_error for s in self._slots.values() if s.stats and s.stats.last_error]
        c.last_error = errors[0] if errors else None
        denied = [s.stats.access_denied for s in self._slots.values() if s.stats and s.stats.access_denied]
        c.access_denied = denied[0] if denied else None
        if was_healthy and not c.healthy and c.access_denied:
            log.error(
                "KubernetesJobWatcher is refused by the Kubernetes API: %s Running tasks are kept and will "
                "be reported once the permission is granted.",
                c.access_denied,
            )
        elif was_healthy and not c.healthy:
            # Tasks keep running and are reported once the API answers again; nothing is failed for this.
            log.error(
                "KubernetesJobWatcher cannot reach the Kubernetes API (last error: %s); running tasks are "
                "kept and will be reported when it answers again",
                c.last_error,
            )
        elif c.healthy and not was_healthy:
            log.info("KubernetesJobWatcher is healthy again")
        c.per_namespace = {
            (ns or "*"): {
                "generation": s.generation,
                "restarts": s.restarts,
                "synced": bool(s.child and s.child.synced),
                "pid": s.child.process.pid if s.child else None,
                "last_restart_reason": s.last_restart_reason,
            }
            for ns, s in self._slots.items()
        }

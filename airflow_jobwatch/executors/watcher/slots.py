"""The supervisor's child slots: one watcher child per namespace scope, started, checked and replaced.

A slot is the watcher of one namespace (or of all namespaces) across child generations. Each child is a
new interpreter (``python -m airflow_jobwatch.executors.watcher``) handed the pods it must account for;
one that died or wedged is replaced, at once after an incident, with restart backoff in a crash loop.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile
import time

from airflow_jobwatch.executors.watcher.child import FileHeartbeat
from airflow_jobwatch.executors.watcher.children import Child, ChildProcess, Slot
from airflow_jobwatch.executors.watcher.inbox import ChildMessages
from airflow_jobwatch.executors.watcher.messages import PodRef, PodResult, WatcherSpec
from airflow_jobwatch.kube.cluster.client import ClusterConfig
from airflow_jobwatch.kube.engine.backoff import Backoff
from airflow_jobwatch.kube.engine.informer import InformerConfig

# Every part of the supervisor logs under the name it always had.
log = logging.getLogger("airflow_jobwatch.executors.watcher.supervisor")

# How long a new watcher child may stay silent (before its first heartbeat) before it is
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


class ChildSlots(ChildMessages):
    """Starting, health-checking, stopping and replacing the watcher child of each slot, with restart backoff."""

    # Set by WatcherSupervisor.__init__.
    _unresponsive_after: float
    _backoff_initial: float
    _backoff_max: float
    _cluster: ClusterConfig
    _label_selector: str
    _informer_config: InformerConfig
    _fatal_waiting_reasons: frozenset[str]
    _name: str
    _async_client_factory: str | None

    def _new_backoff(self) -> Backoff:
        # reset_after: a child that stays healthy this long is no longer part of a crash loop.
        return Backoff(
            initial_seconds=self._backoff_initial,
            max_seconds=self._backoff_max,
            reset_after_seconds=RESTART_BACKOFF_RESET_AFTER_SECONDS,
        )

    def _new_slot(self, ns: str | None) -> Slot:
        spec = WatcherSpec(
            cluster=self._cluster,
            namespace=ns,
            label_selector=self._label_selector,
            informer_config=self._informer_config,
            fatal_waiting_reasons=self._fatal_waiting_reasons,
            name=f"{self._name}-{ns or 'all-namespaces'}",
            async_client_factory=self._async_client_factory,
        )
        return Slot(spec=spec, backoff=self._new_backoff())

    def _start_child(self, slot: Slot) -> None:
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
        process = ChildProcess(popen)
        # Close our copy of the write end: when the child dies, reading then ends with EOFError
        # instead of blocking forever on a half-written message.
        writer.close()
        slot.generation += 1
        slot.child = Child(
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

    def _unhealthy_reason(self, child: Child, now: float) -> str | None:
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
        self, slot: Slot, reason: str, now: float, results: list[PodResult], *, healthy: bool = False
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

    def _stop_child(self, child: Child, *, timeout: float, close: bool = True) -> None:
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

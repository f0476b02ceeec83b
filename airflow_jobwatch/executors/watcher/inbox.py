"""The supervisor's inbox: the messages from the watcher children, turned into results for tracked pods.

A child's frames are read without blocking (at most ``MAX_MESSAGES_PER_POLL`` messages per poll), each
message is applied to the tracked pods, and only what the executor must be told comes out: the first
``running`` observation and exactly one terminal result per pod, a pod gone while nobody watched, a pod
another scheduler adopted. Also the pods a child must check after its first list (launched while it
started, or confirmed only after it listed), sent down its stdin from a thread.
"""

from __future__ import annotations

import io
import logging
import pickle
import queue
import threading
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.watcher.messages import (
    Metric,
    PodAdopted,
    PodGone,
    PodRef,
    PodResult,
    PodUpdate,
    Synced,
    WatcherStats,
    unseen_end,
)

if TYPE_CHECKING:
    from airflow_jobwatch.executors.watcher.children import Child, Slot, SupervisorCounters

# Every part of the supervisor logs under the name it always had.
log = logging.getLogger("airflow_jobwatch.executors.watcher.supervisor")

# Upper bound of messages read from one child per poll(), so that a burst of events (thousands of
# pods relisted at once) cannot hold the scheduler loop for long; the rest is read next poll.
MAX_MESSAGES_PER_POLL = 20_000


@dataclass
class Tracked:
    key: Hashable
    namespace: str
    name: str
    reported_running: bool = False
    last_phase: str = "pending"
    # False while the create has been sent but not answered: the pod may or may not exist, so a 404
    # proves nothing and such a pod is not handed to a new child as expected.
    confirmed: bool = True


class ChildMessages:
    """Reading the children's messages and turning them into results for the pods the owner tracks."""

    # Set by WatcherSupervisor.__init__.
    _slots: dict[str | None, Slot]
    _tracked: dict[PodRef, Tracked]
    _left: set[PodRef]
    counters: SupervisorCounters

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

    def _check_late(self, slot: Slot, child: Child, listed: frozenset[PodRef]) -> None:
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
    def _request_check(child: Child, refs: list[PodRef]) -> None:
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

    def _drain(self, slot: Slot, child: Child, results: list[PodResult]) -> None:
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

    def _handle(self, slot: Slot, child: Child, msg: Any, results: list[PodResult]) -> None:
        if isinstance(msg, PodUpdate):
            self._on_update(msg, results)
        elif isinstance(msg, Metric):
            # The child's informer metrics, sent here through Airflow's Stats (the child never imports it).
            metrics.forward(msg.kind, msg.name, msg.value, msg.tags)
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
        tracked: Tracked,
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
        from airflow_jobwatch.kube.meaning.states import classify_pod

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
        # The phase and reason say how Airflow should treat it; the words say only what was seen.
        state["message"] = unseen_end(
            ref[0], ref[1], tracked.last_phase, "while the KubernetesJobWatcher was not running"
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

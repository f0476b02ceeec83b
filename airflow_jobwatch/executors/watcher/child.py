"""The KubernetesJobWatcher child process: the informer loop, and nothing of the scheduler.

Runs the shared :class:`~airflow_jobwatch.kube.informer.Informer` under ``asyncio.run``, classifies
every pod with :func:`~airflow_jobwatch.kube.states.classify_pod` and sends the result to the parent
(:mod:`.supervisor`) over a pipe, as the messages of :mod:`.messages`. It imports only ``kube/`` and
this package, never Airflow: a spawned child starts in about a second.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.watcher.messages import PodUpdate, Synced, WatcherSpec, WatcherStats

log = logging.getLogger(__name__)

# The child beats this often. A quarter of a second is cheap (one float write) and keeps the
# parent's "no heartbeat for N s" decision precise even for small N in tests.
CHILD_HEARTBEAT_INTERVAL_SECONDS = 0.25
# The child reports its informer's counters (relists, watches, health) at most this often; they
# feed logs, the status file and the benchmark, none of which needs sub-second freshness.
CHILD_STATS_INTERVAL_SECONDS = 1.0
# A new child that has not beaten yet gets at least this long (imports, client set-up) before it is


def child_main(spec: WatcherSpec, conn: Connection, heartbeat: Any, parent_pid: int) -> None:
    """Entry point of the KubernetesJobWatcher process."""
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] {%(name)s} %(levelname)s - %(processName)s: %(message)s"
    )
    # The scheduler may have installed handlers for SIGTERM/SIGINT that make no sense here (they
    # would try to shut down a scheduler loop that is not running in this process).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(child_run(spec, conn, heartbeat, parent_pid))
    except Exception:
        log.exception("KubernetesJobWatcher %s failed; the scheduler will start a new one", spec.name)
        raise


async def child_run(spec: WatcherSpec, conn: Connection, heartbeat: Any, parent_pid: int) -> None:
    from airflow_jobwatch.kube.client import async_api_client
    from airflow_jobwatch.kube.informer import EventType, Informer, InformerEvent
    from airflow_jobwatch.kube.states import classify_pod

    # Sending on a pipe blocks once the OS buffer (64 KiB) is full, i.e. whenever the scheduler is
    # busy and does not read. The informer's subscribers run in the event loop and must not block,
    # so messages go through an unbounded in-process queue to a sender thread.
    outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def sender() -> None:
        while True:
            msg = outbox.get()
            if msg is None:
                return
            try:
                conn.send(msg)
            except (BrokenPipeError, OSError):
                # The parent is gone or closed our pipe: nothing left to do in this process.
                os._exit(0)

    threading.Thread(target=sender, name="jobwatch-watcher-sender", daemon=True).start()

    last_sent: dict[str, tuple[Any, ...]] = {}

    def on_event(event: InformerEvent) -> None:
        deleted = event.type in (EventType.DELETED, EventType.DELETED_UNKNOWN)
        state = classify_pod(event.obj, deleted=deleted, fatal_waiting_reasons=spec.fatal_waiting_reasons)
        signature = (state.phase, state.terminal, state.reason)
        uid = event.uid
        if deleted:
            last_sent.pop(uid, None)
        elif last_sent.get(uid) == signature:
            # Only changes of meaning cross the pipe; the parent dedupes anyway.
            return
        else:
            last_sent[uid] = signature
        meta = event.obj.get("metadata") or {}
        outbox.put(
            PodUpdate(
                namespace=event.namespace or "",
                name=event.name,
                uid=uid,
                state=state.as_dict(),
                annotations=dict(meta.get("annotations") or {}),
                deleted=deleted,
                observed_at=time.time(),
            )
        )

    async def beat() -> None:
        while True:
            heartbeat.value = time.monotonic()
            if os.getppid() != parent_pid:
                # The scheduler died (SIGKILL leaves no chance to stop us): do not linger as an orphan.
                os._exit(0)
            await asyncio.sleep(CHILD_HEARTBEAT_INTERVAL_SECONDS)

    # Beat from the start, so that connecting to a slow API server is not mistaken for a wedge.
    beat_task = asyncio.create_task(beat())
    api_client = await async_api_client(spec.cluster)
    informer = Informer(
        api_client,
        kind="pods",
        namespace=spec.namespace,
        label_selector=spec.label_selector,
        config=spec.informer_config,
        name=spec.name,
        observer=metrics.InformerMetrics("executor", "pods", spec.namespace),
    )
    informer.subscribe(on_event)

    try:
        await informer.start()
        await informer.wait_synced()
        keys = frozenset(
            ((o.get("metadata") or {}).get("namespace", ""), (o.get("metadata") or {}).get("name", ""))
            for o in informer.items()
        )
        outbox.put(Synced(keys=keys))
        last_stats: WatcherStats | None = None
        while True:
            health = informer.health
            stats = WatcherStats(
                relists=health.relists,
                watches=health.watches,
                healthy=health.healthy,
                connected=health.connected,
                last_error=health.last_error,
            )
            if stats != last_stats:
                outbox.put(stats)
                last_stats = stats
            await asyncio.sleep(CHILD_STATS_INTERVAL_SECONDS)
    finally:
        beat_task.cancel()
        await informer.stop()
        await api_client.close()
        outbox.put(None)

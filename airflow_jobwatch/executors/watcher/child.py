"""The KubernetesJobWatcher child process: the informer loop, and nothing of the scheduler.

Runs the shared :class:`~airflow_jobwatch.kube.informer.Informer` under ``asyncio.run``, classifies
every pod with :func:`~airflow_jobwatch.kube.states.classify_pod` and sends the result to the parent
(:mod:`.supervisor`) over a pipe, as the messages of :mod:`.messages`. It imports ``kube/``, this package
and, through :mod:`airflow_jobwatch.metrics`, Airflow's ``Stats`` (the informer's metrics go out through
it): about 170 MiB of private memory before any pod (measured: docs/benchmarks/executor.md). Under the
``airflow`` command a spawned child re-imports the scheduler's main module, which imports Airflow anyway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.watcher.messages import (
    PodGone,
    PodRef,
    PodUpdate,
    Synced,
    WatcherSpec,
    WatcherStats,
)

log = logging.getLogger(__name__)

# The child beats this often. A quarter of a second is cheap (one float write) and keeps the
# parent's "no heartbeat for N s" decision precise even for small N in tests.
CHILD_HEARTBEAT_INTERVAL_SECONDS = 0.25
# The child reports its informer's counters (relists, watches, health) at most this often; they
# feed logs, the status file and the benchmark, none of which needs sub-second freshness.
CHILD_STATS_INTERVAL_SECONDS = 1.0
# Exit code of a child whose Kubernetes client cannot be configured (logged as one line, no traceback).
CONFIG_ERROR_EXIT_CODE = 78  # EX_CONFIG (sysexits.h)
# Pods the parent expects but the first list did not contain are checked with this many GETs at
# once: enough to confirm a few thousand missing pods in seconds, few enough not to look like a
# burst to the API server's priority and fairness.
MISSING_CHECK_CONCURRENCY = 8
# Read timeout of each of those GETs; a GET that times out is retried with backoff, so a slow or
# black-holed API server only delays the check (it runs in this process, never in the scheduler loop).
MISSING_CHECK_READ_TIMEOUT_SECONDS = 30.0


def containers_started(pod: dict[str, Any]) -> bool:
    """Whether any container (init containers included) of the pod ever started.

    A container that never started has no ``running`` state and a ``terminated`` state without
    ``startedAt`` (the kubelet's ContainerStatusUnknown, exit code 137, for a pod disrupted while its
    containers were being created), and no ``lastState``. Issue 21: a local predicate of the executor's
    watcher until the disruption rules of ``kube/states.py`` (written in parallel) are merged.
    """
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        if state.get("running") is not None or (state.get("terminated") or {}).get("startedAt"):
            return True
        if (cs.get("lastState") or {}).get("terminated") or (cs.get("lastState") or {}).get("running"):
            return True
    return False


def child_main(
    spec: WatcherSpec,
    conn: Connection,
    heartbeat: Any,
    parent_pid: int,
    expected: frozenset[PodRef] = frozenset(),
) -> None:
    """Entry point of the KubernetesJobWatcher process.

    :param expected: pods the parent launched (or adopted) and has not seen end yet. Those absent from
        this child's first list are checked with a GET here, off the scheduler loop (see
        :func:`check_missing`).
    """
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] {%(name)s} %(levelname)s - %(processName)s: %(message)s"
    )
    # The scheduler may have installed handlers for SIGTERM/SIGINT that make no sense here (they
    # would try to shut down a scheduler loop that is not running in this process).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(child_run(spec, conn, heartbeat, parent_pid, expected))
    except Exception:
        log.exception("KubernetesJobWatcher %s failed; the scheduler will start a new one", spec.name)
        raise


async def child_run(
    spec: WatcherSpec,
    conn: Connection,
    heartbeat: Any,
    parent_pid: int,
    expected: frozenset[PodRef] = frozenset(),
) -> None:
    from airflow_jobwatch.kube.client import ClusterConfigError, async_api_client
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
    # Every pod this child's informer has delivered: a missing-pod check that answers after the watch
    # has seen the pod must not contradict the watch.
    seen: set[PodRef] = set()

    def on_event(event: InformerEvent) -> None:
        seen.add((event.namespace or "", event.name))
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
                state={**state.as_dict(), "containers_started": containers_started(event.obj)},
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
    try:
        if spec.async_client_factory:
            api_client = await _factory_api_client(spec.async_client_factory)
        else:
            api_client = await async_api_client(spec.cluster)
    except (ClusterConfigError, ImportError) as err:
        # issue 12: one clear line, not a traceback; the parent restarts us with backoff (the executor's
        # start() checks the same configuration, so this is a file that changed after the start).
        log.error("KubernetesJobWatcher %s cannot build its Kubernetes client: %s", spec.name, err)
        outbox.put(WatcherStats(0, 0, False, False, str(err), access_denied=str(err)))
        outbox.put(None)
        await asyncio.sleep(0.2)  # let the sender thread write it
        beat_task.cancel()
        os._exit(CONFIG_ERROR_EXIT_CODE)
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

    checker: asyncio.Task[None] | None = None
    try:
        await informer.start()
        last_stats: WatcherStats | None = None
        synced = False
        while True:
            # issue 12: stats from the start, not only after the first LIST: a watcher refused its first
            # LIST (403) must tell the scheduler that it is unhealthy, and why.
            if not synced and informer.health.synced:
                synced = True
                keys = frozenset(
                    (
                        (o.get("metadata") or {}).get("namespace", ""),
                        (o.get("metadata") or {}).get("name", ""),
                    )
                    for o in informer.items()
                )
                outbox.put(Synced(keys=keys))
                missing = sorted(ref for ref in expected if ref not in keys)
                if missing:
                    checker = asyncio.create_task(check_missing(api_client, spec, missing, seen, outbox.put))
            health = informer.health
            stats = WatcherStats(
                relists=health.relists,
                watches=health.watches,
                healthy=health.healthy,
                connected=health.connected,
                last_error=health.last_error,
                access_denied=health.access_denied,
            )
            if stats != last_stats:
                outbox.put(stats)
                last_stats = stats
            if synced:
                await asyncio.sleep(CHILD_STATS_INTERVAL_SECONDS)
            else:
                await informer.wait_synced(CHILD_STATS_INTERVAL_SECONDS)
    finally:
        beat_task.cancel()
        if checker is not None:
            checker.cancel()
        await informer.stop()
        await api_client.close()
        outbox.put(None)


async def check_missing(
    api_client: Any,
    spec: WatcherSpec,
    missing: list[PodRef],
    seen: set[PodRef],
    send: Any,
) -> None:
    """Find out what became of pods the parent expects that this child's first list did not contain.

    Pods deleted while no watcher ran are simply absent from a new list: no event will ever say
    they ended. Each is read with a GET (``MISSING_CHECK_CONCURRENCY`` at a time): 404 -> a
    :class:`PodGone` for the parent, which reports the task's pod deleted; found -> its current
    state as a :class:`PodUpdate` (it may have finished before this watch began). A failed GET (API
    down, 5xx, timeout) is retried with backoff, never guessed. This runs here, in the child's event
    loop, so that thousands of missing pods or a slow API server never stall the scheduler's loop
    (the parent used to do these GETs inside ``executor.sync()``).
    """
    import aiohttp

    from airflow_jobwatch.kube.backoff import Backoff
    from airflow_jobwatch.kube.states import classify_pod

    cfg = spec.informer_config
    sem = asyncio.Semaphore(MISSING_CHECK_CONCURRENCY)
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=cfg.connect_timeout_seconds, sock_read=MISSING_CHECK_READ_TIMEOUT_SECONDS
    )
    log.info("%s: checking %d expected pod(s) absent from the first list", spec.name, len(missing))

    async def check(ref: PodRef) -> None:
        namespace, name = ref
        backoff = Backoff(
            initial_seconds=cfg.backoff_initial_seconds,
            max_seconds=cfg.backoff_max_seconds,
            reset_after_seconds=cfg.backoff_reset_after_seconds,
        )
        while ref not in seen:
            error: str
            try:
                async with sem:
                    if ref in seen:
                        return
                    resp = await api_client.call_api(
                        f"/api/v1/namespaces/{namespace}/pods/{name}",
                        "GET",
                        header_params={"Accept": "application/json"},
                        auth_settings=["BearerToken"],
                        _preload_content=False,
                        _request_timeout=timeout,
                    )
                    try:
                        body = await resp.read()
                    finally:
                        resp.release()
                if resp.status == 404:
                    if ref not in seen:
                        send(PodGone(namespace=namespace, name=name, observed_at=time.time()))
                    return
                if 200 <= resp.status < 300:
                    if ref not in seen:
                        pod = json.loads(body)
                        meta = pod.get("metadata") or {}
                        send(
                            PodUpdate(
                                namespace=namespace,
                                name=name,
                                uid=meta.get("uid", ""),
                                state=classify_pod(
                                    pod, fatal_waiting_reasons=spec.fatal_waiting_reasons
                                ).as_dict(),
                                annotations=dict(meta.get("annotations") or {}),
                                deleted=False,
                                observed_at=time.time(),
                            )
                        )
                    return
                error = f"{resp.status} {resp.reason}"
            except asyncio.CancelledError:
                raise
            except Exception as err:  # connection refused/reset, timeouts, TLS
                error = f"{type(err).__name__}: {err}"
            delay = backoff.failure(time.monotonic())
            log.warning(
                "%s: could not check whether pod %s/%s still exists (%s); retrying in %.1f s",
                spec.name,
                namespace,
                name,
                error,
                delay,
            )
            await asyncio.sleep(delay)

    await asyncio.gather(*(check(ref) for ref in missing))
    log.info("%s: checked the %d expected pod(s) absent from the first list", spec.name, len(missing))


async def _factory_api_client(path: str) -> Any:
    """The ``ApiClient`` of the ``kubernetes_asyncio`` CoreV1Api that ``[kubernetes_executor]
    async_client_factory`` (an import path of a zero-argument callable) returns, as upstream resolves it
    in each process that needs a client."""
    import inspect

    from airflow_jobwatch.executors.watcher.messages import import_callable

    client = import_callable(path)()
    if inspect.isawaitable(client):
        client = await client
    return getattr(client, "api_client", client)

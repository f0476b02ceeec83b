"""The KubernetesJobWatcher child process: the informer loop, and nothing of the scheduler.

Runs the shared :class:`~airflow_jobwatch.kube.engine.informer.Informer` under ``asyncio.run``, classifies
every pod with :func:`~airflow_jobwatch.kube.meaning.states.classify_pod` and sends the result to the parent
(:mod:`.supervisor`) over a pipe, as the messages of :mod:`.messages`. It imports ``kube/`` and this
package, never Airflow: the informer's metrics cross the pipe as :class:`~.messages.Metric` messages and
the parent sends them through Airflow's ``Stats`` (tests/integration/executor/test_watcher.py
checks the child's ``sys.modules``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import mmap
import os
import pickle
import queue
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, BinaryIO

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.watcher.messages import (
    Metric,
    PodAdopted,
    PodGone,
    PodRef,
    PodUpdate,
    Synced,
    WatcherSpec,
    WatcherStats,
    unseen_end,
)
from airflow_jobwatch.kube.engine.informer import selector_matcher
from airflow_jobwatch.kube.meaning.states import containers_started as states_containers_started

if TYPE_CHECKING:
    from airflow_jobwatch.kube.engine.informer import InformerEvent
    from airflow_jobwatch.kube.meaning.states import ObjectState

log = logging.getLogger(__name__)

# One frame to the parent carries at most this many queued messages, or about this many bytes, and
# waits at most this long for more after its first (the scheduler reads the pipe once per heartbeat, so
# a few milliseconds add no delay it would see, and a watch event's burst of messages goes as one frame).
SEND_FRAME_MESSAGES = 256
SEND_FRAME_BYTES = 256 * 1024
SEND_FRAME_LINGER_SECONDS = 0.005
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
# Pods the parent launched while this child was starting and that its first list lacked are checked with a
# GET this long after the list (see child_run's check_late): by then the watch has delivered any of them that
# was created after the list, so a 404 means the pod was gone before the list, unseen.
LATE_CHECK_GRACE_SECONDS = 3.0
# Read timeout of each of those GETs; a GET that times out is retried with backoff, so a slow or
# black-holed API server only delays the check (it runs in this process, never in the scheduler loop).
MISSING_CHECK_READ_TIMEOUT_SECONDS = 30.0


# Whether a pod's containers ever started: the one predicate of kube/meaning/states.py (``started: true``,
# ``startedAt``, ``lastState``, ``restartCount``, phase Running/Succeeded), named here for the relay.
containers_started = states_containers_started


class PodRelay:
    """Turns the informer's pod events into messages for the parent, remembering only what that needs.

    Memory: one signature per *live* pod (dropped at its deletion, so this follows the
    number of pods that exist, never the number seen over the child's life), plus, only until the check
    after the first list has answered, the expected pods that list lacked (:attr:`unresolved`).

    :param spec: the child's configuration (label selector, fatal waiting reasons).
    :param send: puts one message in the outbox (never blocks).
    """

    def __init__(self, spec: WatcherSpec, send: Callable[[Any], None]) -> None:
        self.spec = spec
        self.send = send
        #: pod uid -> (phase, terminal, reason) last sent: only changes of meaning cross the pipe.
        self.last_sent: dict[str, tuple[Any, ...]] = {}
        #: expected pods absent from the first list whose fate is not known yet (see check_missing).
        self.unresolved: set[PodRef] = set()
        self._ours = selector_matcher(spec.label_selector)

    def expect(self, missing: Iterable[PodRef]) -> list[PodRef]:
        """The pods to check after the first list; until answered, a watch event for one resolves it."""
        refs = sorted(missing)
        self.unresolved.update(refs)
        return refs

    def on_event(self, event: InformerEvent) -> None:
        from airflow_jobwatch.kube.engine.informer import EventType
        from airflow_jobwatch.kube.meaning.states import classify_pod

        namespace = event.namespace or ""
        # The watch has delivered this pod: a missing-pod check that answers later must not contradict it.
        self.unresolved.discard((namespace, event.name))
        uid = event.uid
        meta = event.obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if event.type is EventType.DELETED and self._ours is not None and not self._ours(labels):
            # The pod still exists but left our selector (a watch reports that as DELETED, with the new
            # labels): another scheduler adopted it. Not a deletion, and not a failure of ours.
            self.last_sent.pop(uid, None)
            self.send(_adopted(self.spec, namespace, event.name, labels))
            return
        deleted = event.type in (EventType.DELETED, EventType.DELETED_UNKNOWN)
        state = classify_pod(
            event.obj, deleted=deleted, fatal_waiting_reasons=self.spec.fatal_waiting_reasons
        )
        signature = (state.phase, state.terminal, state.reason)
        if event.type is EventType.DELETED_UNKNOWN and state.reason == "Deleted":
            # Found missing by a list after a 410: its end was not seen. The phase and reason stay (the
            # scheduler decides from its database), the message says only what was seen.
            was = classify_pod(event.obj, deleted=False).phase
            found = "when the watch listed again after 410 Gone (it was reconnecting)"
            state = dataclasses.replace(state, message=unseen_end(namespace, event.name, was, found))
        if deleted:
            self.last_sent.pop(uid, None)
        elif self.last_sent.get(uid) == signature:
            # Only changes of meaning cross the pipe; the parent dedupes anyway.
            return
        else:
            self.last_sent[uid] = signature
        self.send(
            PodUpdate(
                namespace=namespace,
                name=event.name,
                uid=uid,
                state={**state.as_dict(), "containers_started": containers_started(event.obj)},
                annotations=dict(meta.get("annotations") or {}),
                deleted=deleted,
                observed_at=time.time(),
                disruption=_disruption(event.obj, state),
            )
        )


def _disruption(pod: dict[str, Any], state: ObjectState) -> str | None:
    """For a failed pod that the cluster disrupted (preempted, evicted, ...): what did it, in words."""
    if state.phase != "failed":
        return None
    from airflow_jobwatch.executors.disruption import describe_disruption, disruption_parts

    found = disruption_parts(pod)
    return describe_disruption(*found) if found is not None else None


def _adopted(spec: WatcherSpec, namespace: str, name: str, labels: dict[str, Any]) -> PodAdopted:
    # The worker labels of pods.py's two label schemes (not imported: pods.py imports Airflow's models).
    worker = labels.get("airflow-worker") or labels.get("airflow-jobwatch-worker")
    # DEBUG: our own "done" label makes every kept pod leave the selector too; the parent, which knows
    # whether the pod was still tracked, logs the adoptions that matter.
    log.debug(
        "%s: pod %s/%s left this scheduler's selector (labelled for scheduler job %s now)",
        spec.name,
        namespace,
        name,
        worker,
    )
    return PodAdopted(namespace=namespace, name=name, worker=worker, observed_at=time.time())


class FileHeartbeat:
    """The child's heartbeat: one float (``time.monotonic()``, system-wide on Linux) in a shared mapping of
    a file both processes hold open. The parent creates the file and passes its descriptor to the child."""

    _FORMAT = "d"

    def __init__(self, fd: int) -> None:
        os.ftruncate(fd, struct.calcsize(self._FORMAT))
        self._map = mmap.mmap(fd, struct.calcsize(self._FORMAT))

    @property
    def value(self) -> float:
        return float(struct.unpack_from(self._FORMAT, self._map)[0])

    @value.setter
    def value(self, v: float) -> None:
        struct.pack_into(self._FORMAT, self._map, 0, v)


def main_from_stdin() -> None:
    """Entry point of ``python -m airflow_jobwatch.executors.watcher`` (how the supervisor starts the child).

    Why not ``multiprocessing``'s spawn: it re-runs the parent's ``__main__`` in the child, and under
    ``airflow scheduler`` that is the ``airflow`` console script, which imports Airflow (about 77 MiB of
    private memory). Reads from stdin: a pickle of the parent's ``sys.path`` (so that import paths
    such as ``async_client_factory`` resolve as in the parent), then a pickle of ``(spec, pipe fd,
    heartbeat fd, parent pid, expected pods)``. Stdin stays open: the parent sends on it the pods to check
    that it launched while this child was starting (see :func:`read_requests`).
    """
    requests = sys.stdin.buffer
    parent_path, payload = pickle.load(requests)
    sys.path[:] = [p for p in parent_path if p not in sys.path] + sys.path
    spec, conn_fd, heartbeat_fd, parent_pid, expected = pickle.loads(payload)
    child_main(
        spec,
        Connection(conn_fd, readable=False),
        FileHeartbeat(heartbeat_fd),
        parent_pid,
        expected,
        requests=requests,
    )


def child_main(
    spec: WatcherSpec,
    conn: Connection,
    heartbeat: Any,
    parent_pid: int,
    expected: frozenset[PodRef] = frozenset(),
    *,
    requests: BinaryIO | None = None,
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
        asyncio.run(child_run(spec, conn, heartbeat, parent_pid, expected, requests=requests))
    except Exception:
        log.exception("KubernetesJobWatcher %s failed; the scheduler will start a new one", spec.name)
        raise


async def child_run(
    spec: WatcherSpec,
    conn: Connection,
    heartbeat: Any,
    parent_pid: int,
    expected: frozenset[PodRef] = frozenset(),
    *,
    requests: BinaryIO | None = None,
) -> None:
    from airflow_jobwatch.kube.cluster.client import ClusterConfigError
    from airflow_jobwatch.kube.cluster.direct import DirectApiClient, end_helpers
    from airflow_jobwatch.kube.engine.informer import Informer

    # Sending on a pipe blocks once the OS buffer (64 KiB) is full, i.e. whenever the scheduler is
    # busy and does not read. The informer's subscribers run in the event loop and must not block,
    # so messages go through an unbounded in-process queue to a sender thread. They are queued pickled
    # (what Connection.send would write; the parent's recv() reads them back): a first list of 5,000 pods
    # queues 5,000 updates at once, and as one bytes object each (~500 bytes) they cost a quarter of what
    # their dicts would, and leave no thousands of small freed objects between the ones the store keeps
    # (the allocator could not give that memory back).
    outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def post(msg: Any) -> None:
        outbox.put(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    def sender() -> None:
        # What is queued when the pipe is free goes as one frame of concatenated pickles (the parent
        # reads them back one by one): a burst of updates costs the scheduler one read, not one per pod.
        while True:
            msg = outbox.get()
            if msg is None:
                return
            frame, size, last = [msg], len(msg), False
            until = time.monotonic() + SEND_FRAME_LINGER_SECONDS
            while len(frame) < SEND_FRAME_MESSAGES and size < SEND_FRAME_BYTES:
                try:
                    more = outbox.get(timeout=max(0.0, until - time.monotonic()))
                except queue.Empty:
                    break
                if more is None:
                    last = True
                    break
                frame.append(more)
                size += len(more)
            try:
                conn.send_bytes(frame[0] if len(frame) == 1 else b"".join(frame))
            except (BrokenPipeError, OSError):
                # The parent is gone or closed our pipe: nothing left to do in this process. os._exit
                # skips atexit: a credential helper still running is ended here.
                end_helpers()
                os._exit(0)
            if last:
                return

    threading.Thread(target=sender, name="jobwatch-watcher-sender", daemon=True).start()

    relay = PodRelay(spec, post)
    # The informer's metrics go to the parent, which sends them through Airflow's Stats; this
    # process never imports Airflow (about 77 MiB of private memory).
    metrics.set_sink(lambda kind, name, value, tags: post(Metric(kind, name, value, tags)))

    async def beat() -> None:
        while True:
            heartbeat.value = time.monotonic()
            if os.getppid() != parent_pid:
                # The scheduler died (SIGKILL leaves no chance to stop us): do not linger as an orphan,
                # nor leave a credential helper (and its exec plugin) running.
                end_helpers()
                os._exit(0)
            await asyncio.sleep(CHILD_HEARTBEAT_INTERVAL_SECONDS)

    # Beat from the start, so that connecting to a slow API server is not mistaken for a wedge.
    beat_task = asyncio.create_task(beat())
    try:
        if spec.async_client_factory:
            api_client = await _factory_api_client(spec.async_client_factory)
        else:
            # Raw HTTP through aiohttp, credentials from a short-lived helper process: this
            # process never imports kubernetes_asyncio (about 38 MiB of model classes it would not use).
            api_client = await DirectApiClient.create(spec.cluster)
    except (ClusterConfigError, ImportError) as err:
        # One clear line, not a traceback; the parent restarts us with backoff (the executor's
        # start() checks the same configuration, so this is a file that changed after the start).
        log.error("KubernetesJobWatcher %s cannot build its Kubernetes client: %s", spec.name, err)
        post(WatcherStats(0, 0, False, False, str(err), access_denied=str(err)))
        outbox.put(None)
        await asyncio.sleep(0.2)  # let the sender thread write it
        beat_task.cancel()
        os._exit(CONFIG_ERROR_EXIT_CODE)
    informer = Informer(
        api_client,
        kind="pods",
        namespace=spec.namespace,
        label_selector=spec.label_selector,
        # The store is read only to compare a resourceVersion or to report a deletion: kept compact, a pod
        # costs about a fifth of the memory (InformerConfig.compact_store).
        config=dataclasses.replace(spec.informer_config, compact_store=True),
        name=spec.name,
        observer=metrics.InformerMetrics("executor", "pods", spec.namespace),
    )
    informer.subscribe(relay.on_event)

    checker: asyncio.Task[None] | None = None
    late_checks: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()

    def check_late(refs: list[PodRef]) -> None:
        # Pods the parent launched while this child started: not in its expected set, and absent from
        # the first list. Wait until the watch has surely delivered any that was created after that list,
        # then GET the rest: one deleted before the list (preempted, evicted while Pending) would otherwise
        # never be reported, and its task would stay running for ever.
        async def run() -> None:
            await asyncio.sleep(LATE_CHECK_GRACE_SECONDS)
            listed = {(namespace or "", name) for namespace, name in informer.names()}
            missing = relay.expect(ref for ref in refs if ref not in listed)
            if missing:
                await check_missing(api_client, spec, missing, relay.unresolved, post)

        task = loop.create_task(run())
        late_checks.add(task)
        task.add_done_callback(late_checks.discard)

    if requests is not None:
        threading.Thread(
            target=read_requests,
            args=(requests, lambda refs: loop.call_soon_threadsafe(check_late, refs)),
            name="jobwatch-watcher-requests",
            daemon=True,
        ).start()

    try:
        await informer.start()
        last_stats: WatcherStats | None = None
        synced = False
        while True:
            # Stats from the start, not only after the first LIST: a watcher refused its first
            # LIST (403) must tell the scheduler that it is unhealthy, and why.
            if not synced and informer.health.synced:
                synced = True
                # Names only: reading the stored objects would decode every one of them (compact store).
                keys = frozenset((namespace or "", name) for namespace, name in informer.names())
                post(Synced(keys=keys))
                missing = relay.expect(ref for ref in expected if ref not in keys)
                if missing:
                    checker = asyncio.create_task(
                        check_missing(api_client, spec, missing, relay.unresolved, post)
                    )
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
                post(stats)
                last_stats = stats
            if synced:
                await asyncio.sleep(CHILD_STATS_INTERVAL_SECONDS)
            else:
                await informer.wait_synced(CHILD_STATS_INTERVAL_SECONDS)
    finally:
        beat_task.cancel()
        if checker is not None:
            checker.cancel()
        for task in list(late_checks):
            task.cancel()
        await informer.stop()
        await api_client.close()
        outbox.put(None)


def read_requests(stream: BinaryIO, check: Callable[[list[PodRef]], None]) -> None:
    """Read the parent's requests from ``stream`` (the child's stdin) until it closes.

    A request is a pickle of ``("check", [(namespace, name), ...])``: pods the parent launched after this
    child was started and that its first list lacked (see :meth:`.supervisor.WatcherSupervisor`). The
    stream closes when the parent stops this child or dies; the heartbeat notices the latter.
    """
    while True:
        try:
            request = pickle.load(stream)
        except (EOFError, OSError, ValueError):
            return
        except Exception:
            log.exception("KubernetesJobWatcher: ignoring an unreadable request from the scheduler")
            return
        if isinstance(request, tuple) and len(request) == 2 and request[0] == "check":
            check([tuple(ref) for ref in request[1]])
        else:
            log.warning("KubernetesJobWatcher: ignoring an unknown request from the scheduler: %r", request)


async def check_missing(
    api_client: Any,
    spec: WatcherSpec,
    missing: list[PodRef],
    unresolved: set[PodRef],
    send: Any,
) -> None:
    """Find out what became of pods the parent expects that this child's first list did not contain.

    Pods deleted while no watcher ran are simply absent from a new list: no event will ever say
    they ended. Each is read with a GET (``MISSING_CHECK_CONCURRENCY`` at a time): 404 -> a
    :class:`PodGone` for the parent, which reports the task's pod deleted; found, and no longer
    matching this scheduler's label selector -> a :class:`PodAdopted` (another scheduler relabelled it
    while no watcher ran: its task is that scheduler's now, and no event of ours will ever end it);
    found and ours -> its current state as a :class:`PodUpdate` (it may have finished before this
    watch began). ``unresolved`` holds the refs not yet answered: the watch removes a ref when it
    delivers that pod (its answer then wins), each answer here removes its own. A failed GET (API
    down, 5xx, timeout) is retried with backoff, never guessed. This runs here, in the child's event
    loop, so that thousands of missing pods or a slow API server never stall the scheduler's loop
    (the parent used to do these GETs inside ``executor.sync()``).
    """
    import aiohttp

    from airflow_jobwatch.kube.engine.backoff import Backoff
    from airflow_jobwatch.kube.meaning.states import classify_pod

    cfg = spec.informer_config
    sem = asyncio.Semaphore(MISSING_CHECK_CONCURRENCY)
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=cfg.connect_timeout_seconds, sock_read=MISSING_CHECK_READ_TIMEOUT_SECONDS
    )
    log.info("%s: checking %d expected pod(s) absent from the first list", spec.name, len(missing))
    ours = selector_matcher(spec.label_selector)

    async def check(ref: PodRef) -> None:
        namespace, name = ref
        backoff = Backoff(
            initial_seconds=cfg.backoff_initial_seconds,
            max_seconds=cfg.backoff_max_seconds,
            reset_after_seconds=cfg.backoff_reset_after_seconds,
        )
        while ref in unresolved:
            error: str
            try:
                async with sem:
                    if ref not in unresolved:
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
                    if ref in unresolved:
                        unresolved.discard(ref)
                        send(PodGone(namespace=namespace, name=name, observed_at=time.time()))
                    return
                if 200 <= resp.status < 300:
                    if ref in unresolved:
                        unresolved.discard(ref)
                        pod = json.loads(body)
                        meta = pod.get("metadata") or {}
                        labels = meta.get("labels") or {}
                        if ours is not None and not ours(labels):
                            send(_adopted(spec, namespace, name, labels))
                            return
                        state = classify_pod(pod, fatal_waiting_reasons=spec.fatal_waiting_reasons)
                        send(
                            PodUpdate(
                                namespace=namespace,
                                name=name,
                                uid=meta.get("uid", ""),
                                state=state.as_dict(),
                                annotations=dict(meta.get("annotations") or {}),
                                deleted=False,
                                observed_at=time.time(),
                                disruption=_disruption(pod, state),
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

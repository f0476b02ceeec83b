"""airflow-jobwatch's metrics, sent through Airflow's ``Stats`` (so StatsD, Datadog and OpenTelemetry all
work, as configured in Airflow's ``[metrics]`` section), every name under ``jobwatch.``.

The full table is docs/metrics.md; tests/unit/test_metrics.py checks that it names every metric this
module sends. Call sites in the executor, the watch engine and the trigger registry are one line each;
everything about naming and tags is here.

Names carry the dimension a metric is read by (``jobwatch.executor.create_errors.409``), so they stay
readable on plain StatsD; the same values also go as tags (``status=409``) for backends that keep tags
(OpenTelemetry, Datadog, StatsD with ``statsd_influxdb_enabled``). Informer metrics are per informer:
``jobwatch.informer.<component>.<kind>.<namespace>.<metric>``, because a scheduler and a triggerer each
run several informers whose gauges would otherwise overwrite each other.

Sending a metric never raises: a misconfigured metrics backend must not stop a watch or a launch.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import queue
import re
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "jobwatch"

#: How often an informer's gauges (health, seconds since the last event) are sent while it runs.
GAUGE_INTERVAL_SECONDS = 10.0

_stats: Any = None  # Airflow's stats module, once resolved in this process
_stats_pid: int | None = None
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
# The triggerer's open shared watches ({namespace: triggers}) and its running informers, for its status file.
_open_watches: dict[str, int] = {}
_open_watch_count = 0
_live: weakref.WeakSet[InformerMetrics] = weakref.WeakSet()
# The triggerer's GETs of a Job by JobTriggers, by reason (job_get()), for its status file.
_job_gets: dict[str, int] = {}
_status_written_at = 0.0


def _safe(part: object) -> str:
    """One dot-free name segment (namespaces and kinds are DNS labels already; ``*`` becomes ``all``)."""
    text = str(part)
    if text in ("", "*", "None"):
        return "all"
    return _UNSAFE.sub("_", text)


def _backend() -> Any:
    """Airflow's stats sender, initialized from ``[metrics]`` if no Airflow component did it in this
    process (the executor's watcher child and the triggerer's runner subprocess may be spawned).
    Where Airflow keeps it, and how it is initialized, differs by release: see :mod:`airflow_jobwatch.compat`."""
    global _stats, _stats_pid
    if _stats is not None and _stats_pid == os.getpid():
        return _stats
    from airflow_jobwatch.compat import stats_backend

    _stats, _stats_pid = stats_backend(), os.getpid()
    return _stats


def configure() -> None:
    """(Re)initialize Airflow's stats from the current ``[metrics]`` configuration (tests use it)."""
    global _stats
    from airflow_jobwatch.compat import stats_backend

    stats_backend(reinitialize=True)
    _stats = None


# Metrics are handed to a sender thread, so that a call site (the watch engine's event loop, the
# scheduler loop) never waits: resolving Airflow's stats backend the first time imports and configures
# Airflow's metrics modules, which takes seconds on a busy machine - long enough for the executor to
# take its watcher's event loop for wedged. Bounded: if the backend cannot keep up, metrics are dropped
# (and counted), the work goes on.
_QUEUE_SIZE = 10_000
_queue: queue.Queue[Any] | None = None
_sender_pid: int | None = None
_sender_lock = threading.Lock()
dropped = 0  # metrics dropped because the queue was full


def _deliver(kind: str, name: str, value: Any, tags: dict[str, Any] | None) -> None:
    try:
        stats = _backend()
        tags = {k: str(v) for k, v in (tags or {}).items()}
        if kind == "incr":
            stats.incr(name, count=int(value or 1), tags=tags)
        elif kind == "gauge":
            stats.gauge(name, value, tags=tags)
        else:  # timing, in milliseconds
            stats.timing(name, value, tags=tags)
    except Exception:  # never let metrics break the work
        log.debug("Could not send metric %s", name, exc_info=True)


def _sender(q: queue.Queue[Any]) -> None:
    while True:
        item = q.get()
        if isinstance(item, threading.Event):  # flush() marker: everything before it was sent
            item.set()
            continue
        _deliver(*item)


def _sender_queue() -> queue.Queue[Any]:
    """This process's queue and sender thread (started on first use, and again after a fork)."""
    global _queue, _sender_pid
    if _queue is not None and _sender_pid == os.getpid():
        return _queue
    with _sender_lock:
        if _queue is None or _sender_pid != os.getpid():
            q: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE_SIZE)
            threading.Thread(target=_sender, args=(q,), name="jobwatch-metrics", daemon=True).start()
            _queue, _sender_pid = q, os.getpid()
    return _queue


# Where this process's metrics go instead of Airflow's Stats (the executor's watcher child sets it,
# so that it never imports Airflow: its metrics cross the pipe and the scheduler sends them).
_sink: Any = None


def set_sink(sink: Any) -> None:
    """Send this process's metrics to ``sink(kind, name, value, tags)`` instead of Airflow's Stats
    (``None``: back to Stats). The sink must not block; it is called from the call site's thread."""
    global _sink
    _sink = sink


def _send(kind: str, name: str, value: Any = None, tags: dict[str, Any] | None = None) -> None:
    global dropped
    if _sink is not None:
        try:
            _sink(kind, name, value, tags)
        except Exception:  # never let metrics break the work
            log.debug("Could not hand metric %s to its sink", name, exc_info=True)
        return
    try:
        _sender_queue().put_nowait((kind, name, value, tags))
    except queue.Full:
        dropped += 1


def forward(kind: str, name: str, value: Any = None, tags: dict[str, Any] | None = None) -> None:
    """Send a metric another process measured, as it sent it (``kind`` ``incr``, ``gauge`` or ``timing``;
    ``name`` whole, prefix included): the executor's watcher child hands its metrics over the pipe."""
    _send(kind, name, value, tags)


def flush(timeout: float = 10.0) -> bool:
    """Wait until every metric sent so far has been handed to Airflow's stats backend (tests use it)."""
    marker = threading.Event()
    _sender_queue().put(marker, timeout=timeout)
    return marker.wait(timeout)


def incr(name: str, count: int = 1, *, tags: dict[str, Any] | None = None) -> None:
    """Add ``count`` to the counter ``jobwatch.<name>``."""
    _send("incr", f"{PREFIX}.{name}", count, tags)


def gauge(name: str, value: float, *, tags: dict[str, Any] | None = None) -> None:
    """Set the gauge ``jobwatch.<name>``."""
    _send("gauge", f"{PREFIX}.{name}", value, tags)


def timing_seconds(name: str, seconds: float, *, tags: dict[str, Any] | None = None) -> None:
    """A duration, sent as the timer ``jobwatch.<name>`` in milliseconds (StatsD's unit)."""
    _send("timing", f"{PREFIX}.{name}", max(0.0, seconds) * 1000.0, tags)


# ---- informer (the watch engine) ------------------------------------------------------------------


class InformerMetrics:
    """The watch engine's metrics for one informer; passed as the informer's ``observer``.

    :param component: ``executor`` or ``triggerer`` (who runs the informer).
    :param kind: ``pods`` or ``jobs``.
    :param namespace: the informer's namespace (None: all namespaces).
    """

    def __init__(self, component: str, kind: str, namespace: str | None) -> None:
        self.prefix = f"informer.{_safe(component)}.{_safe(kind)}.{_safe(namespace)}"
        self.tags = {"component": component, "kind": kind, "namespace": namespace or "all"}
        self._last_event: float | None = None
        self._started = time.monotonic()
        self._healthy = True
        self._gauges: asyncio.Task[None] | None = None
        self.component = component
        self.counts: dict[str, int] = {}
        _live.add(self)

    def _incr(self, metric: str, **extra: str) -> None:
        self.counts[metric] = self.counts.get(metric, 0) + 1
        incr(f"{self.prefix}.{metric}", tags={**self.tags, **extra})

    def snapshot(self) -> dict[str, Any]:
        """What the status file says about this informer."""
        since = time.monotonic() - (self._last_event if self._last_event is not None else self._started)
        return {
            **self.tags,
            "healthy": self._healthy,
            "seconds_since_last_event": round(since, 1),
            **self.counts,
        }

    def on_list(self, *, relist: bool) -> None:
        """A LIST (all its pages) completed; ``relist`` when it was not the informer's first."""
        self._incr("lists")
        if relist:
            self._incr("relists")
        self._ensure_gauges()

    def on_expired(self) -> None:
        """The server answered 410 Gone / Expired."""
        self._incr("expired")

    def on_watch_start(self, *, restart: bool) -> None:
        """A watch request is being opened; ``restart`` when it is not the first after a LIST."""
        if restart:
            self._incr("watch_restarts")

    def on_stall(self) -> None:
        """A watch went silent for ``stall_timeout_seconds`` and is being reopened."""
        self._incr("stalls")

    def on_event(self, event_type: str) -> None:
        """An event was delivered to subscribers (ADDED, MODIFIED, DELETED)."""
        self._last_event = time.monotonic()
        self._incr(f"events.{_safe(event_type.lower())}", type=event_type)

    def on_health(self, healthy: bool) -> None:
        self._healthy = healthy
        self.send_gauges()
        if self.component == "triggerer":
            write_triggerer_status(force=True)

    def send_gauges(self) -> None:
        gauge(f"{self.prefix}.healthy", 1 if self._healthy else 0, tags=self.tags)
        since = time.monotonic() - (self._last_event if self._last_event is not None else self._started)
        gauge(f"{self.prefix}.seconds_since_last_event", round(since, 3), tags=self.tags)

    def _ensure_gauges(self) -> None:
        if self._gauges is not None and not self._gauges.done():
            return
        try:
            self._gauges = asyncio.get_running_loop().create_task(self._send_gauges_periodically())
        except RuntimeError:  # no running loop (a synchronous caller): gauges go with health changes only
            self._gauges = None

    async def _send_gauges_periodically(self) -> None:
        while True:
            self.send_gauges()
            if self.component == "triggerer":
                write_triggerer_status()
            await asyncio.sleep(GAUGE_INTERVAL_SECONDS)

    def on_stop(self) -> None:
        _live.discard(self)
        if self._gauges is not None:
            self._gauges.cancel()
            self._gauges = None
        if self.component == "triggerer":
            # The registry writes the file when a watch closes, but before its informers
            # have stopped; and once no watch is open nothing rewrites it. Rewrite it now that this
            # informer is gone, so `airflow jobwatch status` never lists a closed watch.
            write_triggerer_status(force=True)


# ---- executor ---------------------------------------------------------------------------------------


def pod_created(*, launch_seconds: float) -> None:
    """A worker pod was created; ``launch_seconds`` since the executor accepted its task."""
    incr("executor.pods_created")
    timing_seconds("executor.launch_latency", launch_seconds)


def pod_create_error(status: int | str) -> None:
    """Creating a worker pod failed with this HTTP status (``0``: no answer, e.g. connection refused)."""
    incr(f"executor.create_errors.{_safe(status)}", tags={"status": status})


def terminal_report(outcome: str, *, after_watcher_gap: bool) -> None:
    """The executor reported a task's end (``success`` or ``failed``) to the scheduler.
    ``after_watcher_gap``: the end was found by reconciliation after a watcher restart or relist."""
    incr(f"executor.terminal_reports.{_safe(outcome)}", tags={"outcome": outcome})
    if after_watcher_gap:
        incr("executor.reconciled_after_restart")


def stale_launch_pod() -> None:
    """A pod of an earlier launch of a relaunched task instance key ended: cleaned up, not reported."""
    incr("executor.stale_launch_pods")


def disruption_relaunch(reason: str) -> None:
    """A worker pod disrupted before any container started (``reason``: Evicted, PreemptionByScheduler...)
    is launched again for the same try."""
    incr("executor.disruption_relaunches", tags={"reason": reason})


def pod_disrupted(reason: str) -> None:
    """A running worker pod was disrupted by the cluster (preempted, evicted, ...) and its task failed."""
    incr(f"executor.disruptions.{_safe(reason)}", tags={"reason": reason})


def tasks_waiting_for_quota(count: int) -> None:
    """Tasks whose worker pod create was refused for a ResourceQuota and waits for room (a gauge)."""
    gauge("executor.tasks_waiting_for_quota", count)


def watcher_restarts(count: int) -> None:
    """The executor's KubernetesJobWatcher child process was replaced ``count`` times."""
    if count > 0:
        incr("executor.watcher_restarts", count)


# ---- trigger registry -------------------------------------------------------------------------------


def shared_watches(active: Mapping[Any, int]) -> None:
    """The triggerer's shared watches changed: ``active`` maps each open watch (anything with a
    ``namespace``) to its number of subscribed triggers.

    Called on every subscribe and release (10,000 triggers starting in one loop call it 10,000 times),
    so it sends only the gauges whose value changed, and rewrites the status file at once only when a
    watch opened or closed (a change of trigger counts alone waits for the file's periodic rewrite).
    """
    global _open_watch_count
    per_namespace: dict[str, int] = {}
    for key, triggers in active.items():
        namespace = str(getattr(key, "namespace", key))
        per_namespace[namespace] = per_namespace.get(namespace, 0) + triggers
    opened_or_closed = len(active) != _open_watch_count or per_namespace.keys() != _open_watches.keys()
    _open_watch_count = len(active)
    if opened_or_closed:
        gauge("triggerer.shared_watches", len(active))
    for namespace, triggers in per_namespace.items():
        if _open_watches.get(namespace) != triggers:
            gauge(f"triggerer.triggers_per_watch.{_safe(namespace)}", triggers, tags={"namespace": namespace})
    for namespace in (
        _open_watches.keys() - per_namespace.keys()
    ):  # a closed watch reads 0, not its last count
        gauge(f"triggerer.triggers_per_watch.{_safe(namespace)}", 0, tags={"namespace": namespace})
    _open_watches.clear()
    _open_watches.update(per_namespace)
    write_triggerer_status(force=opened_or_closed)


def watch_subscribers(namespace: str, triggers: int) -> None:
    """One open watch's trigger count changed (a trigger joined or left; the set of watches did not)."""
    if _open_watches.get(namespace) != triggers:
        _open_watches[namespace] = triggers
        gauge(f"triggerer.triggers_per_watch.{_safe(namespace)}", triggers, tags={"namespace": namespace})
    write_triggerer_status()


def job_get(namespace: str, reason: str) -> None:
    """A JobTrigger sent a GET of its Job, for ``reason`` (see ``airflow_jobwatch.triggers.registry``:
    ``missing`` from the synced cache, or cached ``projected`` when it ended before its trigger came)."""
    _job_gets[reason] = _job_gets.get(reason, 0) + 1
    incr(f"triggerer.job_gets.{_safe(reason)}", tags={"reason": reason, "namespace": namespace})


def triggerer_status() -> dict[str, Any]:
    """This triggerer's shared watches and the health of their informers (the status file's content)."""
    informers = sorted(
        (m.snapshot() for m in list(_live) if m.component == "triggerer"),
        key=lambda i: (i["namespace"], i["kind"]),
    )
    return {
        "pid": os.getpid(),
        "updated_at": time.time(),
        "write_interval_seconds": GAUGE_INTERVAL_SECONDS,
        "shared_watches": _open_watch_count,  # watches, not namespaces: one per credential
        "triggers_per_watch": dict(sorted(_open_watches.items())),
        "job_gets": dict(sorted(_job_gets.items())),  # since the process started, by reason
        "healthy": all(i["healthy"] for i in informers),
        "informers": informers,
    }


def write_triggerer_status(*, force: bool = False) -> None:
    """Rewrite ``[jobwatch] triggerer_status_file`` (if set): when the shared watches change, when an
    informer's health changes, and every ``GAUGE_INTERVAL_SECONDS`` while watches are open."""
    global _status_written_at
    try:
        from airflow_jobwatch import config

        if not force and time.monotonic() - _status_written_at < GAUGE_INTERVAL_SECONDS / 2:
            return
        _status_written_at = time.monotonic()
        path = config.get_str("triggerer_status_file")
        if not path:
            return
        write_json_atomically(path, triggerer_status())
    except Exception as err:
        log.debug("Could not write the triggerer status file: %s", err)


def write_json_atomically(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file, so a reader never sees half of it."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, target)


def detection_delay(seconds: float, *, status: str) -> None:
    """From the Job's terminal condition (its ``lastTransitionTime``) to the trigger's event."""
    timing_seconds("triggerer.detection_delay", seconds, tags={"status": status})


_TERMINAL_CONDITIONS = ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")


def job_detected(job: dict[str, Any] | None, *, status: str) -> None:
    """A JobTrigger found its Job terminal: send the detection delay, measured from the earliest terminal
    condition's ``lastTransitionTime`` (whole seconds on a real API server, so the figure is +-1 s).

    ``job`` is API JSON or the client's ``V1Job.to_dict()`` shape (the trigger event's ``job``). The
    trigger calls this once per wait, when its result is decided; nothing is sent without a terminal
    condition (a timeout, an error)."""
    if not job:
        return
    times = []
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in _TERMINAL_CONDITIONS and cond.get("status") == "True":
            when = cond.get("lastTransitionTime", cond.get("last_transition_time"))
            if isinstance(when, datetime.datetime):
                times.append(when.timestamp())
                continue
            try:
                times.append(datetime.datetime.fromisoformat(str(when).replace("Z", "+00:00")).timestamp())
            except ValueError:
                continue
    if times:
        detection_delay(time.time() - min(times), status=status)


__all__ = [
    "InformerMetrics",
    "configure",
    "flush",
    "detection_delay",
    "gauge",
    "incr",
    "job_get",
    "pod_create_error",
    "pod_created",
    "pod_disrupted",
    "shared_watches",
    "tasks_waiting_for_quota",
    "terminal_report",
    "timing_seconds",
    "watch_subscribers",
    "watcher_restarts",
]

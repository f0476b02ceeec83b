"""The watcher children as the supervisor keeps them: a child's process, one generation of the watcher of a
namespace scope, and the slot that holds that watcher across generations; and the supervisor's counters.

Plain records, read and written by the supervisor's parts (its slots, its inbox, its status); they import
nothing of those parts, which is what keeps the parts free of import cycles.
"""

from __future__ import annotations

import queue
import subprocess
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import IO, Any

from airflow_jobwatch.executors.watcher.messages import PodRef, WatcherSpec, WatcherStats
from airflow_jobwatch.kube.engine.backoff import Backoff


class ChildProcess:
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
class Child:
    """One generation of the watcher for one namespace scope."""

    process: ChildProcess
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
class Slot:
    """The watcher of one namespace (or of all namespaces), across child generations."""

    spec: WatcherSpec
    child: Child | None = None
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

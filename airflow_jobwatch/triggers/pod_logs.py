"""The pods' container logs written into the task's log by the trigger that ends the task.

How a trigger's log lines reach the task's log in Airflow 3 (``airflow/jobs/triggerer_job_runner.py``):
the trigger runs in the triggerer's async subprocess, whose log records go, one blocking unbuffered
write each (``supervisor._configure_logs_over_json_channel``), as JSON lines down a socket to the
supervisor process. The supervisor reads that socket at most 4 KiB per pass of its loop
(``make_buffered_socket_reader``; ``TriggerRunnerSupervisor.run_once`` calls ``_service_subprocess``
once, between database work) and files each line by its ``trigger_id`` into the task's
``attempt=N.log.trigger.<id>.log`` (``_process_log_messages_from_subprocess``). When the trigger's
coroutine has returned, the runner reports it ``finished`` over a second socket, and the supervisor then
closes that file (``_handle_request``, ``logger_cache.pop``); a line still unread in the log socket at
that moment goes to the triggerer's own log instead. Nothing orders the two sockets, so a burst of lines
just before the trigger returns partly misses the task's log. Two rules follow, and this module keeps
them:

- the trigger does not return (nor yield the event that ends the task) until the supervisor has read
  every byte it wrote: the bytes still unread in the log socket are asked of the kernel
  (``TIOCOUTQ``), and waited for with ``asyncio.sleep``, never blocking the loop;
- lines are written only while the socket has room, because a write into a full socket blocks the
  whole triggerer's event loop until the supervisor's next pass.

What one task pulls through the triggerer is bounded by ``[jobwatch] trigger_log_max_bytes``: the tail
of the Job's logs is kept, with a line saying how much was left out and where the full log is. Reads run
at most :data:`READ_CONCURRENCY` at a time in the process, so that many Jobs ending at once do not
stall the triggerer's loop or its memory (at most that many tails are held at once).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

#: ``[jobwatch] trigger_log_max_bytes``: the most of a task's pod logs (UTF-8 bytes of the lines) the
#: trigger writes into its task log; the tail is kept.
MAX_BYTES_OPTION = "trigger_log_max_bytes"

#: Tasks whose pod logs are read at the same time in one triggerer process. Each holds at most
#: ``trigger_log_max_bytes`` of lines while it reads, so this also bounds the memory the logs take.
READ_CONCURRENCY = 8

#: Bytes read from a log stream at a time, and the longest line kept whole (a longer one is cut into
#: pieces), so that memory stays bounded whatever a container writes.
LOG_CHUNK_BYTES = 64 * 1024
MAX_LINE_BYTES = 1024 * 1024

#: Lines are written while fewer than this many bytes (kernel accounting, overhead included) wait unread
#: in the log socket: well under Linux's default socket send buffer (about 208 KiB), so a write never
#: blocks the loop.
_ROOM_BYTES = 64 * 1024
#: How long a trigger waits, at most, for the supervisor to read what it wrote before going on (a
#: supervisor that stopped reading must not keep the task from ending).
_DRAIN_SECONDS = 60.0

#: (connect, read) timeouts of each log request, in seconds: a request that hangs gives its slot of
#: :data:`READ_CONCURRENCY` back (the log is then a warning), instead of keeping other tasks waiting.
READ_TIMEOUT = (10.0, 60.0)

_semaphores: dict[int, asyncio.Semaphore] = {}
_locks: dict[int, asyncio.Lock] = {}


def max_bytes() -> tuple[int, str | None]:
    """``[jobwatch] trigger_log_max_bytes`` and, when its value is not usable, why (the default is used).

    The option's bounds are the configuration's (``config.RANGES``); a value outside them is a warning,
    not an error, so that a task is never failed for the size limit of its log."""
    from airflow_jobwatch import config as jobwatch_config

    raw = jobwatch_config.get_str(MAX_BYTES_OPTION)
    bounds = jobwatch_config.RANGES[MAX_BYTES_OPTION]
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is not None and bounds.admits(value):
        return value, None
    fallback = int(jobwatch_config.default(MAX_BYTES_OPTION))
    return fallback, (
        f"[{jobwatch_config.SECTION}] {MAX_BYTES_OPTION} = {raw!r} must be a whole number of bytes "
        f"{bounds}; using the default {fallback}"
    )


def reading() -> asyncio.Semaphore:
    """The process-wide limit on tasks whose pod logs are read at once (``async with reading():``)."""
    loop = asyncio.get_running_loop()
    semaphore = _semaphores.get(id(loop))
    if semaphore is None:
        _semaphores.clear()  # one loop at a time in a triggerer; a test's earlier loops are gone
        semaphore = _semaphores[id(loop)] = asyncio.Semaphore(READ_CONCURRENCY)
    return semaphore


def writing() -> asyncio.Lock:
    """One trigger at a time writes pod logs, or waits for the log socket to drain, in the process.

    The socket is one FIFO for the whole process, read at the supervisor's pace, so writing two logs at
    once is no faster; and a trigger waiting for the socket to empty would wait as long as another one
    kept writing. Taken in turn, each write and each wait is as short as the supervisor allows."""
    loop = asyncio.get_running_loop()
    lock = _locks.get(id(loop))
    if lock is None:
        _locks.clear()
        lock = _locks[id(loop)] = asyncio.Lock()
    return lock


# -- the log socket ------------------------------------------------------------------------------------
def log_channel() -> int | None:
    """The file descriptor this process's log records are written to, when it is a socket to a
    supervisor (the triggerer's subprocess); None elsewhere (a test, ``dag.test()``)."""
    import os
    import stat

    import structlog

    stream = getattr(structlog.get_config().get("logger_factory"), "io", None)
    try:
        fd = int(stream.fileno())  # type: ignore[union-attr]
        return fd if stat.S_ISSOCK(os.fstat(fd).st_mode) else None
    except Exception:
        return None


def unread_bytes(fd: int) -> int | None:
    """Bytes written to the socket ``fd`` that its reader has not read yet (Linux ``TIOCOUTQ``, which
    for a Unix socket counts until the reader consumes them); None where the kernel does not say."""
    import fcntl
    import struct
    import termios

    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))[0])
    except (OSError, AttributeError):
        return None


async def wait_unread_below(limit: int, *, deadline: float, fd: int | None = None) -> bool:
    """Wait until fewer than ``limit`` bytes (0: none) wait unread in the log socket, or the monotonic
    ``deadline`` passes; True when they did. Polls with a short, growing sleep: the supervisor reads on
    its own schedule and says nothing when it has."""
    fd = log_channel() if fd is None else fd
    if fd is None:
        return True
    delay = 0.005
    while True:
        unread = unread_bytes(fd)
        if unread is None or unread <= limit:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


async def drained(log: Any, *, seconds: float = _DRAIN_SECONDS) -> None:
    """Return once the supervisor has read every log line this process wrote (at most ``seconds``), so
    that the lines a trigger logged before it ends reach the task's log, not the triggerer's."""
    if log_channel() is None:
        return
    async with writing():
        done = await wait_unread_below(0, deadline=time.monotonic() + seconds)
    if not done:
        log.warning("The triggerer did not read this trigger's log lines within %.0f s", seconds)


# -- the tail of a task's pod logs ---------------------------------------------------------------------
@dataclass
class _Segment:
    pod: str
    container: str
    kept: bool  # the pod stays after on_finish_action
    warning: tuple[Any, ...] | None = None  # a warning logged here, in order, instead of lines
    lines: deque[tuple[str, int]] = field(default_factory=deque)
    dropped_bytes: int = 0
    dropped_lines: int = 0


class Tail:
    """The last ``limit`` bytes of lines across a task's containers, in order, with how much of each
    container's log was left out."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.segments: list[_Segment] = []
        self._first = 0  # the earliest segment that may still hold lines

    def start(self, pod: str, container: str, *, kept: bool) -> None:
        self.segments.append(_Segment(pod, container, kept))

    def warning(self, message: str, *args: Any) -> None:
        """A warning to log in its place among the lines (it is not counted against the limit)."""
        self.segments.append(_Segment("", "", True, warning=(message, *args)))

    def add(self, line: str) -> None:
        size = len(line.encode("utf-8", errors="replace")) + 1
        self.segments[-1].lines.append((line, size))
        self.size += size
        while self.size > self.limit:
            segment = self.segments[self._first]
            if not segment.lines:
                self._first += 1
                continue
            _, dropped = segment.lines.popleft()
            segment.dropped_bytes += dropped
            segment.dropped_lines += 1
            self.size -= dropped


def pod_kept(on_finish_action: str, phase: str | None, base_succeeded: bool) -> bool:
    """Whether ``on_finish_action`` leaves the pod in place (upstream's ``process_pod_deletion`` rule)."""
    if on_finish_action == "delete_pod":
        return False
    if on_finish_action == "delete_succeeded_pod":
        return not (phase == "Succeeded" or base_succeeded)
    if on_finish_action == "delete_active_pod":
        return phase not in ("Running", "Pending")
    return True


async def read_into(core: Any, tail: Tail, pod: str, namespace: str, container: str, *, kept: bool) -> None:
    """One container's log into ``tail``, decoded line by line; a log that cannot be read is a warning."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        response = await core.read_namespaced_pod_log(
            pod, namespace, container=container, _preload_content=False, _request_timeout=READ_TIMEOUT
        )
    except ApiException as e:
        tail.warning(
            "Could not read the log of container %s of pod %s: HTTP %s %s", container, pod, e.status, e.reason
        )
        return
    except Exception as e:
        tail.warning("Could not read the log of container %s of pod %s: %s", container, pod, e)
        return
    tail.start(pod, container, kept=kept)
    partial = b""
    try:
        async for chunk in response.content.iter_chunked(LOG_CHUNK_BYTES):
            partial += chunk
            *complete, partial = partial.split(b"\n")
            for line in complete:
                tail.add(decoded(line.rstrip(b"\r")))
            while len(partial) > MAX_LINE_BYTES:
                tail.add(decoded(partial[:MAX_LINE_BYTES]))
                partial = partial[MAX_LINE_BYTES:]
        if partial:
            tail.add(decoded(partial.rstrip(b"\r")))
    except Exception as e:  # a log is a nice-to-have; never fail the task for it
        tail.warning("Reading the log of container %s of pod %s stopped: %s", container, pod, e)
    finally:
        response.release()


def decoded(line: bytes) -> str:
    """UTF-8, undecodable bytes escaped (as upstream's operator decodes log lines)."""
    return line.decode("utf-8", errors="backslashreplace")


async def write(log: Any, tail: Tail, on_finish_action: str) -> None:
    """Log ``tail`` as the worker logs pod lines (``[pod] [container] line``), a note where lines were
    left out, writing only while the log socket has room."""
    fd = log_channel()
    deadline = time.monotonic() + _DRAIN_SECONDS
    since_check = 0
    for segment in tail.segments:
        if segment.warning is not None:
            log.warning(*segment.warning)
            continue
        if segment.dropped_lines:
            where = (
                f"the full log is in pod {segment.pod}, which is kept"
                if segment.kept
                else f"pod {segment.pod} is deleted (on_finish_action={on_finish_action}); "
                "on_finish_action='keep_pod' keeps it with its full log"
            )
            log.warning(
                "[%s] [%s] ... %d bytes (%d lines) of this log left out: the task log keeps the last %d "
                "bytes of the Job's pod logs ([jobwatch] %s); %s",
                segment.pod,
                segment.container,
                segment.dropped_bytes,
                segment.dropped_lines,
                tail.limit,
                MAX_BYTES_OPTION,
                where,
            )
        for line, size in segment.lines:
            if fd is not None and since_check >= _ROOM_BYTES // 4:
                await wait_unread_below(_ROOM_BYTES, deadline=deadline, fd=fd)
                since_check = 0
            log.info("[%s] [%s] %s", segment.pod, segment.container, line)
            since_check += size + 256  # each record carries its JSON envelope too

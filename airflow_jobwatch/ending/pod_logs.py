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
just before the trigger returns partly misses the task's log. The triggerer's event loop serves every
deferred task of the deployment, so this module keeps these rules:

- **Never block the loop.** A write into a full socket blocks the whole event loop until the
  supervisor's next pass. Pod lines are written only while the bytes unread in the socket (asked of the
  kernel, ``TIOCOUTQ``, which counts each record's real cost: text, JSON envelope and the kernel's own
  overhead) stay under :data:`ROOM_BYTES`, and each line is cut into pieces of at most
  :data:`LINE_PIECE_BYTES`, so that one write can never fill the socket. Waiting for room is
  ``asyncio.sleep``.
- **Give up on a supervisor that stopped reading, not on a slow one.** The wait for room ends only when
  the supervisor read nothing for :data:`STALL_SECONDS` while bytes waited (progress resets the clock);
  the lines not yet written are then dropped with one warning that says how many and how to read the
  full log. Nothing is ever written without room.
- **No head-of-line waits.** Writers take turns (a FIFO, :data:`TURN_BYTES` each), so two tasks' logs
  are interleaved, not queued one behind the other; and a trigger waits before it ends only until the
  supervisor has read the lines that were in the socket when it asked (its own, and those ahead of
  them), never for lines written after (:func:`drained`). A task that wrote no pod lines never waits for
  the writers.
- **Memory bounded in bytes of memory.** A task's tail is held as bytes, each line costing its text and
  its record's envelope (:data:`RECORD_BYTES`) against ``[jobwatch] trigger_log_max_bytes``; and every
  tail of the process holds its bound from one budget of :data:`PROCESS_BUDGET_BYTES`, so that many Jobs
  ending at once wait for memory instead of taking it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

#: ``[jobwatch] trigger_log_max_bytes``: the most of a task's pod logs the trigger writes into its task
#: log, each line counted with its record's envelope (:data:`RECORD_BYTES`); the tail is kept.
MAX_BYTES_OPTION = "trigger_log_max_bytes"

#: Tasks whose pod logs are read at the same time in one triggerer process (log requests in flight).
READ_CONCURRENCY = 8

#: What every tail held at once in one triggerer process may take, together: a tail holds its
#: ``trigger_log_max_bytes`` from this budget while it reads and writes, and waits for it otherwise.
#: Twice the option's ceiling, so that the largest tail never waits for itself; 32 default tails at once.
PROCESS_BUDGET_BYTES = 32 * 1024 * 1024

#: Bytes read from a log stream at a time. The loop gets a turn after each chunk, so that parsing a
#: chunk is the longest the reader holds the loop: at most 4,096 lines (empty ones), about 10 ms.
LOG_CHUNK_BYTES = 4096
#: The longest piece of a line the trigger writes as one record: a longer line (a progress bar that
#: redraws with ``\r``, a JSON dump) is cut into pieces at a UTF-8 character boundary, so that a record,
#: even with every byte escaped six-fold in JSON (``\u0001``), stays far under :data:`ROOM_BYTES`.
LINE_PIECE_BYTES = 4096
#: About what each line's log record adds to its text on the way to the task log: the JSON envelope
#: (timestamp, level, logger, trigger id) and the ``[pod] [container]`` prefix are counted apart.
RECORD_BYTES = 192
#: What a segment (one container's log, or a warning in its place) costs besides its lines.
SEGMENT_BYTES = 512

#: Pod lines are written while fewer than this many bytes (kernel accounting, which counts at least
#: 768 bytes for any record on Linux) wait unread in the log socket, and never more than a third of the
#: socket's send buffer (Linux's default is 208 KiB): a write then never blocks, with room to spare for
#: the lines every other trigger logs without pacing.
ROOM_BYTES = 64 * 1024
#: What one writer may write per turn before the next waiting writer gets the socket.
TURN_BYTES = 16 * 1024
#: How long the supervisor may read nothing while bytes wait before a writer gives up: its remaining
#: lines are dropped with a warning, and a trigger waiting for its lines to be read ends without them.
#: Progress (any byte read) resets it; a supervisor busy with its database for a while is not a stall.
STALL_SECONDS = 60.0

#: (connect, read) timeouts of each log request, in seconds: a request that hangs gives its slot of
#: :data:`READ_CONCURRENCY` back (the log is then a warning), instead of keeping other tasks waiting.
READ_TIMEOUT = (10.0, 60.0)

_semaphores: dict[int, asyncio.Semaphore] = {}
_budgets: dict[int, Budget] = {}
_channels: dict[tuple[int, int | None], Channel] = {}


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


class Budget:
    """Bytes shared by the tails of one process, handed out first come, first served: a request waits
    until every earlier one has been served and its own bytes are free (so a large tail is not starved
    by small ones)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        size = min(size, self.total)
        if self._waiting or self.free < size:
            future = asyncio.get_running_loop().create_future()
            self._waiting.append((size, future))
            try:
                await future
            except BaseException:
                if future.done() and not future.cancelled():
                    self._release(size)  # granted as it was cancelled: give it back
                elif (size, future) in self._waiting:
                    self._waiting.remove((size, future))
                    self._grant()
                raise
        else:
            self.free -= size
        try:
            yield
        finally:
            self._release(size)

    def _release(self, size: int) -> None:
        self.free += size
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self._waiting[0][0] <= self.free:
            size, future = self._waiting.popleft()
            if not future.done():
                self.free -= size
                future.set_result(None)


def budget() -> Budget:
    """The process-wide memory budget of the tails (``async with budget().hold(limit):``)."""
    loop = asyncio.get_running_loop()
    shared = _budgets.get(id(loop))
    if shared is None:
        _budgets.clear()
        shared = _budgets[id(loop)] = Budget(PROCESS_BUDGET_BYTES)
    return shared


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


def _room(fd: int) -> int:
    """:data:`ROOM_BYTES`, or a third of the socket's send buffer where that is smaller."""
    import os
    import socket

    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            send_buffer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    except OSError:
        return ROOM_BYTES
    return max(4 * LINE_PIECE_BYTES, min(ROOM_BYTES, send_buffer // 3))


class Channel:
    """The log socket of one process, shared by every trigger that writes pod lines into it.

    Progress is how much the supervisor has read: ``written - unread``, where ``written`` is a lower bound
    of what the paced writers put in (each write's growth of the unread bytes, sampled just before and
    after it, with no ``await`` between) and ``unread`` the kernel's count. Lines the rest of the process
    logs without pacing are not in ``written``: they only make a wait longer, never shorter.
    """

    def __init__(self, fd: int | None, *, stall_seconds: float | None = None, room: int | None = None):
        self.fd = fd
        self.stall_seconds = STALL_SECONDS if stall_seconds is None else stall_seconds
        self.room = room if room is not None else (_room(fd) if fd is not None else ROOM_BYTES)
        self.written = 0
        self._read_best: int | None = None
        self._last_unread = 0
        self._waiting_since: float | None = None  # bytes unread and nothing read since then
        self._turns: deque[tuple[int, asyncio.Future[bool]]] = deque()
        self._server: asyncio.Task[None] | None = None

    def unread(self) -> int:
        """Bytes unread in the socket now (0 where the kernel does not say), noting progress."""
        unread = unread_bytes(self.fd) if self.fd is not None else None
        unread = unread or 0
        read = self.written - unread
        # only a read makes the unread bytes fewer; more read than ever before is progress too
        if unread < self._last_unread or self._read_best is None or read > self._read_best:
            self._waiting_since = None
        if unread and self._waiting_since is None:
            self._waiting_since = time.monotonic()
        self._read_best = read if self._read_best is None else max(read, self._read_best)
        self._last_unread = unread
        return unread

    def stalled(self) -> bool:
        """The supervisor has read nothing for ``stall_seconds`` while bytes waited for it."""
        return self._waiting_since is not None and time.monotonic() - self._waiting_since > self.stall_seconds

    def fits(self, cost: int) -> bool:
        return self.unread() + cost <= self.room

    async def turn(self, cost: int) -> bool:
        """Wait for room for a record of about ``cost`` bytes and for this writer's turn among those
        waiting (first come, first served); False when the supervisor has stopped reading."""
        if not self._turns and self.fits(cost):
            await asyncio.sleep(0)  # a turn ends with a pass of the loop, whatever the room
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._turns.append((cost, future))
        if self._server is None or self._server.done():
            self._server = asyncio.get_running_loop().create_task(self._serve())
        try:
            return await future
        except asyncio.CancelledError:
            if (cost, future) in self._turns:
                self._turns.remove((cost, future))
            raise

    async def _serve(self) -> None:
        """Give the socket to the waiting writers in turn, polling the kernel with a short, growing sleep
        (the supervisor reads on its own schedule and says nothing when it has)."""
        delay = 0.002
        while self._turns:
            cost, future = self._turns[0]
            if future.done():
                self._turns.popleft()
            elif self.fits(cost):
                self._turns.popleft()
                future.set_result(True)
                delay = 0.002
                await asyncio.sleep(0)  # that writer writes its turn before the next one is served
            elif self.stalled():
                while self._turns:
                    _, future = self._turns.popleft()
                    if not future.done():
                        future.set_result(False)
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)

    async def read_up_to_here(self) -> bool:
        """Wait until the supervisor has read every byte unread in the socket now (whatever is written
        after does not delay it); False when it stopped reading first."""
        if self.fd is None:
            return True
        written = self.written
        delay = 0.002
        # the bytes unread now are read once all that is still unread was written after this call
        while self.unread() > self.written - written:
            if self.stalled():
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True


def channel() -> Channel:
    """This process's log channel (its socket to the supervisor, or none)."""
    loop = asyncio.get_running_loop()
    fd = log_channel()
    key = (id(loop), fd)
    shared = _channels.get(key)
    if shared is None:
        _channels.clear()
        shared = _channels[key] = Channel(fd)
    return shared


async def drained(log: Any, *, channel_: Channel | None = None) -> None:
    """Return once the supervisor has read the log lines this trigger wrote so far (and those ahead of
    them in the socket), so that they reach the task's log, not the triggerer's. Returns at once when
    nothing is unread; gives up with a warning when the supervisor stopped reading."""
    shared = channel_ or channel()
    if not await shared.read_up_to_here():
        log.warning(
            "The triggerer read none of its log lines for %g s; the last lines of this trigger may be "
            "in the triggerer's own log instead of the task's",
            shared.stall_seconds,
        )


# -- the tail of a task's pod logs ---------------------------------------------------------------------
@dataclass
class _Segment:
    pod: str
    container: str
    kept: bool  # the pod stays after on_finish_action
    namespace: str = ""
    warning: tuple[Any, ...] | None = None  # a warning logged here, in order, instead of lines
    text: bytearray = field(default_factory=bytearray)  # the kept lines, each ending with b"\n"
    lines: int = 0
    dropped_bytes: int = 0
    dropped_lines: int = 0
    line_cost: int = field(init=False)  # what a line costs besides its text: envelope, "[pod] [container] "

    def __post_init__(self) -> None:
        self.line_cost = RECORD_BYTES + len(self.pod) + len(self.container) + 5

    def pop_line(self) -> int:
        """Drop the oldest line; its bytes (newline included)."""
        end = self.text.find(b"\n") + 1
        del self.text[:end]  # CPython moves the start of a bytearray, it does not copy the rest
        self.lines -= 1
        self.dropped_lines += 1
        self.dropped_bytes += end
        return end

    def texts(self) -> Iterator[str]:
        """The kept lines, decoded, one at a time (never all at once)."""
        start = 0
        while (end := self.text.find(b"\n", start)) >= 0:
            yield decoded(self.text[start:end])
            start = end + 1


class Tail:
    """The last ``limit`` bytes of lines across a task's containers, in order, with how much of each
    container's log was left out. Each line costs its UTF-8 bytes, its newline and its record's envelope
    (:attr:`_Segment.line_cost`); the lines are held as bytes, so the memory held stays within about
    twice ``limit`` (a ``bytearray``'s spare capacity) however short the lines."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.segments: deque[_Segment] = deque()
        self._partial = bytearray()  # the line being read, not yet ended
        self.earlier_segments = 0  # whole segments dropped from the front (their notes with them)
        self.earlier_lines = 0
        self.earlier_bytes = 0

    def start(self, pod: str, container: str, *, kept: bool, namespace: str = "") -> None:
        self.finish()
        self.segments.append(_Segment(pod, container, kept, namespace))
        self.size += SEGMENT_BYTES
        self._trim()

    def warning(self, message: str, *args: Any) -> None:
        """A warning to log in its place among the lines."""
        self.finish()
        self.segments.append(_Segment("", "", True, warning=(message, *args)))
        self.size += SEGMENT_BYTES
        self._trim()

    def add(self, line: str | bytes) -> None:
        """One whole line (without its newline)."""
        data = line.encode("utf-8", errors="surrogateescape") if isinstance(line, str) else line
        self.feed(data + b"\n")

    def feed(self, chunk: bytes) -> None:
        """Bytes of the current container's log as they come: lines are split at ``\\n`` (a ``\\r``
        before it is dropped), and a line longer than :data:`LINE_PIECE_BYTES` is cut into pieces of at
        most that, at UTF-8 character boundaries, from its start; a line being read never holds more
        than twice that."""
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            if end < 0:
                self._partial += chunk[start:]
                self._cut(2 * LINE_PIECE_BYTES)  # more may come, a "\r" that ends the line among it
                return
            stop = end - 1 if end > start and chunk[end - 1] == 0x0D else end
            if self._partial or stop - start > LINE_PIECE_BYTES:
                self._partial += chunk[start:end]
                self.finish(empty_too=True)
            else:  # a whole short line in this chunk: the common case, kept cheap
                self._add(chunk[start:stop])
            start = end + 1

    def finish(self, *, empty_too: bool = False) -> None:
        """The end of the current line (``empty_too``) or of the current container's log, where a last
        line without a newline is a line too."""
        if not (self._partial or empty_too):
            return
        if self._partial.endswith(b"\r"):
            del self._partial[-1:]
        self._cut(LINE_PIECE_BYTES)
        self._add(bytes(self._partial))
        self._partial.clear()

    def _cut(self, longest: int) -> None:
        while len(self._partial) > longest:
            cut = _char_boundary(self._partial, LINE_PIECE_BYTES)
            self._add(bytes(self._partial[:cut]))
            del self._partial[:cut]

    def _add(self, data: bytes) -> None:
        segment = self.segments[-1]
        segment.text += data
        segment.text += b"\n"
        segment.lines += 1
        self.size += len(data) + 1 + segment.line_cost
        if self.size > self.limit:
            self._trim()

    def _trim(self) -> None:
        while self.size > self.limit:
            segment = self.segments[0]
            if segment.lines:
                self.size -= segment.pop_line() + segment.line_cost
            elif len(self.segments) > 1:  # a segment with nothing left: only its note goes
                self.segments.popleft()
                self.size -= SEGMENT_BYTES
                self.earlier_segments += 1
                self.earlier_lines += segment.dropped_lines
                self.earlier_bytes += segment.dropped_bytes
            else:
                break

    def memory(self) -> int:
        """Bytes of memory the tail holds (its buffers and segments)."""
        return sys.getsizeof(self._partial) + sum(
            sys.getsizeof(s) + sys.getsizeof(s.text) + SEGMENT_BYTES for s in self.segments
        )


def _char_boundary(data: bytearray, at: int) -> int:
    """``at``, moved back to the start of the UTF-8 character it falls in (at most 3 bytes)."""
    for cut in range(at, max(at - 4, 0), -1):
        if data[cut] & 0xC0 != 0x80:  # not a continuation byte
            return cut
    return at


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
    """One container's log into ``tail``, line by line; a log that cannot be read is a warning."""
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
    tail.start(pod, container, kept=kept, namespace=namespace)
    try:
        async for chunk in response.content.iter_chunked(LOG_CHUNK_BYTES):
            tail.feed(chunk)
            await asyncio.sleep(0)  # a buffered stream does not suspend: let the loop run between chunks
        tail.finish()
    except Exception as e:  # a log is a nice-to-have; never fail the task for it
        tail.finish()
        tail.warning("Reading the log of container %s of pod %s stopped: %s", container, pod, e)
    finally:
        response.release()


def decoded(line: bytes | bytearray) -> str:
    """UTF-8, undecodable bytes escaped (as upstream's operator decodes log lines)."""
    return line.decode("utf-8", errors="backslashreplace")


def _where(segment: _Segment, on_finish_action: str) -> str:
    if segment.kept:
        return f"the full log is in pod {segment.pod}, which is kept"
    return (
        f"pod {segment.pod} is deleted (on_finish_action={on_finish_action}); "
        "on_finish_action='keep_pod' keeps it with its full log"
    )


def _note_left_out(log: Any, tail: Tail, segment: _Segment, on_finish_action: str) -> None:
    log.warning(
        "[%s] [%s] ... %d bytes (%d lines) of this log left out: the task log keeps the last %d bytes of "
        "the Job's pod logs, each line counted with its %d-byte log record ([jobwatch] %s); %s",
        segment.pod,
        segment.container,
        segment.dropped_bytes,
        segment.dropped_lines,
        tail.limit,
        RECORD_BYTES,
        MAX_BYTES_OPTION,
        _where(segment, on_finish_action),
    )


async def write(log: Any, tail: Tail, on_finish_action: str, *, channel_: Channel | None = None) -> None:
    """Log ``tail`` as the worker logs pod lines (``[pod] [container] line``), a note where lines were
    left out, writing only while the log socket has room and in turn with the other writers. When the
    supervisor stops reading, the lines not yet written are dropped with one warning."""
    shared = channel_ or channel()
    if tail.earlier_segments:
        log.warning(
            "... the logs of %d earlier containers of this Job (%d bytes, %d lines) left out: the task log "
            "keeps the last %d bytes of the Job's pod logs ([jobwatch] %s)",
            tail.earlier_segments,
            tail.earlier_bytes,
            tail.earlier_lines,
            tail.limit,
            MAX_BYTES_OPTION,
        )
    share = 0  # bytes this writer may still write in its turn
    segments = list(tail.segments)
    for index, segment in enumerate(segments):
        if segment.warning is not None:
            log.warning(*segment.warning)
            continue
        if segment.dropped_lines:
            _note_left_out(log, tail, segment, on_finish_action)
        position = 0
        for text in segment.texts():
            cost = 768 + segment.line_cost + len(text)  # the kernel counts 768 bytes for a short record
            if shared.fd is None:
                if share <= 0:  # no supervisor to pace for: still let the loop run now and then
                    await asyncio.sleep(0)
                    share = TURN_BYTES
                log.info("[%s] [%s] %s", segment.pod, segment.container, text)
            else:
                before = shared.unread()
                if share <= 0 or before + cost > shared.room:
                    if not await shared.turn(cost):
                        _note_dropped(log, shared, segments[index:], position, on_finish_action)
                        return
                    share = TURN_BYTES
                    before = shared.unread()
                log.info("[%s] [%s] %s", segment.pod, segment.container, text)
                shared.written += max(0, shared.unread() - before)
            share -= cost
            position += 1


def _note_dropped(
    log: Any, shared: Channel, segments: list[_Segment], position: int, on_finish_action: str
) -> None:
    """The one warning for lines not written because the supervisor stopped reading."""
    lines = nbytes = 0
    where: list[str] = []
    for n, segment in enumerate(segments):
        if segment.warning is not None:
            continue
        skip = position if n == 0 else 0
        left = segment.lines - skip
        if left <= 0:
            continue
        lines += left
        nbytes += len(segment.text) - (_offset(segment.text, skip) if skip else 0)
        where.append(
            f"kubectl logs -n {segment.namespace or 'NAMESPACE'} {segment.pod} -c {segment.container}"
            if segment.kept
            else f"pod {segment.pod} (container {segment.container}) is deleted"
        )
    log.warning(
        "%d lines (%d bytes) of the Job's pod logs not written: the triggerer read none of its log lines "
        "for %g s; the full logs: %s",
        lines,
        nbytes,
        shared.stall_seconds,
        "; ".join(where),
    )


def _offset(text: bytearray, lines: int) -> int:
    """Where line number ``lines`` (0-based) starts in ``text``."""
    offset = 0
    for _ in range(lines):
        offset = text.find(b"\n", offset) + 1
    return offset


# -- the other lines of a task's end -------------------------------------------------------------------


class Lines:
    """A logger-like buffer for the lines an end writes besides the pod logs (a line per pod, the XCom
    lines, a line per pod cleaned up): their count grows with the Job's pods, so they are collected here
    and written by :meth:`write`, paced like the pod lines, never in one burst that could fill the socket.

    Only the methods the end path calls are offered (``info``, ``warning``, ``error``); each keeps its
    format and arguments as given, so the masking logger formats and redacts them when they are written.
    """

    def __init__(self) -> None:
        self._records: list[tuple[str, str, tuple[Any, ...]]] = []

    def info(self, msg: str, *args: Any) -> None:
        self._records.append(("info", msg, args))

    def warning(self, msg: str, *args: Any) -> None:
        self._records.append(("warning", msg, args))

    def error(self, msg: str, *args: Any) -> None:
        self._records.append(("error", msg, args))

    async def write(self, log: Any, *, channel_: Channel | None = None) -> None:
        """Write the collected lines into ``log`` in order, only while the log socket has room and in turn
        with the other writers; when the supervisor stops reading, the rest is dropped with one warning."""
        shared = channel_ or channel()
        records, self._records = self._records, []
        share = 0
        for index, (level, msg, args) in enumerate(records):
            text = msg % args if args else msg
            cost = 768 + RECORD_BYTES + len(text)
            if shared.fd is None:
                if share <= 0:
                    await asyncio.sleep(0)
                    share = TURN_BYTES
            else:
                before = shared.unread()
                if share <= 0 or before + cost > shared.room:
                    if not await shared.turn(cost):
                        log.warning(
                            "%d lines of this task's end not written: the triggerer read none of its log "
                            "lines for %g s",
                            len(records) - index,
                            shared.stall_seconds,
                        )
                        return
                    share = TURN_BYTES
                    before = shared.unread()
            getattr(log, level)(msg, *args)
            if shared.fd is not None:
                shared.written += max(0, shared.unread() - before)
            share -= cost

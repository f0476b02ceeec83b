"""The triggerer's log socket, for tests: log records go as JSON lines, one blocking write each, into one
end of a real ``socketpair``; a fake supervisor reads the other end at a given pace (4 KiB a pass, as
Airflow's ``make_buffered_socket_reader`` does), or stops reading. Also a probe of the event loop's
longest stall.

Each write is one blocking ``write(2)``, as Airflow's ``os.fdopen(fd, "wb", buffering=0)`` makes it. It
first checks whether it could block: the bytes unread in the socket (``TIOCOUTQ``), plus the record and
the kernel's overhead, past the socket's send buffer. Such a write is counted in
:attr:`Supervisor.risky_writes` and raises :class:`WouldBlock` instead of hanging the test: the writer
under test wrote without room.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from airflow_jobwatch.ending import pod_logs

#: What Linux counts, at most, besides a record's bytes (its sk_buff, rounded up).
KERNEL_OVERHEAD = 2048


class WouldBlock(AssertionError):
    """A record written into a socket without room for it: in the triggerer, the loop would block."""


class Supervisor:
    """A reader of the log socket with a pace: ``pass_bytes`` per pass, ``pause`` seconds between passes,
    and no more reads once ``stop_after`` bytes were read (a supervisor that stopped reading). It keeps
    what it read, or only the last ``keep_bytes`` of it."""

    def __init__(
        self,
        *,
        pass_bytes: int = 4096,
        pause: float = 0.0,
        stop_after: int | None = None,
        keep_bytes: int | None = None,
    ) -> None:
        self.writer, self.reader = socket.socketpair()
        self.send_buffer = self.writer.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        self.pass_bytes, self.pause, self.stop_after = pass_bytes, pause, stop_after
        self.data = bytearray()
        self.read = 0
        self.keep_bytes = keep_bytes
        self.warnings: list[str] = []  # every warning read, kept whatever keep_bytes
        self._line = bytearray()
        self.risky_writes = 0
        self.writes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True, name="fake-supervisor")

    # the write side: what the triggerer's subprocess does with each record
    def fileno(self) -> int:
        return self.writer.fileno()

    def write(self, data: bytes) -> None:
        unread = pod_logs.unread_bytes(self.writer.fileno()) or 0
        if unread + len(data) * 9 // 8 + KERNEL_OVERHEAD > self.send_buffer:
            self.risky_writes += 1
            raise WouldBlock(f"a {len(data)}-byte record written with {unread} bytes unread")
        self.writes += 1
        os.write(self.writer.fileno(), data)  # sockets' own calls would poll first when they have a timeout

    def flush(self) -> None:
        pass

    # the read side
    def _read(self) -> None:
        self.reader.settimeout(0.05)
        while not self._stop.is_set():
            if self.stop_after is not None and self.read >= self.stop_after:
                time.sleep(0.01)
                continue
            want = self.pass_bytes
            if self.stop_after is not None:
                want = min(want, self.stop_after - self.read)
            try:
                chunk = self.reader.recv(want)
            except TimeoutError:
                continue
            if not chunk:
                return
            self._keep(chunk)
            if self.pause:
                time.sleep(self.pause)

    def __enter__(self) -> Supervisor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.writer.close()
        self.reader.close()

    def read_rest(self) -> None:
        """Stop the pace and read whatever is still unread (after the writer under test is done)."""
        self._stop.set()
        self._thread.join(10)
        self.reader.setblocking(False)
        while True:
            try:
                chunk = self.reader.recv(65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            self._keep(chunk)

    def _keep(self, chunk: bytes) -> None:
        self._line += chunk
        *lines, rest = self._line.split(b"\n")
        self._line = bytearray(rest)
        self.warnings += [json.loads(line)["event"] for line in lines if b'"level": "warning"' in line]
        with self._lock:
            self.read += len(chunk)
            self.data += chunk
            if self.keep_bytes is not None and len(self.data) > self.keep_bytes:
                del self.data[: len(self.data) - self.keep_bytes]

    def received(self, text: str) -> int:
        """How many times ``text`` is in what was read (kept)."""
        with self._lock:
            return self.data.count(text.encode())

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            raw = bytes(self.data)
        out = []
        for line in raw.split(b"\n"):
            try:
                out.append(json.loads(line))
            except ValueError:  # an empty line, or the first one cut by keep_bytes
                continue
        return out

    def events(self) -> list[str]:
        return [str(r.get("event")) for r in self.records()]


class _Factory:
    """A structlog logger factory whose ``io`` is the supervisor's socket, as Airflow's is in the
    triggerer's subprocess (``pod_logs.log_channel`` finds the socket through it)."""

    def __init__(self, io: Supervisor) -> None:
        self.io = io

    def __call__(self, *args: Any) -> Any:
        return structlog.BytesLogger(self.io)  # type: ignore[arg-type]


@contextmanager
def logging_to(supervisor: Supervisor) -> Iterator[None]:
    """structlog writes JSON records (timestamp, level, logger, event) into the supervisor's socket."""
    saved = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.JSONRenderer(serializer=lambda o, **kw: json.dumps(o, **kw).encode()),
        ],
        logger_factory=_Factory(supervisor),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.reset_defaults()
        structlog.configure(**saved)


class LoopLag:
    """The event loop's longest stall while it runs: a task that sleeps 5 ms and measures how late it
    woke (``async with LoopLag() as lag: ...; lag.longest``)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _probe(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.005)
            self.longest = max(self.longest, time.monotonic() - before - 0.005)

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._probe())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

"""The trigger waits, without blocking its loop, until the triggerer's supervisor has read the log lines
it wrote: a line still unread when the trigger ends is filed in the triggerer's own log, not the task's."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from airflow_jobwatch.triggers import pod_logs
from airflow_jobwatch.triggers.ending import may_fail_here


def _reader_after(sock: socket.socket, delay: float, got: list[bytes]) -> threading.Thread:
    def read() -> None:
        time.sleep(delay)  # a supervisor busy with its database work
        sock.settimeout(5)
        while chunk := sock.recv(4096):  # the supervisor reads 4 KiB a pass
            got.append(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


async def test_waits_until_the_reader_has_read_every_byte() -> None:
    writer, reader = socket.socketpair()
    try:
        writer.sendall(b"x" * 50_000)
        assert (pod_logs.unread_bytes(writer.fileno()) or 0) > 0
        got: list[bytes] = []
        thread = _reader_after(reader, 0.3, got)
        ticks = 0

        async def tick() -> None:  # the loop stays free while the trigger waits
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        assert await pod_logs.wait_unread_below(0, deadline=time.monotonic() + 10, fd=writer.fileno())
        ticker.cancel()
        assert time.monotonic() - started >= 0.25
        assert sum(map(len, got)) == 50_000  # all read before the wait returned
        assert pod_logs.unread_bytes(writer.fileno()) == 0
        assert ticks >= 10
    finally:
        writer.close()
        thread.join(5)
        reader.close()


async def test_a_reader_that_never_reads_does_not_hold_the_task() -> None:
    writer, reader = socket.socketpair()
    try:
        writer.sendall(b"x" * 1000)
        assert not await pod_logs.wait_unread_below(0, deadline=time.monotonic() + 0.2, fd=writer.fileno())
    finally:
        writer.close()
        reader.close()


def test_no_log_socket_outside_a_triggerer() -> None:
    assert pod_logs.log_channel() is None


@pytest.mark.parametrize(
    ("plan", "version", "expected"),
    [
        ({"last_try": True}, "3.3.0", True),
        ({"last_try": False}, "3.3.0", False),
        ({"last_try": False}, "3.3.1", True),
        ({"fail": False}, "3.3.2", False),  # a plan from an earlier release: its worker's answer
        ({"fail": True}, "3.3.0", True),
    ],
)
def test_the_triggerers_airflow_decides_whether_a_failure_ends_here(
    monkeypatch: pytest.MonkeyPatch, plan: dict[str, bool], version: str, expected: bool
) -> None:
    import airflow

    monkeypatch.setattr(airflow, "__version__", version)
    assert may_fail_here(plan) is expected


class _SocketLog:
    """A logger that writes each record as a blocking, unbuffered write to a socket, as the triggerer's
    subprocess writes its log records to its supervisor."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def _write(self, message: str, *args: object) -> None:
        self.sock.sendall((message % args).encode() + b" " + b"." * 300 + b"\n")  # a JSON envelope's size

    info = warning = error = _write


async def test_two_tasks_logs_at_once_all_read_and_the_loop_never_blocked(monkeypatch) -> None:
    writer, reader = socket.socketpair()
    monkeypatch.setattr(pod_logs, "log_channel", lambda: writer.fileno())
    got: list[bytes] = []

    def supervisor() -> None:  # 4 KiB a pass, with its database work between passes
        reader.settimeout(10)
        while chunk := reader.recv(4096):
            got.append(chunk)
            time.sleep(0.002)

    thread = threading.Thread(target=supervisor, daemon=True)
    thread.start()
    longest_gap = 0.0

    async def tick() -> None:
        nonlocal longest_gap
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            longest_gap, last = max(longest_gap, now - last), now

    async def task(name: str) -> None:
        tail = pod_logs.Tail(10_000_000)
        tail.start(f"pod-{name}", "base", kept=True)
        for i in range(2000):
            tail.add(f"{name} line {i:05d}")
        log = _SocketLog(writer)
        async with pod_logs.writing():
            await pod_logs.write(log, tail, "keep_pod")
        log.info("Deleting pod: pod-%s", name)
        await pod_logs.drained(log)
        text = b"".join(got).decode()
        # everything this task wrote was read before it would end the task
        assert text.count(f"{name} line ") == 2000 and f"Deleting pod: pod-{name}" in text

    ticker = asyncio.create_task(tick())
    try:
        await asyncio.wait_for(asyncio.gather(task("a"), task("b")), 60)
    finally:
        ticker.cancel()
        writer.close()
        thread.join(10)
        reader.close()
    assert longest_gap < 0.2, longest_gap  # Airflow warns of a blocked triggerer loop past 0.2 s

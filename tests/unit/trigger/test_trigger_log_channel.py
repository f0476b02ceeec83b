"""The trigger waits, without blocking its loop, until the triggerer's supervisor has read the log lines
it wrote: a line still unread when the trigger ends is filed in the triggerer's own log, not the task's."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import structlog
from support.log_socket import LoopLag, Supervisor, logging_to

from airflow_jobwatch.ending import pod_logs
from airflow_jobwatch.ending.end import may_fail_here


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
        assert await pod_logs.Channel(writer.fileno()).read_up_to_here()
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
        assert not await pod_logs.Channel(writer.fileno(), stall_seconds=0.2).read_up_to_here()
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


async def test_two_tasks_logs_at_once_all_read_and_the_loop_never_blocked() -> None:
    # the supervisor reads 4 KiB a pass, with its database work between passes
    with Supervisor(pause=0.002) as supervisor, logging_to(supervisor):

        async def task(name: str) -> list[str]:
            tail = pod_logs.Tail(10_000_000)
            tail.start(f"pod-{name}", "base", kept=True)
            for i in range(2000):
                tail.add(f"{name} line {i:05d}")
            log = structlog.get_logger("trigger")
            await pod_logs.write(log, tail, "keep_pod")
            log.info("Deleting pod: pod-%s", name)
            await pod_logs.drained(log)
            return supervisor.events()  # what the supervisor had read when the task would end

        async with LoopLag() as lag:
            seen = await asyncio.wait_for(asyncio.gather(task("a"), task("b")), 60)
    for name, read in zip("ab", seen, strict=True):  # every line of the task read before it ends
        assert sum(f"{name} line " in e for e in read) == 2000 and f"Deleting pod: pod-{name}" in read
    assert supervisor.risky_writes == 0
    assert lag.longest < 1.0, lag.longest  # Airflow's deadlock watchdog: nothing near it


async def test_tails_held_at_once_stay_within_the_process_budget_first_come_first_served() -> None:
    budget = pod_logs.Budget(10)
    held, peak, order = 0, 0, []

    async def tail(name: str, size: int) -> None:
        nonlocal held, peak
        async with budget.hold(size):
            held += size
            peak = max(peak, held)
            order.append(name)
            await asyncio.sleep(0.01)
            held -= size

    # the large tail, asked second, is served before the small ones asked after it
    await asyncio.gather(tail("a", 6), tail("large", 8), tail("b", 3), tail("c", 3))
    assert peak <= 10
    assert order == ["a", "large", "b", "c"]
    assert budget.free == 10

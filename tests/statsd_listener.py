"""A StatsD server for tests: a UDP socket on 127.0.0.1 that records every metric line it receives, and
Airflow's ``[metrics]`` settings pointed at it (``statsd_on``, host, port, prefix) through the
environment, the way a deployment configures them."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest


class StatsdListener:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="statsd-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.lines.extend(line for line in data.decode().splitlines() if line)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def names(self) -> set[str]:
        """Metric names received (``airflow.jobwatch.x:1|c`` -> ``airflow.jobwatch.x``)."""
        return {line.split(":", 1)[0] for line in self.snapshot()}

    def values(self, name: str) -> list[str]:
        """Every ``value|type`` received for ``name``."""
        return [line.split(":", 1)[1] for line in self.snapshot() if line.split(":", 1)[0] == name]

    def wait_for(self, predicate: Callable[[StatsdListener], bool], *, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"metrics not received within {timeout} s; got {sorted(self.names())}")
            time.sleep(0.05)

    def wait_for_names(self, *names: str, timeout: float = 30.0) -> None:
        """Block until every name was received (from synchronous tests)."""
        self.wait_for(lambda s: set(names) <= s.names(), timeout=timeout)

    async def names_received(self, *names: str, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Wait until every name was received without blocking the event loop (from async tests)."""
        deadline = time.monotonic() + timeout
        while not set(names) <= self.names():
            if time.monotonic() > deadline:
                missing = sorted(set(names) - self.names())
                raise AssertionError(
                    f"metrics {missing} not received within {timeout} s; got {sorted(self.names())}"
                )
            await asyncio.sleep(0.05)


@contextmanager
def statsd_listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdListener]:
    from airflow_jobwatch import metrics

    listener = StatsdListener()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    metrics.configure()
    try:
        yield listener
    finally:
        listener.close()
        monkeypatch.undo()
        metrics.configure()  # back to the environment's settings (no StatsD in the test run)

"""Watches whose initial backlog is larger than the "too slow" limit still get all of it.

A replay of more than WATCHER_MAX_BUFFER changes used to be filtered through a watcher that closed
itself as "too slow" and dropped everything, so the client got an open, silent stream: no events and
no 410.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from airflow_jobwatch_testing.sandbox import SandboxThread
from airflow_jobwatch_testing.sandbox.store import WATCHER_MAX_BUFFER

from . import helpers

N = WATCHER_MAX_BUFFER + 500


def _stream_events(core: client.CoreV1Api, *, resource_version: str, until: int) -> list[dict]:
    """Read raw watch lines until ``until`` events arrived or the server's timeout ends the stream."""
    resp = core.list_namespaced_pod(
        "default",
        watch=True,
        resource_version=resource_version,
        timeout_seconds=10,
        _preload_content=False,
    )
    events: list[dict] = []
    buf = b""
    try:
        for chunk in resp.stream(2**16):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            events.extend(json.loads(line) for line in lines if line)
            if len(events) >= until:
                break
    finally:
        resp.release_conn()
    return events


@pytest.mark.sandbox(kubelet=False, job_controller=False, history_window=2 * N)
def test_replay_longer_than_the_slow_watcher_limit_is_delivered_whole(
    sandbox: SandboxThread, core: client.CoreV1Api
) -> None:
    start = core.list_namespaced_pod("default").metadata.resource_version
    for i in range(N):
        core.create_namespaced_pod("default", helpers.pod_body(f"p{i}"))
    events = _stream_events(core, resource_version=start, until=N)
    assert len(events) == N
    assert {e["type"] for e in events} == {"ADDED"}
    assert [e["object"]["metadata"]["name"] for e in events] == [f"p{i}" for i in range(N)]

"""The watcher's messages cross the pipe as pickles, several to a frame: each comes back equal."""

from __future__ import annotations

import io
import pickle

import pytest

from airflow_jobwatch.executors.watcher.messages import (
    Metric,
    PodAdopted,
    PodGone,
    PodUpdate,
    Synced,
    WatcherStats,
)

MESSAGES = [
    PodUpdate("ns", "pod-a", "uid-1", {"phase": "running"}, {"task_id": "t"}, False, 1.5),
    PodUpdate("ns", "pod-b", "uid-2", {"phase": "failed", "terminal": True}, {}, True, 2.5, "evicted"),
    Metric("incr", "informer.events", 1, {"namespace": "ns"}),
    Metric("gauge", "informer.cached", 3.0, None),
    Synced(frozenset({("ns", "pod-a")})),
    PodGone("ns", "pod-c", 3.5),
    PodAdopted("ns", "pod-d", "12", 4.5),
    WatcherStats(relists=1, watches=2, healthy=True, connected=True, last_error=None),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_each_message_round_trips(msg: object) -> None:
    back = pickle.loads(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == msg and type(back) is type(msg)


def test_a_frame_of_concatenated_pickles_reads_back_in_order() -> None:
    frame = b"".join(pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL) for m in MESSAGES)
    stream = io.BytesIO(frame)
    read = []
    while stream.tell() < len(frame):
        read.append(pickle.load(stream))
    assert read == MESSAGES

"""Relists that restart from resourceVersion 0 and still never invent a deletion.

A LIST with resourceVersion=0 may be answered from a watch cache that lags behind what the informer has already
seen (an HA control plane's other apiserver, a cache catching up after a restart). These tests script such
lists exactly - the real kubernetes_asyncio client over real HTTP against scripted_server.ScriptedServer - and
check what subscribers see: a running pod is never reported deleted, a finished pod never rolls back, a
deleted pod never comes back, and only a consistent GET by name turns "missing from a stale list" into a
deletion. Tests of the same rules against the sandbox's own stale-cache mode are in
test_informer_stale_sandbox.py.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
from informer_helpers import FAST, eventually
from scripted_server import ScriptedServer, line, list_of, phase_of, pod, start, status, stop, stream

from airflow_jobwatch.kube.engine.informer import EventType, InformerConfig, compare_resource_versions

# Every test here runs with each LIST page decoder (conftest.each_decoder).
pytestmark = pytest.mark.usefixtures("each_decoder", "each_store_form")


def expired_410() -> bytes:
    return line("ERROR", status(410, "Expired", "too old resource version: 6 (12)"))


def deletions(recorder: Any) -> collections.Counter[str]:
    return collections.Counter(
        uid for etype, uid, *_ in recorder.events if etype in (EventType.DELETED, EventType.DELETED_UNKNOWN)
    )


async def test_pod_missing_from_a_stale_list_but_alive_is_not_deleted(server: ScriptedServer):
    """Pod c was created (rv 9) and a finished (rv 10) after the snapshot the stale list comes from (rv 7):
    c stays, confirmed by one GET, and a keeps its Succeeded state."""
    server.lists = [
        list_of(pod("a", 5), pod("b", 6, "Running"), rv=6),
        # the relist after the 410, from a lagging cache: a as it was, no c
        list_of(pod("a", 5), pod("b", 6, "Running"), rv=7),
    ]
    server.watches = [
        stream(
            line("ADDED", pod("c", 9, "Running")),
            line("MODIFIED", pod("a", 10, "Succeeded")),
            expired_410(),
            then_wait=0,
        ),
        # the watch from the stale list's rv replays what we already have, then stays open
        stream(line("ADDED", pod("c", 9, "Running")), line("MODIFIED", pod("a", 10, "Succeeded"))),
    ]
    server.current = {"c": pod("c", 9, "Running")}
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: len(server.watch_queries()) >= 2, what="the watch after the relist")
        assert server.list_queries()[1]["resourceVersion"] == "0"
        assert deletions(rec) == {}, "a pod alive on the server was reported deleted"
        assert phase_of(informer, "uid-c") == "Running"
        assert phase_of(informer, "uid-a") == "Succeeded"
        a_phases = [obj["status"]["phase"] for _, uid, _, obj in rec.events if uid == "uid-a"]
        assert a_phases == ["Pending", "Succeeded"], "a finished pod was rolled back by the stale list"
        assert server.gets == ["c"], "only the pod newer than the list needs a consistent GET"
        assert informer.stats["confirmed_present"] == 1
        assert server.watch_queries()[1]["resourceVersion"] == "7"
    finally:
        await stop(informer, client)


async def test_pod_missing_from_a_stale_list_and_gone_is_deleted_once(server: ScriptedServer):
    """c (seen at rv 9) is missing from the stale list and the GET answers 404: one DELETED_UNKNOWN. b (seen at
    rv 6, missing from a list at rv 7) was deleted before the snapshot: tombstoned without a GET."""
    server.lists = [
        list_of(pod("a", 5), pod("b", 6, "Running"), rv=6),
        list_of(pod("a", 5), rv=7),
    ]
    server.watches = [
        stream(line("ADDED", pod("c", 9, "Running")), expired_410(), then_wait=0),
        stream(),
    ]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: len(server.watch_queries()) >= 2, what="the watch after the relist")
        assert deletions(rec) == {"uid-b": 1, "uid-c": 1}
        assert all(
            etype is EventType.DELETED_UNKNOWN for etype, *_ in rec.events if etype is not EventType.ADDED
        )
        assert server.gets == ["c"]
        assert informer.get("uid-c") is None and informer.get("uid-b") is None
        assert informer.stats["confirmed_gone"] == 1
    finally:
        await stop(informer, client)


async def test_deleted_pod_in_a_stale_list_does_not_come_back(server: ScriptedServer):
    """b's deletion (rv 8) was delivered; a stale list (rv 7) still has b, and the watch from rv 7 replays the
    deletion. b must not be ADDED again nor deleted twice."""
    server.lists = [
        list_of(pod("a", 5), pod("b", 6, "Running"), rv=6),
        list_of(pod("a", 5), pod("b", 6, "Running"), rv=7),
    ]
    server.watches = [
        stream(line("DELETED", pod("b", 8, "Running")), expired_410(), then_wait=0),
        stream(line("DELETED", pod("b", 8, "Running"))),
    ]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: len(server.watch_queries()) >= 2, what="the watch after the relist")
        await eventually(lambda: informer.stats["stale_copies_ignored"] >= 1, what="b's stale copy skipped")
        b_events = [etype for etype, uid, *_ in rec.events if uid == "uid-b"]
        assert b_events == [EventType.ADDED, EventType.DELETED]
        assert informer.get("uid-b") is None
    finally:
        await stop(informer, client)


async def test_periodic_resync_lists_nothing_and_resumes_the_watch(server: ScriptedServer):
    """A periodic resync hands the stored objects to the subscribers again and resumes the watch from the
    last resourceVersion seen (a bookmark's here): no LIST, so no moment without a watch in which an object
    could end and vanish unseen, and nothing is found "missing"."""
    bookmark = {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "20"}}
    server.lists = [list_of(pod("a", 5), pod("b", 6), rv=6), list_of(pod("a", 21, "Running"), rv=21)]
    server.watches = [stream(line("BOOKMARK", bookmark))]
    config = InformerConfig(**{**FAST.__dict__, "resync_interval_seconds": 0.5})
    informer, rec, client = await start(server, config)
    try:
        await eventually(lambda: len(server.watch_queries()) >= 3, what="two periodic resyncs")
        assert [q["resourceVersion"] for q in server.watch_queries()[1:3]] == ["20", "20"]
        assert len(server.list_queries()) == 1
        assert informer.health.relists == 0
        redelivered = collections.Counter(uid for etype, uid, *_ in rec.events if etype is EventType.MODIFIED)
        assert redelivered["uid-a"] >= 1 and redelivered["uid-b"] >= 1
        assert deletions(rec) == {}
        assert phase_of(informer, "uid-b") == "Pending"
    finally:
        await stop(informer, client)


async def test_limit_ignored_by_a_watch_cache_is_detected(server: ScriptedServer):
    """A resourceVersion=0 list answered with more items than `limit` and no continue token: the server
    ignored the limit (a watch cache does), so later RV=0 lists stop asking for pages."""
    many = [pod(f"p{i}", 5 + i) for i in range(FAST.page_size + 3)]
    server.lists = [list_of(*many, rv=20), list_of(*many, rv=21)]
    server.watches = [stream(expired_410(), then_wait=0), stream()]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: len(server.watch_queries()) >= 2, what="the watch after the relist")
        first, second = server.list_queries()[:2]
        assert first["limit"] == str(FAST.page_size)
        assert "limit" not in second and second["resourceVersion"] == "0"
        assert len(informer.items()) == len(many)
        assert deletions(rec) == {}
    finally:
        await stop(informer, client)


async def test_opaque_resource_versions_are_confirmed_not_compared(server: ScriptedServer):
    """resourceVersions that are not plain integers cannot be ordered: after a stale RV=0 list, a changed copy
    and a missing object are both settled by a GET, whose answer is believed."""
    server.lists = [
        list_of(pod("a", "x5"), pod("b", "x6", "Running"), rv="x6"),  # type: ignore[arg-type]
        list_of(pod("a", "x4"), rv="x7"),  # type: ignore[arg-type]
    ]
    server.watches = [stream(expired_410(), then_wait=0), stream()]
    server.current = {"a": pod("a", "x9", "Running"), "b": pod("b", "x8", "Running")}  # type: ignore[arg-type]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: len(server.watch_queries()) >= 2, what="the watch after the relist")
        assert sorted(server.gets) == ["a", "b"]
        assert deletions(rec) == {}
        assert phase_of(informer, "uid-a") == "Running"
        assert informer.get("uid-a")["metadata"]["resourceVersion"] == "x9"
        assert informer.get("uid-b")["metadata"]["resourceVersion"] == "x8"
    finally:
        await stop(informer, client)


def test_compare_resource_versions() -> None:
    assert compare_resource_versions("9", "10") == -1
    assert compare_resource_versions("10", "9") == 1
    assert compare_resource_versions("123", "123") == 0
    assert compare_resource_versions("99", "100") == -1
    for a, b in [("x1", "2"), ("01", "2"), ("", "2"), (None, "2"), ("1", "1.5")]:
        assert compare_resource_versions(a, b) is None

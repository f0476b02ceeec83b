"""Protocol branches the sandbox does not produce, against a scripted HTTP server.

The sandbox only sends a 410 ERROR event as the first line of a watch and never sends a non-410 ERROR event,
a malformed line, or an expired continue token at will. These tests force those branches with a tiny aiohttp
server that answers each request from a script - still real HTTP and the real kubernetes_asyncio client, no
mock of either.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from informer_helpers import FAST, eventually
from scripted_server import (
    ScriptedServer,
    http_error,
    line,
    list_of,
    phase_of,
    pod,
    start,
    status,
    stop,
    stream,
)

from airflow_jobwatch.kube.engine.informer import EventType, InformerConfig


async def test_410_error_event_in_the_middle_of_a_stream(server: ScriptedServer):
    """Events, then an ERROR 410 inside the same open stream: relist from "0", reconcile, watch from the new
    list's resourceVersion."""
    server.lists = [
        list_of(pod("a", 10), pod("b", 11), rv=11),
        list_of(pod("a", 30, "Succeeded"), pod("c", 25), rv=31),
    ]
    server.watches = [
        stream(
            line("MODIFIED", pod("a", 12, "Running")),
            line("ERROR", status(410, "Expired", "too old resource version: 11 (30)")),
        ),
        stream(),
    ]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: len(server.watch_queries()) == 2)
        assert [(e[0], e[1], e[2]) for e in rec.events] == [
            (EventType.ADDED, "uid-a", "10"),
            (EventType.ADDED, "uid-b", "11"),
            (EventType.MODIFIED, "uid-a", "12"),
            (EventType.MODIFIED, "uid-a", "30"),
            (EventType.ADDED, "uid-c", "25"),
            (EventType.DELETED_UNKNOWN, "uid-b", "11"),
        ]
        assert [q.get("resourceVersion") for q in server.list_queries()] == ["0", "0"]
        assert [q["resourceVersion"] for q in server.watch_queries()] == ["11", "31"]
        assert server.watch_queries()[0]["allowWatchBookmarks"] == "true"
        assert (
            5 <= int(server.watch_queries()[0]["timeoutSeconds"]) < 10
        )  # FAST.watch_timeout_seconds x [1, 2)
        assert informer.health.relists == 1
    finally:
        await stop(informer, client)


async def test_bookmarks_move_the_resume_point(server: ScriptedServer):
    server.lists = [list_of(pod("a", 5), rv=5)]
    bookmark = {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "99"}}
    server.watches = [stream(line("BOOKMARK", bookmark), then_wait=1.2), stream()]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: len(server.watch_queries()) == 2)
        assert [q["resourceVersion"] for q in server.watch_queries()] == ["5", "99"]
        assert rec.types() == {EventType.ADDED: 1}  # a bookmark is not an event for subscribers
        assert informer.health.consecutive_failures == 0  # a watch that ended normally is not a failure
    finally:
        await stop(informer, client)


async def test_non_410_error_event_backs_off_and_resumes_from_the_same_version(server: ScriptedServer):
    server.lists = [list_of(pod("a", 5), rv=5)]
    server.watches = [
        stream(line("ERROR", status(500, "InternalError", "etcd leader changed")), then_wait=0),
        stream(line("MODIFIED", pod("a", 6, "Running"))),
    ]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: phase_of(informer, "uid-a") == "Running")
        assert [q["resourceVersion"] for q in server.watch_queries()] == ["5", "5"]
        assert len(server.list_queries()) == 1  # no relist for a 500
        assert "etcd leader changed" in (informer.health.last_error or "")
    finally:
        await stop(informer, client)


async def test_malformed_line_is_a_failure_not_a_crash(server: ScriptedServer):
    server.lists = [list_of(pod("a", 5), rv=5)]
    server.watches = [
        stream(line("MODIFIED", pod("a", 6, "Running")), b'{"type": "MODIFIED", "obj\n', then_wait=0),
        stream(line("MODIFIED", pod("a", 7, "Succeeded"))),
    ]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: phase_of(informer, "uid-a") == "Succeeded")
        # resumed from the last event applied before the bad line
        assert [q["resourceVersion"] for q in server.watch_queries()] == ["5", "6"]
        assert "JSONDecodeError" in (informer.health.last_error or "")
    finally:
        await stop(informer, client)


async def test_http_410_on_the_watch_request_relists(server: ScriptedServer):
    server.lists = [list_of(pod("a", 5), rv=5), list_of(pod("a", 8, "Running"), rv=8)]
    server.watches = [http_error(410, "Gone"), stream()]
    informer, rec, client = await start(server)
    try:
        await eventually(lambda: len(server.watch_queries()) == 2)
        assert [q["resourceVersion"] for q in server.watch_queries()] == ["5", "8"]
        assert [e[0] for e in rec.events] == [EventType.ADDED, EventType.MODIFIED]
    finally:
        await stop(informer, client)


async def test_expired_continue_token_restarts_the_list(server: ScriptedServer):
    """A continue token older than the server's history answers 410: the whole list starts again from page 1
    (resourceVersion "0" and no continue), since pages of different snapshots must not be mixed."""
    server.lists = [
        list_of(pod("a", 5), rv=5, cont="tok-1"),
        http_error(410, "Expired"),
        list_of(pod("a", 9), rv=9, cont="tok-2"),
        list_of(pod("b", 8), rv=9),
    ]
    server.watches = [stream()]
    informer, rec, client = await start(server)
    try:
        assert await informer.wait_synced(5)
        queries = server.list_queries()
        assert [(q.get("resourceVersion"), q.get("continue")) for q in queries] == [
            ("0", None),
            (None, "tok-1"),
            ("0", None),
            (None, "tok-2"),
        ]
        assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "b"]
        # pages are applied as they arrive: page 1 of the failed attempt was (truthfully) delivered, then the
        # complete list brought "a" up to date and added "b"
        assert [(e[0], e[1], e[2]) for e in rec.events] == [
            (EventType.ADDED, "uid-a", "5"),
            (EventType.MODIFIED, "uid-a", "9"),
            (EventType.ADDED, "uid-b", "8"),
        ]
    finally:
        await stop(informer, client)


async def test_watch_closed_at_once_is_backed_off(server: ScriptedServer):
    """A server (or proxy) that accepts each watch and closes it at once without a byte: each such watch is a
    failure, so reconnects follow the backoff instead of spinning."""
    server.lists = [list_of(pod("a", 5), rv=5)]
    server.watches = [stream(then_wait=0)]
    config = InformerConfig(**{**FAST.__dict__, "backoff_initial_seconds": 0.2, "backoff_max_seconds": 0.4})
    informer, rec, client = await start(server, config)
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await eventually(lambda: loop.time() - t0 >= 1.5, within=3)  # observe the reconnect rate for 1.5 s
        # lowest possible delays 0.1 (free retry only for 410) then 0.2 each: at most 1 + 8 watches
        assert 2 <= len(server.watch_queries()) <= 9
        assert informer.health.consecutive_failures >= 2
        assert "without any event" in (informer.health.last_error or "")
    finally:
        await stop(informer, client)


async def test_429_retry_after_and_5xx_without_status_body(server: ScriptedServer):
    async def not_json(request: web.Request) -> web.Response:
        return web.Response(status=502, text="<html>bad gateway</html>")

    server.lists = [
        not_json,
        http_error(429, "TooManyRequests", {"Retry-After": "1"}),
        list_of(pod("a", 5), rv=5),
    ]
    server.watches = [stream()]
    informer, rec, client = await start(server)
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await informer.wait_synced(5)
        assert loop.time() - t0 >= 0.95  # Retry-After: 1 honoured although the backoff is 0.05 s
        assert len(server.list_queries()) == 3
    finally:
        await stop(informer, client)


async def test_managed_fields_are_stripped_unless_asked_to_keep_them(server: ScriptedServer):
    managed = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    listed = pod("a", 5)
    listed["metadata"]["managedFields"] = managed
    watched = pod("a", 6, "Running")
    watched["metadata"]["managedFields"] = managed
    server.lists = [list_of(listed, rv=5)]
    server.watches = [stream(line("MODIFIED", watched))]
    for strip in (True, False):
        config = InformerConfig(**{**FAST.__dict__, "strip_managed_fields": strip, "projection": False})
        informer, rec, client = await start(server, config)
        try:
            await eventually(lambda: phase_of(informer, "uid-a") == "Running")  # noqa: B023
            assert [("managedFields" in e[3]["metadata"]) for e in rec.events] == [not strip, not strip]
        finally:
            await stop(informer, client)


async def test_unhealthy_is_reported_while_sleeping_in_backoff(server: ScriptedServer):
    """Health changes on time even when the engine is asleep in a long backoff (a timer, not the next try)."""
    server.lists = [http_error(503, "ServiceUnavailable")]
    server.watches = [stream()]
    config = InformerConfig(
        **{
            **FAST.__dict__,
            "backoff_initial_seconds": 20,
            "backoff_max_seconds": 30,
            "unhealthy_after_seconds": 0.5,
        }
    )
    informer, rec, client = await start(server, config)
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await eventually(lambda: any(not h.healthy for h in rec.health), within=5)
        assert loop.time() - t0 < 3  # long before the first retry (>= 10 s away)
        assert len(server.list_queries()) == 1
        health = informer.health
        assert (health.synced, health.connected, health.consecutive_failures) == (False, False, 1)
        assert health.seconds_since_sync is None and "503" in (health.last_error or "")
    finally:
        await stop(informer, client)

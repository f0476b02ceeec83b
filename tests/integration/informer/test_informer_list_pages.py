"""A paged LIST applied page by page (kube/engine/relist.py, Relister._list_page / _apply_page), with the cyclic
garbage collector held off while a page is parsed and applied (kube/engine/store.py, gc_paused): a broken page
fails the list like before and leaves the collector as it was, and an application that turned the
collector off keeps it off. The real kubernetes_asyncio client over real HTTP against scripted_server.ScriptedServer."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from aiohttp import web
from informer_helpers import eventually
from scripted_server import ScriptedServer, list_of, pod, start, stop, stream

from airflow_jobwatch.kube.engine.informer import EventType

# Every test here runs with each LIST page decoder (conftest.each_decoder).
pytestmark = pytest.mark.usefixtures("each_decoder")


def broken_page() -> Any:
    """A 200 answer whose JSON ends half-way (a proxy that cut the body, a server that crashed mid-answer)."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(
            body=b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[{"meta',
            content_type="application/json",
        )

    return answer


async def test_a_broken_page_fails_the_list_and_the_next_list_applies_every_page(server: ScriptedServer):
    """Page 2 of the first list is cut short: the list fails (no object of page 1 is delivered twice, none
    is invented), the collector is on again, and the retried list applies both pages."""
    page1 = list_of(pod("a", 5), pod("b", 6), rv=8, cont="next")
    page2 = list_of(pod("c", 7), rv=8)
    server.lists = [page1, broken_page(), page1, page2]
    server.watches = [stream()]
    assert gc.isenabled()
    informer, rec, client = await start(server)
    try:
        assert await informer.wait_synced(10)
        assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "b", "c"]
        assert [q.get("continue") for q in server.list_queries()[:4]] == [None, "next", None, "next"]
        assert informer.health.consecutive_failures == 0 and informer.health.last_error is not None
        assert "DecodeError" in informer.health.last_error  # json.JSONDecodeError or msgspec.DecodeError
        added = [uid for etype, uid, *_ in rec.events if etype is EventType.ADDED]
        assert sorted(added) == ["uid-a", "uid-b", "uid-c"]  # page 1's objects once, not once per try
        assert gc.isenabled()
    finally:
        await stop(informer, client)


async def test_the_collector_stays_off_when_the_application_turned_it_off(server: ScriptedServer):
    """Some applications run with gc.disable() (and collect at moments of their choosing): a list must not
    turn the collector back on behind their back."""
    server.lists = [list_of(pod("a", 5), rv=8, cont="next"), list_of(pod("b", 6), rv=8)]
    server.watches = [stream()]
    gc.disable()
    try:
        informer, _rec, client = await start(server)
        try:
            assert await informer.wait_synced(10)
            await eventually(lambda: len(server.watch_queries()) >= 1, what="the watch after the list")
            assert not gc.isenabled()
            assert len(informer.items()) == 2
        finally:
            await stop(informer, client)
    finally:
        gc.enable()

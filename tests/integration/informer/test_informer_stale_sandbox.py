"""Stale relists against the sandbox's stale watch-cache mode (sandbox API in
/work/wt/notes/sandbox-api.md "3d stale watch cache"): resourceVersion=0 and NotOlderThan lists are answered
from the state some revisions ago, `limit` is ignored on RV=0 lists, and a NotOlderThan list ahead of the
cache answers "Too large resource version".

While the cache lags and every watch ends in 410, pods keep running and finishing: none may be reported
deleted, and no terminal state may be lost or rolled back.
"""

from __future__ import annotations

import pytest
from informer_helpers import FAST, NS, Pods, api_client_for, consistent, eventually, running_informer

from airflow_jobwatch.kube.engine.informer import EventType, InformerConfig
from airflow_jobwatch_testing.sandbox import SandboxThread

pytestmark = [
    pytest.mark.skipif(
        not hasattr(SandboxThread, "set_watch_cache_lag"),
        reason="the sandbox's stale watch-cache mode (set_watch_cache_lag) has not landed yet",
    ),
    pytest.mark.usefixtures("each_store_form"),
]


async def test_running_pod_survives_relists_from_a_lagging_cache(make_sandbox, tmp_path):
    sandbox = make_sandbox()
    async with api_client_for(sandbox, tmp_path) as client:
        pods = Pods(client)
        await pods.create("early")
        async with running_informer(client) as (informer, rec):
            await pods.create("late")
            await pods.set_phase("late", "Running")
            await pods.set_phase("early", "Running")
            await pods.set_phase("early", "Succeeded")
            await consistent(informer, rec, sandbox)
            # RV=0 lists now show the namespace before "late" existed and before "early" finished ...
            sandbox.set_watch_cache_lag(4)
            # ... and every watch ends in 410, so the informer relists from resourceVersion 0, repeatedly.
            sandbox.set_watch_expired(True)
            await eventually(lambda: informer.health.relists >= 2, what="relists from the lagging cache")
            assert [e for e in rec.events if e[0] in (EventType.DELETED, EventType.DELETED_UNKNOWN)] == []
            assert informer.by_name(NS, "late")["status"]["phase"] == "Running"
            assert informer.by_name(NS, "early")["status"]["phase"] == "Succeeded"
            early = [e[3]["status"]["phase"] for e in rec.events if e[3]["metadata"]["name"] == "early"]
            assert early[-1] == "Succeeded" and early.count("Succeeded") == 1, early
            assert informer.stats["confirm_gets"] >= 1
            sandbox.set_watch_expired(False)
            sandbox.set_watch_cache_lag(0)
            await pods.delete("late")
            await consistent(informer, rec, sandbox)
            gone = [
                e[3]["metadata"]["name"]
                for e in rec.events
                if e[0] in (EventType.DELETED, EventType.DELETED_UNKNOWN)
            ]
            assert gone == ["late"], "a real deletion is still delivered, exactly once"


async def test_resync_beside_a_lagging_cache_reads_nothing_from_it(make_sandbox, tmp_path):
    """A periodic resync lists nothing: the lagging cache is never read, and what changes meanwhile comes
    by the resumed watch."""
    sandbox = make_sandbox()
    config = InformerConfig(**{**FAST.__dict__, "resync_interval_seconds": 0.5})
    async with api_client_for(sandbox, tmp_path) as client:
        pods = Pods(client)
        await pods.create("a")
        async with running_informer(client, config=config) as (informer, rec):
            await pods.set_phase("a", "Running")
            await consistent(informer, rec, sandbox)
            sandbox.set_watch_cache_lag(50)
            await pods.create("b")
            resyncs_before = sum(1 for e in rec.events if e[0] is EventType.MODIFIED)
            await eventually(
                lambda: sum(1 for e in rec.events if e[0] is EventType.MODIFIED) >= resyncs_before + 4,
                what="two periodic resyncs",
            )
            await eventually(lambda: informer.by_name(NS, "b") is not None, what="b, by the watch")
            assert informer.health.relists == 0
            assert informer.stats["too_large_rv"] == 0
            sandbox.set_watch_cache_lag(0)
            await consistent(informer, rec, sandbox)
            assert [e for e in rec.events if e[0] in (EventType.DELETED, EventType.DELETED_UNKNOWN)] == []


async def test_limit_ignored_on_rv0_lists_is_detected(make_sandbox, tmp_path):
    sandbox = make_sandbox(watch_cache=True)  # a watch cache answers RV=0 lists whole, ignoring limit
    async with api_client_for(sandbox, tmp_path) as client:
        pods = Pods(client)
        for i in range(FAST.page_size * 2):
            await pods.create(f"p{i}")
        async with running_informer(client) as (informer, rec):
            assert len(informer.items()) == FAST.page_size * 2
            assert informer.limit_ignored
